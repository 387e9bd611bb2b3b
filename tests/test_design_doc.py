"""docs/design.md is in the repository, every citation of it names one of its sections, and its
claims about the dashboard's writes and pages, the median, the reference variant and the
settings match the code."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

from attnwatch.history.links import PAGES

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
CITATION = re.compile(r'docs/design\.md,?\s+"([^"]+)"')  # a citation may wrap across lines
# A shipped migration is never edited (its checksum is recorded in every history), so this
# one keeps its comment naming the design document of its day.
FROZEN = {"attnwatch/history/store/migrations/003_ncu_roofline.sql"}


def _headings() -> set[str]:
    return {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", DESIGN.read_text(encoding="utf-8"), re.MULTILINE)}


def _tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [
        ROOT / n
        for n in names
        if n.endswith((".py", ".md", ".toml", ".sql", ".yml", ".cu", ".cuh", ".txt")) or n in ("Makefile",)
    ]


def test_design_doc_has_the_sections_the_project_relies_on():
    headings = _headings()
    assert {
        "Layers and the direction of imports",
        "Data flow",
        "Run bundle",
        "Measurement recipe",
        "Detection",
        "Security rules",
        "Fleet history",
        "Threat model",
    } <= headings


def test_every_citation_names_an_existing_section():
    headings = _headings()
    cited = {}
    for path in _tracked_text_files():
        for section in CITATION.findall(path.read_text(encoding="utf-8", errors="replace")):
            cited.setdefault(" ".join(section.split()), []).append(str(path.relative_to(ROOT)))
    assert len(cited) >= 6
    assert {s: files for s, files in cited.items() if s not in headings} == {}


def test_no_file_points_to_a_design_document_that_is_not_in_the_repository():
    stale = [
        str(p.relative_to(ROOT))
        for p in _tracked_text_files()
        if "DESIGN.md" in p.read_text(encoding="utf-8", errors="replace")
        and str(p.relative_to(ROOT)) not in FROZEN
        and p != Path(__file__).resolve()
    ]
    assert stale == []


def _section(heading: str) -> str:
    """The text under `## heading` up to the next heading of the same or a higher level."""
    text = DESIGN.read_text(encoding="utf-8")
    found = re.search(rf"^(#+) {re.escape(heading)}\n(.*?)(?=^#{{1,{2}}} |\Z)", text, re.MULTILINE | re.DOTALL)
    assert found, heading
    return found.group(2)


def _history_writers() -> dict[str, set[str]]:
    """history module -> its public functions that write: those that open a writing connection,
    run a write transaction or migrate, or call a function of their module that does."""
    tokens = ("open_write(", "write_transaction(", "migrate(")  # connect_with_retry also opens readers
    writers = {}
    for path in (ROOT / "history").rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        bodies = {
            node.name: ast.get_source_segment(source, node) or ""
            for node in ast.parse(source).body
            if isinstance(node, ast.FunctionDef)
        }
        writing = {name for name, body in bodies.items() if any(t in body.split(":", 1)[-1] for t in tokens)}
        while True:  # a function calling a writer of its own module writes too
            more = {
                name
                for name, body in bodies.items()
                if name not in writing and any(re.search(rf"\b{w}\(", body.split(":", 1)[-1]) for w in writing)
            }
            if not more:
                break
            writing |= more
        module = ".".join(("attnwatch", *path.relative_to(ROOT).with_suffix("").parts))
        writers[module] = {name for name in writing if not name.startswith("_")}
    return writers


def _app_modules_that_write() -> set[str]:
    """The app modules that call one of history's writers (through `from attnwatch.history.x import f`
    or `from attnwatch.history import x as alias` then `alias.f(...)`)."""
    writers = _history_writers()
    found = set()
    for path in (ROOT / "app").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names, modules = set(), {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attnwatch.history"):
                for alias in node.names:
                    if alias.name in writers.get(node.module, set()):
                        names.add(alias.asname or alias.name)
                    if f"{node.module}.{alias.name}" in writers:
                        modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in names:
                found.add(str(path.relative_to(ROOT)))
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id in modules
                and func.attr in writers[modules[func.value.id]]
            ):
                found.add(str(path.relative_to(ROOT)))
    return found


def test_the_dashboard_section_names_every_module_that_writes_and_only_those():
    """The dashboard is not read-only: its first page view may migrate, and the Alerts page
    writes. The section's paragraph names exactly the app modules that call a history writer."""
    section = _section("Dashboard")
    assert "**What the dashboard writes.**" in section
    paragraph = section.split("**What the dashboard writes.**", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(app/[\w/]+\.py)`", paragraph))
    writing = _app_modules_that_write()
    assert writing == {"app/data/store.py", "app/data/alerts.py"}  # if this changes, so must the doc
    assert writing == {m for m in named if m.startswith("app/data/")}
    assert all((ROOT / m).is_file() for m in named)
    assert (
        "`history.store.db.upgrade`" in paragraph
        and "Alerts page" in paragraph
        and "No other page writes." in paragraph
    )
    assert "read-only short-lived connections)" not in _section("Data flow")  # the old claim, unqualified


def test_the_dashboard_section_lists_every_page_with_the_first_one_first():
    """The "Pages:" list names every page of the one declaration (history.links.PAGES), in its order."""
    first = PAGES[0]
    assert first.title == "This push"
    section = " ".join(_section("Dashboard").split())
    assert f"Pages: {first.title} (the first page, `app/{first.script}`" in section
    positions = [section.find(f"{page.title} (") for page in PAGES]
    assert -1 not in positions and positions == sorted(positions), "every page, in the app's order"


def test_the_median_is_the_one_history_statistics_defines():
    from attnwatch.history.analysis.statistics import summarize

    metrics = _section("Metrics")
    assert "**the median**" in metrics
    claim = metrics.split("**the median**", 1)[1].split("\n- ", 1)[0]
    assert "`history/analysis/statistics.py`" in claim and "mean of the two middle values" in claim
    assert summarize([1.0, 2.0, 4.0, 10.0]).median_us == 3.0  # what the claim says, for an even count
    assert "summarize(kept)" in (ROOT / "ci" / "timing" / "derived.py").read_text(encoding="utf-8")


def test_the_baseline_the_doc_names_is_the_operator_s_one_declaration():
    from attnwatch.kernels import registry

    section = _section("Kernel variants")
    named = re.findall(r"`(\w+)` \(the baseline\b", section)
    assert named == [registry.reference().name]
    assert "`Variant.operator`" in section and "`RunPlan.baselines`" in section and "`kernels/operators.py`" in section
    assert not [
        p for p in (ROOT / "ci").rglob("*.py") if re.search(r"^BASELINE\s*=", p.read_text(encoding="utf-8"), re.M)
    ]


def test_the_settings_section_names_the_one_reader_and_its_test():
    section = _section("Settings")
    assert "`ci/run_config.py` is the one reader" in section and "`tests/test_run_config.py`" in section
    for path in re.findall(r"`((?:ci|config|kernels)/[\w/]+\.toml)`", section):
        assert (ROOT / path).is_file(), path
