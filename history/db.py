"""Opening the history file: one writer at a time, short-lived readers, schema checked.

DuckDB lets one process hold a database file for writing, and a read-only connection held
open also blocks a writer (docs/design.md, "History"). So:
  - `open_write` retries DuckDB's file-lock error with exponential backoff and full jitter
    (the "Exponential Backoff And Jitter" scheme, AWS Architecture Blog, 2015) until a
    deadline, then raises LockTimeoutError naming the file; it applies pending migrations.
  - `open_read` opens a read-only connection, retrying the lock briefly, for callers that
    close it soon (the dashboard, `attnwatch sql`). It never migrates, so a history last
    written by an older attnwatch lacks the newer views until `upgrade` (or any write) runs.
Both refuse a database migrated by a newer attnwatch (SchemaTooNewError).
"""

from __future__ import annotations

import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from history.errors import HistoryNotFoundError, LockTimeoutError
from history.migrations import applied_migrations, check_compatible, code_schema_version, migrate

FIRST_BACKOFF_S = 0.02
MAX_BACKOFF_S = 1.0
READ_DEADLINE_S = 10.0


def is_lock_error(exc: BaseException) -> bool:
    """True when the file is busy and waiting helps.

    Two cases: another process holds the file's lock (IOException), or this process already
    has the file open with a different configuration, e.g. a dashboard read while a user's
    sandboxed SQL query runs in another thread (ConnectionException). Both are short-lived.
    """
    text = str(exc)
    if isinstance(exc, duckdb.IOException):
        return "Could not set lock" in text or "Conflicting lock" in text
    return isinstance(exc, duckdb.ConnectionException) and "different configuration" in text


def connect_with_retry(db_path: Path, deadline_s: float, **connect_kwargs) -> duckdb.DuckDBPyConnection:
    """duckdb.connect, retried on the file lock with capped exponential backoff + full jitter."""
    give_up_at = time.monotonic() + deadline_s
    attempt = 0
    while True:
        try:
            return duckdb.connect(str(db_path), **connect_kwargs)
        except (duckdb.IOException, duckdb.ConnectionException) as exc:
            if not is_lock_error(exc):
                raise
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                raise LockTimeoutError(
                    f"{db_path}: the history stayed busy (locked by another process, or open here "
                    f"with other settings) for more than {deadline_s:g} s ({exc}); retry when it has finished"
                ) from exc
            ceiling = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * (2**attempt))
            time.sleep(min(remaining, random.uniform(0, ceiling)))
            attempt += 1


@contextmanager
def open_write(db_path: str | Path, deadline_s: float = 60.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection with the schema migrated to this code's version; closed on exit."""
    path = Path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = connect_with_retry(path, deadline_s)
    try:
        migrate(con, str(path))
        yield con
    finally:
        con.close()


@contextmanager
def open_read(
    db_path: str | Path, deadline_s: float = READ_DEADLINE_S, config: dict | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection; a missing file is a clear error, not a new database."""
    path = Path(db_path)
    if not path.is_file():
        raise HistoryNotFoundError(
            f"{path}: no history here yet (ingest a bundle first: attnwatch ingest BUNDLE_DIR)"
        )
    con = connect_with_retry(path, deadline_s, read_only=True, config=config or {})
    try:
        check_compatible(con, str(path))
        yield con
    finally:
        con.close()


def upgrade(db_path: str | Path, deadline_s: float = 60.0) -> list[int]:
    """Apply the migrations an existing history still lacks; return the versions applied.

    The check is made read-only first, so a history that is already current is never opened
    for writing (a dashboard calling this on start does not contend with ingest for the lock).
    """
    path = Path(db_path)
    with open_read(path, deadline_s) as con:
        if not check_compatible(con, str(path)):
            return []
    con = connect_with_retry(path, deadline_s)
    try:
        return migrate(con, str(path))
    finally:
        con.close()


def schema_version(db_path: str | Path) -> tuple[int, int]:
    """(the history's schema version, this code's); read-only."""
    with open_read(db_path) as con:
        applied = applied_migrations(con)
    return (max(applied) if applied else 0, code_schema_version())
