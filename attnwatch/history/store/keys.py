"""The natural keys of every table, read from the shipped migrations themselves.

A history file declares its keys (PRIMARY KEY, UNIQUE); a DuckLake cannot (history.store.lake_ddl).
Code that must know a table's key on both (export order, import's "is this row already here",
the lake's claims) asks here: the migrations are applied to a private in-memory DuckDB, whose
constraints are then read, so a new migration's keys are known without a second list to maintain.
"""

from __future__ import annotations

from functools import lru_cache

from attnwatch.history.store import sealed
from attnwatch.history.store.migrations import MIGRATIONS_DIR, migrate


@lru_cache(maxsize=4)
def declared_keys(directory=MIGRATIONS_DIR) -> dict[str, tuple[tuple[str, ...], ...]]:
    """table -> its keys (the PRIMARY KEY first, then each UNIQUE), each a tuple of columns."""
    con = sealed.connect()
    try:
        migrate(con, "declared keys", directory)
        rows = con.execute(
            "SELECT table_name, constraint_type, constraint_column_names FROM duckdb_constraints() "
            "WHERE schema_name = 'main' AND constraint_type IN ('PRIMARY KEY', 'UNIQUE') "
            "ORDER BY table_name, constraint_type <> 'PRIMARY KEY', constraint_index"
        ).fetchall()
    finally:
        con.close()
    keys: dict[str, list[tuple[str, ...]]] = {}
    for table, _kind, columns in rows:
        keys.setdefault(table, []).append(tuple(columns))
    return {table: tuple(found) for table, found in keys.items()}


def primary_key(table: str) -> tuple[str, ...]:
    """The table's first declared key (its PRIMARY KEY where it has one); () if none."""
    found = declared_keys().get(table, ())
    return found[0] if found else ()


def single_column_keys(table: str) -> list[str]:
    """Columns that are a key on their own: what a lake transaction claims per new row."""
    return [key[0] for key in declared_keys().get(table, ()) if len(key) == 1]
