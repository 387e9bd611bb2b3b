"""The dashboard reads the history and nothing else: `app` never imports `ci` or `kernels`
(DESIGN.md, "Layout and the direction of imports"). Checked on the source, every module."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
FORBIDDEN = {"ci", "kernels", "scripts"}


def imported_top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_app_imports_only_history_from_the_project():
    sources = sorted(APP.rglob("*.py"))
    assert len(sources) >= 10
    offenders = {str(p.relative_to(APP)): sorted(imported_top_level_names(p) & FORBIDDEN) for p in sources}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_page_renders_html_from_data():
    """unsafe_allow_html and st.html are never used: untrusted text cannot become markup."""
    for path in APP.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "unsafe_allow_html" not in text, path
        assert "st.html(" not in text, path
