"""Every TOML data file of the package is read through attnwatch/toml_reader.py: one place that
turns a missing, unreadable or malformed file into a one-line error naming the file.

The source scan (`ast`, nothing imported) covers the package: app/, ci/, history/, kernels/ and
attnwatch/ itself. scripts/ and tests/ are exempt: a tool or a test may read a TOML block its own
way (a pyproject table, a document's example), and neither ships in the wheel."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from attnwatch.app.data.sql_console import examples
from attnwatch.history.sql.guard import named_reasons
from attnwatch.toml_reader import read_toml

ROOT = Path(__file__).resolve().parent.parent
READER = ROOT / "attnwatch" / "toml_reader.py"
SCANNED = ("attnwatch",)  # every layer is a folder of it
EXEMPT_LINKS = {"scripts"}  # attnwatch/scripts: a link to the checkout's tools, not the package


def _package_sources() -> list[Path]:
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).parts
            if rel[0] == "attnwatch" and len(rel) > 1 and rel[1] in EXEMPT_LINKS:
                continue
            found.append(path)
    return found


def _tomllib_uses(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == "tomllib" for a in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "tomllib":
            lines.append(node.lineno)
    return lines


def test_no_module_but_the_reader_imports_tomllib():
    sources = _package_sources()
    assert READER in sources and len(sources) >= 200
    direct = [f"{p.relative_to(ROOT)}:{line}" for p in sources if p != READER for line in _tomllib_uses(p)]
    assert direct == []


def test_the_scan_finds_a_planted_direct_read(tmp_path):
    planted = tmp_path / "m.py"
    planted.write_text("def f(p):\n    import tomllib\n    return tomllib.loads(p)\n", encoding="utf-8")
    assert _tomllib_uses(planted) == [2]


class _Bad(ValueError):
    pass


def test_each_fault_is_one_line_naming_the_file(tmp_path):
    missing = tmp_path / "absent.toml"
    with pytest.raises(_Bad, match=r"absent\.toml: limits file not found$"):
        read_toml(missing, "limits", _Bad)
    assert read_toml(missing, "limits", _Bad, missing_ok=True) is None
    broken = tmp_path / "broken.toml"
    broken.write_text("[table\n", encoding="utf-8")
    with pytest.raises(_Bad, match=r"broken\.toml: not valid TOML: ") as bad:
        read_toml(broken, "limits", _Bad)
    assert "\n" not in str(bad.value)
    latin = tmp_path / "latin.toml"
    latin.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    with pytest.raises(_Bad, match=r"latin\.toml: not valid TOML"):
        read_toml(latin, "limits", _Bad)
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    with pytest.raises(_Bad, match=r"folder\.toml: cannot read the limits file: "):
        read_toml(folder, "limits", _Bad)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_file_is_named(tmp_path):
    locked = tmp_path / "locked.toml"
    locked.write_text("a = 1\n", encoding="utf-8")
    locked.chmod(0)
    with pytest.raises(_Bad, match=r"locked\.toml: cannot read the limits file: Permission denied"):
        read_toml(locked, "limits", _Bad)


def test_a_malformed_examples_file_names_itself(tmp_path):
    """The SQL console's examples were parsed bare: a malformed file raised tomllib's own message,
    which names no file."""
    path = tmp_path / "examples.toml"
    path.write_text("[[example]\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"examples\.toml: not valid TOML"):
        examples(path)


def test_a_missing_sql_name_list_is_a_one_line_error(tmp_path):
    """The SQL gate's name lists were read bare: a missing list raised FileNotFoundError."""
    with pytest.raises(ValueError, match=r"denied\.toml: SQL name list file not found"):
        named_reasons(tmp_path / "denied.toml", "function")
