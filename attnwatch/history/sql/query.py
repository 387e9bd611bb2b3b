"""User SQL over the history, locked down by DuckDB's own configuration and bounded in every resource.

Each query runs in a child process of its own (history.sql.worker: address space and CPU time
limited by the kernel, killed past its time limit) on a short-lived connection that is
  - read-only (no INSERT / CREATE / DROP / UPDATE on the file),
  - `enable_external_access = false` (no COPY ... TO, ATTACH, EXPORT DATABASE, read_csv of
    arbitrary files, INSTALL / LOAD of extensions from disk),
  - `lock_configuration = true` (no SET / PRAGMA / RESET undoing any of this),
  - limited in memory, threads and spill (temporary disk space, in a private directory of its
    own, not beside the history), with extension auto-install/auto-load off
    (history.sql.sandbox says which setting is made where, and why),
and the query is interrupted from a timer thread (`connection.interrupt()`) after the time
limit. Before it runs, the statement is refused if it names a function that shows server paths
(history.sql.guard, history/sql/denied.toml). Its result is streamed in small Arrow batches and kept
up to a row and a byte cap (history.sql.stream), never fetched whole. Every DuckDB, Arrow,
pandas or memory error becomes one QueryError line, the history named by its file name and
other paths and process ids scrubbed (history.sql.guard.public_text); `attnwatch sql` names the
history in full in an error of the history itself (`public=False`). One statement per
call. Both `attnwatch sql` and the dashboard's SQL page come through here, and both write
Parquet from the Arrow result (`to_parquet`), not from pandas.

On a lake (history.store.location) the connection is attached read-only before external access is
turned off and the configuration locked (history.store.lake), and history.sql.gate refuses what that
leaves open there: anything but a SELECT, the PostgreSQL and DuckLake extensions' functions,
and the catalog database under any name (history.sql.worker applies it in the child, within
the time limit).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.errors import FaultError, HistoryError, QueryError
from attnwatch.history.sql.guard import public_text
from attnwatch.history.sql.sandbox import SqlLimits, private_temp_dir
from attnwatch.history.sql.worker import run_in_worker

DEFAULTS = SqlLimits()
DEFAULT_MAX_ROWS = DEFAULTS.max_rows
DEFAULT_MAX_BYTES = DEFAULTS.max_bytes
DEFAULT_TIMEOUT_S = DEFAULTS.timeout_s
MAX_SQL_CHARS = 100_000


@dataclass(frozen=True)
class UserResult:
    """One query's result: `table` as DuckDB gave it (Arrow: what Parquet is written from, nested
    columns included) and `frame`, the same rows as pandas (for display, CSV and JSON).

    Column names are unique in both (`unique_names`; `renamed` maps each new name to the one the
    query gave). `cut`: None, 'rows' or 'bytes' (which cap cut the result); `nbytes`: the result
    bytes the cap counted (history.sql.stream); `elapsed_s`: the query's wall time.
    """

    table: pa.Table
    frame: pd.DataFrame
    cut: str | None
    elapsed_s: float
    nbytes: int
    renamed: dict[str, str] = field(default_factory=dict)


def run_user_sql(
    location: HistoryLocation,
    sql: str,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = None,
    threads: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    temp_limit: str | None = None,
    lock_wait_s: float | None = None,
) -> pd.DataFrame:
    """Run one user statement; return its rows as a DataFrame (`run_user_query`'s frame).

    `frame.attrs["truncated"]` is True when the result was cut, `frame.attrs["cut"]` says by
    which cap ('rows': more than `max_rows` rows; 'bytes': more than `max_bytes` bytes),
    `frame.attrs["elapsed_s"]` is the query's wall time, `frame.attrs["bytes"]` the result bytes
    counted and `frame.attrs["renamed"]` the duplicate column names renamed. Raises QueryError
    for refused, failing, empty, oversized or timed-out SQL.
    """
    return run_user_query(
        location,
        sql,
        max_rows=max_rows,
        timeout_s=timeout_s,
        memory_limit=memory_limit,
        threads=threads,
        max_bytes=max_bytes,
        temp_limit=temp_limit,
        lock_wait_s=lock_wait_s,
    ).frame


def run_user_query(
    location: HistoryLocation,
    sql: str,
    max_rows: int = DEFAULT_MAX_ROWS,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_limit: str | None = None,
    threads: int | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    temp_limit: str | None = None,
    lock_wait_s: float | None = None,
    public: bool = True,
) -> UserResult:
    """Run one user statement (module docstring); its result as Arrow and pandas (UserResult).

    Every error is one QueryError (or another HistoryError) line. `public` (the dashboard's SQL
    page): it names the history by its file name only, with no other path, binary or process id
    (history.sql.guard.public_text); a fault of the file says its reason. Otherwise (`attnwatch
    sql`, whose user named the history) an error of the history (a fault of its file, no history
    there) is said as every command says it: the history's full path, and the process holding a lock.
    """
    limits = SqlLimits(
        max_rows=max_rows,
        max_bytes=max_bytes,
        timeout_s=timeout_s,
        memory_limit=memory_limit or DEFAULTS.memory_limit,
        threads=threads or DEFAULTS.threads,
        temp_limit=temp_limit or DEFAULTS.temp_limit,
        lock_wait_s=DEFAULTS.lock_wait_s if lock_wait_s is None else lock_wait_s,
    )
    sql = (sql or "").strip()
    if not sql:
        raise QueryError("no SQL given")
    if len(sql) > MAX_SQL_CHARS:
        raise QueryError(f"the SQL is {len(sql)} characters; the limit is {MAX_SQL_CHARS}")
    try:
        with private_temp_dir() as temp_dir:
            answer = run_in_worker(location, sql, limits, temp_dir)
    except HistoryError as exc:
        if not public and not isinstance(exc, QueryError):  # a refused or failed query is worded by the worker
            raise
        raise _public(exc, location) from None
    names, renamed = unique_names(answer.table.column_names)
    table = answer.table.rename_columns(names)
    frame = to_frame(table)
    frame.attrs.update(
        truncated=answer.cut is not None,
        cut=answer.cut,
        elapsed_s=answer.elapsed_s,
        bytes=answer.nbytes,
        renamed=renamed,
    )
    return UserResult(table, frame, answer.cut, answer.elapsed_s, answer.nbytes, renamed)


def _public(exc: HistoryError, location: HistoryLocation) -> HistoryError:
    """The same error class (HistoryNotFoundError stays one), its text as users may see it (a
    fault of the file: its reason, which names neither the history's path nor a process)."""
    on_file = not location.is_lake  # a lake's faults are worded by history.store.lake_faults
    text = public_text(f"{location}: {exc.reason}" if isinstance(exc, FaultError) and on_file else str(exc), location)
    try:
        return type(exc)(text)
    except TypeError:  # a class with another constructor
        return QueryError(text)


def unique_names(names: list[str]) -> tuple[list[str], dict[str, str]]:
    """Column names made unique as DuckDB does in a subquery (`SELECT 1 AS x, 2 AS x` gives x,
    x_1), and {new name: name given}. pandas, Streamlit's table, JSON records and Parquet readers
    all need unique names; the query's own result may repeat one."""
    taken = {n.lower() for n in names}
    seen: set[str] = set()
    out, renamed = [], {}
    for name in names:
        if name.lower() not in seen:
            seen.add(name.lower())
            out.append(name)
            continue
        i = 1
        while f"{name}_{i}".lower() in taken:
            i += 1
        new = f"{name}_{i}"
        taken.add(new.lower())
        seen.add(new.lower())
        out.append(new)
        renamed[new] = name
    return out, renamed


def to_frame(table: pa.Table) -> pd.DataFrame:
    """The result as pandas; a column type pandas cannot hold is a QueryError naming the fix."""
    try:
        return table.to_pandas()
    except (pa.ArrowException, ValueError, TypeError, OverflowError, MemoryError) as exc:
        raise QueryError(f"the result cannot be shown: {_first_line(exc)} (cast that column to VARCHAR)") from None


def to_parquet(table: pa.Table) -> bytes:
    """The result as Parquet, written from its Arrow table (nested MAP, STRUCT and LIST columns
    kept as such, which a round trip through pandas' object columns cannot do); QueryError for
    a type Parquet cannot hold (INTERVAL, UNION)."""
    buffer = io.BytesIO()
    try:
        pq.write_table(table, buffer)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
        raise QueryError(f"no Parquet for this result: {_first_line(exc)} (cast that column to VARCHAR)") from None
    return buffer.getvalue()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def schema_overview(location: HistoryLocation) -> pd.DataFrame:
    """Tables and views with their columns and types, for a schema browser.

    Columns: object, kind ('table' | 'view'), column, type, position. Internal tables
    (schema_migrations) are included: users ask which migrations a history has.

    A view's columns are what a query of it returns (`DESCRIBE SELECT * FROM view`), not what
    information_schema says: on a file DuckDB keeps there the columns a view had when it was
    created, while a `SELECT d.*` in it is expanded again at every query. A write refreshes them
    (history.store.migrations.refresh_view_columns), but a history only ever read may still be stale.
    """
    with open_read(location) as con:
        objects = con.execute(
            """
            SELECT table_name, CASE table_type WHEN 'VIEW' THEN 'view' ELSE 'table' END AS kind
            FROM information_schema.tables
            WHERE table_schema = 'main' AND table_catalog = current_database()
            ORDER BY kind, table_name
            """
        ).fetchall()
        rows = []
        for name, kind in objects:
            quoted = '"' + name.replace('"', '""') + '"'
            described = con.execute(f"DESCRIBE SELECT * FROM {quoted}").fetchall()
            rows += [(name, kind, column, type_, i + 1) for i, (column, type_, *_) in enumerate(described)]
    return pd.DataFrame(rows, columns=["object", "kind", "column", "type", "position"])


__all__ = [
    "run_user_sql",
    "run_user_query",
    "UserResult",
    "schema_overview",
    "to_parquet",
    "unique_names",
    "QueryError",
    "HistoryError",
    "SqlLimits",
]
