"""User SQL on a lake: what DuckDB's own lock-down does not cover there, refused before it runs.

A lake connection has the PostgreSQL and DuckLake extensions loaded, and with them functions
that `enable_external_access = false` does not stop (checked with DuckDB 1.5.5):
`postgres_query('__ducklake_metadata_history', ...)` runs SQL on the catalog server with the
catalog's role (a superuser can read server files with it), `postgres_scan`/`postgres_attach`
open connections to any server with this process's libpq credentials, and `ducklake_*`
maintenance functions change the lake. So on a lake user SQL must be one SELECT (DESCRIBE,
SHOW and SUMMARIZE are SELECTs) whose syntax tree (`json_serialize_sql`) calls
  - no function that the lake's extensions add (found by comparing a plain DuckDB with one
    that loaded them), except the read-only ones in ALLOWED_EXTENSION_FUNCTIONS,
  - no function that runs SQL given as text (query, query_table, json_execute_serialized_sql),
and names no catalog but the history's own (not the `__ducklake_metadata_*` catalog).
The catalog role the dashboard uses should be a read-only one as well (README, team set-up).
"""

from __future__ import annotations

import json
from functools import lru_cache

import duckdb

from history import lake
from history.errors import QueryError

TEXT_AS_SQL = frozenset({"query", "query_table", "json_execute_serialized_sql"})
ALLOWED_EXTENSION_FUNCTIONS = frozenset({
    "ducklake_snapshots", "ducklake_table_info", "ducklake_current_snapshot", "ducklake_last_committed_snapshot",
    "murmur3_32",
})
ALLOWED_CATALOGS = frozenset({"", lake.ALIAS, "memory", "system", "temp"})


@lru_cache(maxsize=1)
def extension_functions() -> frozenset[str]:
    """Functions a lake connection has that a plain DuckDB has not."""
    names = "SELECT DISTINCT lower(function_name) FROM duckdb_functions()"
    plain = duckdb.connect(":memory:", config=lake.BASE_CONFIG)
    loaded = duckdb.connect(":memory:", config=lake.BASE_CONFIG)
    try:
        before = {r[0] for r in plain.execute(names).fetchall()}
        for extension, package in lake.EXTENSIONS.items():
            loaded.execute(f"LOAD '{str(lake.extension_path(extension, package))}'")
        return frozenset({r[0] for r in loaded.execute(names).fetchall()} - before)
    finally:
        plain.close()
        loaded.close()


def refuse_unsafe_lake_sql(con, sql: str) -> None:
    """Raise QueryError unless `sql` is one SELECT that keeps to the lake (module docstring)."""
    tree = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0])
    if tree.get("error"):
        message = tree.get("error_message", "")
        if "Only SELECT" in message:
            raise QueryError("a lake history answers SELECT statements only (DESCRIBE, SHOW and SUMMARIZE "
                             "included); this statement is not one")
        raise QueryError(message or "the statement could not be parsed")
    blocked = (extension_functions() - ALLOWED_EXTENSION_FUNCTIONS) | TEXT_AS_SQL
    for node in _nodes(tree):
        name = node.get("function_name")
        if isinstance(name, str) and name.lower() in blocked:
            raise QueryError(f"{name}: this function is not available to SQL on a lake history")
        for key in ("catalog_name", "catalog"):
            catalog = node.get(key)
            if isinstance(catalog, str) and catalog.lower() not in ALLOWED_CATALOGS:
                raise QueryError(f"{catalog}: SQL on a lake history reads the history's own tables only")


def _nodes(tree):
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
