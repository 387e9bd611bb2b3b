"""A history built once per test module and copied into each test that asks for the same one.

Building a history (writing bundles, validating and ingesting them) is the costly part of many
detection and alert tests, and most tests of a module start from the same few histories. The
first test to ask for a history builds it through the real ingest; later tests get a byte copy of
that DuckDB file, which is the same history, and go on to change their copy as they please.
"""

from __future__ import annotations

import shutil
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
