"""User SQL over the history, locked down by DuckDB's own configuration and bounded in every resource.

Each query runs in a child process of its own (history.sql_worker: address space and CPU time
limited by the kernel, killed past its time limit) on a short-lived connection that is
  - read-only (no INSERT / CREATE / DROP / UPDATE on the file),
  - `enable_external_access = false` (no COPY ... TO, ATTACH, EXPORT DATABASE, read_csv of
    arbitrary files, INSTALL / LOAD of extensions from disk),
  - `lock_configuration = true` (no SET / PRAGMA / RESET undoing any of this),
  - limited in memory, threads and spill (temporary disk space, in a private directory of its
    own, not beside the history), with extension auto-install/auto-load off
    (history.sql_sandbox says which setting is made where, and why),
and the query is interrupted from a timer thread (`connection.interrupt()`) after the time
limit. Before it runs, the statement is refused if it names a function that shows server paths
(history.sql_guard, sql_denied.toml). Its result is streamed in small Arrow batches and kept
up to a row and a byte cap (history.sql_stream), never fetched whole. Every DuckDB, Arrow,
pandas or memory error becomes one QueryError line, with paths scrubbed. One statement per
call. Both `attnwatch sql` and the dashboard's SQL page come through here.

On a lake (history.location) the connection is attached read-only before external access is
turned off and the configuration locked (history.lake), and history.sql_gate refuses what that
leaves open there: anything but a SELECT, the PostgreSQL and DuckLake extensions' functions,
and the catalog database (history.sql_worker applies it in the child).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa

from history.db import open_read
from history.errors import HistoryError, QueryError
from history.sql_sandbox import SqlLimits, private_temp_dir
from history.sql_worker import run_in_worker

DEFAULTS = SqlLimits()
DEFAULT_MAX_ROWS = DEFAULTS.max_rows
DEFAULT_MAX_BYTES = DEFAULTS.max_bytes
DEFAULT_TIMEOUT_S = DEFAULTS.timeout_s
MAX_SQL_CHARS = 100_000


def run_user_sql(
    db_path: str | Path,
    sql: str,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = None,
    threads: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    temp_limit: str | None = None,
) -> pd.DataFrame:
    """Run one user statement; return its rows as a DataFrame.

    `frame.attrs["truncated"]` is True when the result was cut, `frame.attrs["cut"]` says by
    which cap ('rows': more than `max_rows` rows; 'bytes': more than `max_bytes` bytes), and
    `frame.attrs["elapsed_s"]` is the query's wall time. Raises QueryError for refused,
    failing, empty, oversized or timed-out SQL.
    """
    limits = SqlLimits(
        max_rows=max_rows, max_bytes=max_bytes, timeout_s=timeout_s,
        memory_limit=memory_limit or DEFAULTS.memory_limit, threads=threads or DEFAULTS.threads,
        temp_limit=temp_limit or DEFAULTS.temp_limit,
    )
    sql = (sql or "").strip()
    if not sql:
        raise QueryError("no SQL given")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"the SQL is {len(sql)} characters; the limit is {MAX_SQL_CHARS}")
    with private_temp_dir() as temp_dir:
        answer = run_in_worker(str(db_path), sql, limits, temp_dir)
    frame = to_frame(answer.table)
    frame.attrs["truncated"] = answer.cut is not None
    frame.attrs["cut"] = answer.cut
    frame.attrs["elapsed_s"] = answer.elapsed_s
    return frame


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The result as pandas; a column type pandas cannot hold is a QueryError naming the fix."""
    try:
        return table.to_pandas()
    except (pa.ArrowException, ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise QueryError(f"the result cannot be shown: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
                         "(cast that column to VARCHAR)") from None


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


__all__ = ["run_user_sql", "schema_overview", "QueryError", "HistoryError", "SqlLimits"]
