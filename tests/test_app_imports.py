"""The dashboard never renders data as markup. (Which packages app/ may import is checked with
the other layers' rules in tests/test_import_rules.py.)"""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"


def test_no_page_renders_html_from_data():
    """unsafe_allow_html and st.html are never used: untrusted text cannot become markup."""
    sources = sorted(APP.rglob("*.py"))
    assert len(sources) >= 10
    for path in sources:
        text = path.read_text(encoding="utf-8")
        assert "unsafe_allow_html" not in text, path
        assert "st.html(" not in text, path
