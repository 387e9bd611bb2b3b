"""docs/howto/add-a-dashboard-page.md followed in a copy of the checkout: the page's data module,
view, its one declaration and its two doc lines make a page that renders a real history's rows
under Streamlit's AppTest, and that the page checks (the docs' lists, views against
declarations) admit."""

from __future__ import annotations

import json
import tarfile

from howto_support import ROOT, code_blocks, copy_checkout, insert_after, run_in

PAGE = "add-a-dashboard-page.md"
BUNDLES = ROOT / "tests" / "data" / "bundles" / "h200-main-fp16-3225df5.tgz"  # one H200 main run

# In the copy's interpreter: the app on the history, switched to the new page; what it drew.
RENDER = """
import json, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=120)
at.run()
at.switch_page("views/run_counts.py").run()
print(json.dumps({"exceptions": [e.value for e in at.exception], "titles": [t.value for t in at.title],
                  "tables": [f.value.astype(str).to_dict("records") for f in at.dataframe]}))
"""


def test_the_page_of_the_howto_renders_and_is_documented(tmp_path):
    data_module, view, declaration = code_blocks(PAGE, "python")
    (design_line,) = code_blocks(PAGE, "text")
    (reference_entry,) = code_blocks(PAGE, "markdown")
    copy = copy_checkout(tmp_path / "checkout")
    (copy / "app" / "data" / "run_counts.py").write_text(data_module, encoding="utf-8")
    (copy / "app" / "views" / "run_counts.py").write_text(view, encoding="utf-8")
    insert_after(copy / "history" / "links.py", 'Page("run", ', declaration)
    design = copy / "docs" / "design.md"
    text = design.read_text(encoding="utf-8")
    assert text.count("Run (one run in full).") == 1
    design.write_text(text.replace("Run (one run in full).", design_line.strip()), encoding="utf-8")
    reference = copy / "docs" / "reference" / "dashboard.md"
    text = reference.read_text(encoding="utf-8")
    run_entry = text.index("\n- **Run**:")
    end = text.index("\n\n", run_entry) + 1
    reference.write_text(text[:end] + reference_entry + text[end:], encoding="utf-8")

    with tarfile.open(BUNDLES) as archive:
        archive.extractall(tmp_path / "bundles", filter="data")
    db = tmp_path / "history.duckdb"
    ingested = run_in(copy, "-m", "attnwatch", "--db", str(db), "ingest", *map(str, (tmp_path / "bundles").iterdir()))
    assert ingested.returncode == 0, ingested.stderr

    drawn = run_in(copy, "-c", RENDER, str(copy / "app" / "streamlit_app.py"), env={"ATTNWATCH_DB": str(db)})
    assert drawn.returncode == 0, drawn.stderr
    page = json.loads(drawn.stdout.strip().splitlines()[-1])
    assert page["exceptions"] == [] and "Run counts" in page["titles"]
    assert [(row["gpu"], row["runs"]) for row in page["tables"][0]] == [("NVIDIA H200", "1")]

    listed = run_in(
        copy,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "tests/test_dashboard_pages.py",
        "tests/test_design_doc.py::test_the_dashboard_section_lists_every_page_with_the_first_one_first",
    )
    assert listed.returncode == 0, listed.stdout + listed.stderr
