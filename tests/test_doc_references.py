"""Every module and file the docs and docstrings name exists.

A newcomer copies `python -m …` lines and follows `history/store/db.py`-style paths from the
README, docs/ and module docstrings; a renamed module leaves them pointing nowhere. Checked in
every tracked text file except tests/ (whose fixtures name made-up files on purpose) and
examples/ (whose paths are relative to the repository that adopts attnwatch):
  - `python -m MODULE`: MODULE can be found, and a project module is named `attnwatch.…` (a bare
    `ci.…` from the checkout's root loads a second copy of every module it imports);
  - a path under one of the project's folders names a file or folder that exists, or, written
    "`scripts/x.py` at <commit>" (the provenance of a figure whose one-off script is removed),
    a file that the commit holds;
  - a backticked dotted reference to a project module (`attnwatch.ci.supervisor`, `history.store.db`,
    optionally ending in a name the module defines) resolves.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("app", "ci", "history", "kernels")
_FOLDERS = "app|ci|history|kernels|scripts|docs|tests|examples|build_backend|\\.github|\\.ci"
_PATH = re.compile(
    rf"(?<![\w/.-])((?:{_FOLDERS})/[\w./-]*\.(?:py|toml|md|sql|cuh|cu|json|yml|yaml|sh|tgz|csv|gz)(?![\w]))"
)
_RUN_MODULE = re.compile(r"python3? -m ([A-Za-z_][\w.]*\w)")
_DOTTED = re.compile(rf"`((?:attnwatch\.)?(?:{'|'.join(PACKAGES)})\.[a-z_]\w*(?:\.[A-Za-z_]\w*)*)`")
_FILE_NAME = re.compile(r"\.(?:yml|yaml|toml|md|json|py|sql|duckdb|tgz)$")  # `ci.yml` is a file, not a module
_TEMPLATE = re.compile(r"NNN|<[^>]*>|\*")


def _texts() -> list[tuple[str, str]]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout
    names = [
        n
        for n in listed.splitlines()
        if not n.startswith(("tests/", "examples/"))
        and (n.endswith((".py", ".md", ".yml", ".yaml", ".toml")) or n == "Makefile")
    ]
    return [(n, (REPO_ROOT / n).read_text(encoding="utf-8", errors="replace")) for n in names]


def _module_file(dotted: str) -> Path | None:
    """The file of `attnwatch.x.y` (under attnwatch/), or of a short `x.y` (a top-level name,
    or attnwatch/cli, the layer without one)."""
    parts = dotted.split(".")
    package = REPO_ROOT / "attnwatch"
    for path in (
        [REPO_ROOT.joinpath(*parts)]
        if parts[0] == "attnwatch"
        else [REPO_ROOT.joinpath(*parts), package.joinpath(*parts)]
    ):
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
        if path.is_dir():
            return path / "__init__.py" if (path / "__init__.py").is_file() else path
    return None


def _dotted_resolves(ref: str) -> bool:
    parts = ref.split(".")
    minimum = 3 if parts[0] == "attnwatch" else 2
    for k in range(len(parts), minimum - 1, -1):
        found = _module_file(".".join(parts[:k]))
        if found is None:
            continue
        rest = parts[k:]
        if not rest or found.is_dir():
            return not rest
        name = re.escape(rest[0])
        source = found.read_text(encoding="utf-8")
        return bool(
            re.search(
                rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*[:=]|^from .* import .*\b{name}\b",
                source,
                re.M,
            )
        )
    return False


def _module_found(module: str) -> bool:
    sys.path.insert(0, str(REPO_ROOT))
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
    finally:
        sys.path.remove(str(REPO_ROOT))


def test_every_python_dash_m_names_a_module_that_exists():
    wrong = set()
    for name, text in _texts():
        for module in _RUN_MODULE.findall(text):
            if module.split(".")[0] in PACKAGES or not _module_found(module):
                wrong.add(f"{name}: python -m {module}")
    assert not wrong, "\n".join(sorted(wrong))


_AT_COMMIT = re.compile(r"`? at `?([0-9a-f]{7,40})\b")


def _path_found(path: str, after: str) -> bool:
    """The path exists now, or, followed by "at <commit>", existed in that commit."""
    at = _AT_COMMIT.match(after)
    if at is None:
        return (REPO_ROOT / path).exists()
    shown = subprocess.run(["git", "cat-file", "-e", f"{at.group(1)}:{path}"], cwd=REPO_ROOT, capture_output=True)
    return shown.returncode == 0


def test_every_repository_path_named_exists():
    missing = {
        f"{name}: {m.group(1)}"
        for name, text in _texts()
        for m in _PATH.finditer(text)
        if not _TEMPLATE.search(m.group(1)) and not _path_found(m.group(1).rstrip("."), text[m.end() : m.end() + 50])
    }
    assert not missing, "\n".join(sorted(missing))


@pytest.mark.parametrize(
    "path, after, found",
    [
        ("scripts/import_graph.py", "", True),
        ("scripts/no_such_script.py", "", False),
        ("history/toml_files.py", "` at 428bac4, H200", True),  # removed since; the commit holds it
        ("history/toml_files.py", ", a leaf", False),
        ("scripts/no_such_script.py", " at 428bac4", False),
    ],
)
def test_a_removed_file_is_cited_at_a_commit_that_holds_it(path, after, found):
    assert _path_found(path, after) is found


def test_every_backticked_module_reference_resolves():
    wrong = {
        f"{name}: {ref}"
        for name, text in _texts()
        for ref in _DOTTED.findall(text)
        if not _FILE_NAME.search(ref) and not _dotted_resolves(ref)
    }
    assert not wrong, "\n".join(sorted(wrong))


@pytest.mark.parametrize(
    "ref, resolves",
    [
        ("attnwatch.history.store.db", True),
        ("history.store.db", True),
        ("history.store.db.open_read", True),
        ("history.store.no_such_module", False),
        ("history.store.db.no_such_name", False),
        ("attnwatch.cli.main", True),
        ("cli.commands.run", True),
        ("attnwatch.ci.cli", False),
    ],
)
def test_the_resolver_tells_real_from_stale(ref, resolves):
    assert _dotted_resolves(ref) is resolves


def test_every_script_is_in_the_scripts_index():
    """scripts/README.md lists every tool with its purpose and when to run it: a script missing
    there is either a one-off to remove once recorded or a tool a newcomer cannot find."""
    index = (REPO_ROOT / "scripts" / "README.md").read_text(encoding="utf-8")
    missing = sorted(p.name for p in (REPO_ROOT / "scripts").glob("*.py") if f"`{p.name}`" not in index)
    assert not missing, f"not in scripts/README.md: {missing}"
