"""A history built once and copied into each test that asks for the same one.

Building a history (writing bundles, validating and ingesting them) is the costly part of many
detection, alert and page tests, and most of them start from the same few histories. The first
test to ask for a history builds it through the real ingest; later tests get a byte copy of that
DuckDB file, which is the same history, and go on to change their copy as they please. A test
module's own histories live as long as the module (`ModuleHistories`); the shared builders of
tests/app_history.py, which dozens of modules call, once per test process (`built_once`).
"""

from __future__ import annotations

import atexit
import copy
import functools
import shutil
import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path

import pytest


class HistoryCopies:
    """Histories by key, kept in `folder` (a module's temporary directory)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.built: dict[Hashable, Path] = {}

    def make(self, key: Hashable, db_path: Path, build: Callable[[Path], None]) -> None:
        """Make the history `key` at the new path `db_path`: `build(db_path)` the first time, a
        copy of that file afterwards."""
        assert not db_path.exists(), f"{db_path} exists: only a new history can be a copy"
        kept = self.built.get(key)
        if kept is not None:
            shutil.copyfile(kept, db_path)
            return
        build(db_path)
        assert not db_path.with_name(db_path.name + ".wal").exists(), "the history was left open"
        kept = self.folder / f"history-{len(self.built)}.duckdb"
        shutil.copyfile(db_path, kept)
        self.built[key] = kept


class ModuleHistories:
    """A test module's HistoryCopies, made afresh for each run of the module by the fixture that
    `fixture()` returns (assign it to a module attribute, where pytest finds it)."""

    def __init__(self) -> None:
        self._copies: HistoryCopies | None = None

    def make(self, key: Hashable, db_path: Path, build: Callable[[Path], None]) -> None:
        assert self._copies is not None, "the module's history fixture is not active"
        self._copies.make(key, db_path, build)

    def fixture(self):
        @pytest.fixture(scope="module", autouse=True)
        def module_histories(tmp_path_factory):
            self._copies = HistoryCopies(tmp_path_factory.mktemp("histories"))
            yield
            self._copies = None

        return module_histories


def built_once(build):
    """`build(db_path, work_dir)`, which writes its bundles under `work_dir`, ingests them into
    `db_path` and returns named ids, run once per test process: each call gets a copy of the
    history and of the bundle folders, and a copy of the ids. The first build goes to a folder of
    the process's own, removed at its exit. A history that already exists at `db_path` is built
    into, as before (a copy would replace it)."""
    copies: HistoryCopies | None = None
    returned = None

    @functools.wraps(build)
    def copy_of_built(db_path: Path, work_dir: Path):
        nonlocal copies
        db_path, work_dir = Path(db_path), Path(work_dir)
        if db_path.exists():
            return build(db_path, work_dir)
        if copies is None:
            folder = Path(tempfile.mkdtemp(prefix=f"built-{build.__name__}-"))
            atexit.register(shutil.rmtree, folder, True)
            copies = HistoryCopies(folder)
        bundles = copies.folder / "bundles"

        def first_build(path: Path) -> None:
            nonlocal returned
            returned = build(path, bundles)

        db_path.parent.mkdir(parents=True, exist_ok=True)
        copies.make(build.__name__, db_path, first_build)
        shutil.copytree(bundles, work_dir, dirs_exist_ok=True)
        return copy.deepcopy(returned)

    return copy_of_built
