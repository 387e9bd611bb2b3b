"""User SQL over the history, locked down by DuckDB's own configuration.

Each query gets its own short-lived connection that is
  - read-only (no INSERT / CREATE / DROP / UPDATE on the file),
  - `enable_external_access = false` (no COPY ... TO, ATTACH, EXPORT DATABASE, read_csv of
    arbitrary files, INSTALL / LOAD of extensions from disk),
  - `lock_configuration = true` (no SET / PRAGMA / RESET undoing any of this),
  - limited in memory and threads, with extension auto-install/auto-load off,
and the query is interrupted from a timer thread (`connection.interrupt()`) after the time
limit. One statement per call; at most `max_rows` rows are fetched (the frame says whether
it was cut). Both `attnwatch sql` and the dashboard's SQL page come through here.

On a lake (history.location) the connection is attached read-only before external access is
turned off and the configuration locked (history.lake), and history.sql_gate refuses what that
leaves open there: anything but a SELECT, the PostgreSQL and DuckLake extensions' functions,
and the catalog database.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa

from history.db import open_read
from history.errors import HistoryError, QueryError
from history.location import parse_location
from history.sql_gate import refuse_unsafe_lake_sql

DEFAULT_MAX_ROWS = 100_000
DEFAULT_TIMEOUT_S = 30.0
MAX_SQL_CHARS = 100_000

SANDBOX_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "memory_limit": "2GB",
    "threads": 2,
    "lock_configuration": True,  # last: nothing above can be changed by the query
}


def sandbox_config(memory_limit: str | None = None, threads: int | None = None) -> dict:
    config = dict(SANDBOX_CONFIG)
    if memory_limit:
        config["memory_limit"] = memory_limit
    if threads:
        config["threads"] = threads
    return config


def run_user_sql(
    db_path: str | Path,
    sql: str,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = None,
    threads: int | None = None,
) -> pd.DataFrame:
    """Run one user statement; return its rows as a DataFrame.

    `frame.attrs["truncated"]` is True when the result had more than `max_rows` rows (only
    the first `max_rows` are returned); `frame.attrs["elapsed_s"]` is the query's wall time.
    Raises QueryError for refused, failing, empty or timed-out SQL.
    """
    sql = (sql or "").strip()
    if not sql:
        raise QueryError("no SQL given")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"the SQL is {len(sql)} characters; the limit is {MAX_SQL_CHARS}")
    with open_read(db_path, config=sandbox_config(memory_limit, threads)) as con:
        statements = _statements(con, sql)
        if len(statements) != 1:
            raise QueryError(f"one statement per query, got {len(statements)}")
        if parse_location(db_path).is_lake:
            refuse_unsafe_lake_sql(con, sql)
        timer = threading.Timer(timeout_s, con.interrupt)
        started = time.perf_counter()
        timer.start()
        try:
            table, truncated = _fetch(con, sql, max_rows)
        except duckdb.InterruptException:
            raise QueryError(f"the query ran past the {timeout_s:g} s time limit and was stopped") from None
        except duckdb.Error as exc:
            raise QueryError(_first_line(exc)) from None
        finally:
            timer.cancel()
        elapsed = time.perf_counter() - started
    frame = table.to_pandas()
    frame.attrs["truncated"] = truncated
    frame.attrs["elapsed_s"] = elapsed
    return frame


def _statements(con, sql: str) -> list:
    try:
        return con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_first_line(exc)) from None


def _fetch(con, sql: str, max_rows: int) -> tuple[pa.Table, bool]:
    """Stream at most max_rows + 1 rows as Arrow batches, so a huge result is never materialized."""
    relation = con.sql(sql)  # statements without a result (refused ones included) run here
    if relation is None:
        return pa.table({}), False
    batch_rows = min(max(max_rows, 1), 100_000)
    # DuckDB 2.x names it to_arrow_reader; 1.x fetch_record_batch (the same streaming reader).
    open_reader = getattr(relation, "to_arrow_reader", None) or relation.fetch_record_batch
    reader = open_reader(batch_rows)
    batches, rows = [], 0
    for batch in reader:
        batches.append(batch)
        rows += batch.num_rows
        if rows > max_rows:
            break
    table = pa.Table.from_batches(batches, schema=reader.schema)
    return table.slice(0, max_rows), rows > max_rows


def schema_overview(db_path: str | Path) -> pd.DataFrame:
    """Tables and views with their columns and types, for a schema browser.

    Columns: object, kind ('table' | 'view'), column, type, position. Internal tables
    (schema_migrations) are included: users ask which migrations a history has.
    """
    with open_read(db_path) as con:
        return con.execute(
            """
            SELECT c.table_name AS object,
                   CASE t.table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END AS kind,
                   c.column_name AS "column",
                   c.data_type AS type,
                   c.ordinal_position AS position
            FROM information_schema.columns c
            JOIN information_schema.tables t
              ON t.table_name = c.table_name AND t.table_schema = c.table_schema
             AND t.table_catalog = c.table_catalog
            WHERE c.table_schema = 'main'
            ORDER BY kind, object, position
            """
        ).df()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["run_user_sql", "schema_overview", "QueryError", "HistoryError", "sandbox_config"]
