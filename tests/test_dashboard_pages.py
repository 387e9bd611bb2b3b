"""The dashboard's pages are declared once (history.links.PAGES): every view in app/views/ is one
of them and draws its own title, the navigation is built from the declaration, and the page list
of docs/reference/dashboard.md names exactly those pages in their order. (docs/design.md's list:
tests/test_design_doc.py.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from attnwatch.history.links import PAGES, page_by_key

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ROOT / "app" / "views"
REFERENCE = ROOT / "docs" / "reference" / "dashboard.md"


def _run_page_keys(view: Path) -> list[str]:
    """The first arguments of the view's `ui.run_page(...)` calls, read from its source."""
    calls = [
        node
        for node in ast.walk(ast.parse(view.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "run_page"
    ]
    return [call.args[0].value for call in calls if call.args and isinstance(call.args[0], ast.Constant)]


def test_every_view_is_a_declared_page_and_every_page_has_its_view():
    assert [page.key for page in PAGES] == list(dict.fromkeys(page.key for page in PAGES)), "a key declared twice"
    assert {view.stem for view in VIEWS.glob("*.py")} == {page.key for page in PAGES}


def test_every_view_draws_its_own_declared_title():
    for page in PAGES:
        assert _run_page_keys(ROOT / "app" / page.script) == [page.key], page.script


def test_the_navigation_is_the_declaration_in_its_order(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_DB", str(tmp_path / "none.duckdb"))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=60)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [t.value for t in at.title] == [PAGES[0].title]  # the first page is what the root opens
    for page in PAGES[1:]:
        at.switch_page(page.script).run()
        assert [t.value for t in at.title] == [page.title], page.key


def test_links_take_each_page_s_path_and_refuse_an_undeclared_one():
    assert [page.path for page in PAGES] == ["", *(page.key for page in PAGES[1:])]
    assert page_by_key("trends") is PAGES[2]
    with pytest.raises(ValueError, match=r"^unknown dashboard page 'nope' \(known: push, overview, "):
        page_by_key("nope")


def test_the_reference_lists_every_page_in_the_navigation_s_order():
    text = REFERENCE.read_text(encoding="utf-8")
    section = text.split("## The pages", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^- \*\*([^*]+)\*\*", section, re.MULTILINE)
    assert listed == [page.title for page in PAGES]
