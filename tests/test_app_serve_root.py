"""The index.html `attnwatch dashboard` serves names the app's root before Streamlit's client
starts, so a page opened by its URL (`/trends`) does not probe `/trends/_stcore/health` and
`/trends/_stcore/host-config` first (two 404s in the console, issue 44; streamlit/streamlit#7074).
Built from the Streamlit installed here; the browser walk in tests/test_browser_demo.py checks
the console itself."""

from __future__ import annotations

from pathlib import Path

from streamlit import file_util

from attnwatch.app.serve import ROOT_SCRIPT, static_dir_naming_the_root


def test_the_served_index_names_the_root_before_streamlit_s_script(tmp_path):
    shipped = Path(file_util.get_static_dir())
    served = static_dir_naming_the_root(shipped, tmp_path)
    html = (served / "index.html").read_text(encoding="utf-8")
    assert html.count(ROOT_SCRIPT) == 1 and html.index(ROOT_SCRIPT) < html.index('<script type="module"')
    assert "BACKEND_BASE_URL" in ROOT_SCRIPT and 'new URL(".", document.baseURI)' in ROOT_SCRIPT
    # everything else is Streamlit's own, unchanged
    assert html.replace("\n    " + ROOT_SCRIPT, "", 1) == (shipped / "index.html").read_text(encoding="utf-8")
    others = sorted(p.name for p in shipped.iterdir() if p.name != "index.html")
    assert others and sorted(p.name for p in served.iterdir() if p.name != "index.html") == others
    assert all((served / name).resolve() == (shipped / name).resolve() for name in others)
