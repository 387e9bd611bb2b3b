"""A history file as an older attnwatch left it: migrated only up to a given version."""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb

from attnwatch.history.store.migrations import MIGRATIONS_DIR, available_migrations, migrate


def history_at_version(db_path: Path, version: int, scratch: Path) -> Path:
    """Create `db_path` with migrations 1..`version` only (copied into `scratch`); return it."""
    early = scratch / f"migrations-{version}"
    early.mkdir(parents=True, exist_ok=True)
    for m in available_migrations()[:version]:
        shutil.copy(MIGRATIONS_DIR / f"{m.version:03d}_{m.name}.sql", early)
    con = duckdb.connect(str(db_path))
    try:
        assert migrate(con, str(db_path), early) == list(range(1, version + 1))
    finally:
        con.close()
    return db_path
