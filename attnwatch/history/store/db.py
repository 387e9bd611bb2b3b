"""Opening the history, a file or a lake (history.store.location), with its schema checked.

Every opener of the project comes through here; each takes a HistoryLocation, which the caller's
entry point parses once from --db / ATTNWATCH_DB (history.store.location.parse_location). A file's
path is checked before DuckDB is given it (history.store.file_check: a DuckDB file, or nothing yet), and every
connection is history.store.sealed's (no extension loads of its own accord).

A lake (history.store.lake) has no file lock: many processes read and write it at once, DuckLake
orders their commits, and history.store.transactions keeps natural keys unique. Its readers share one
attached instance per process. A file follows the rules below.

DuckDB lets one process hold a database file for writing, and a read-only connection held
open also blocks a writer (docs/design.md, "History"). So:
  - `open_write` retries DuckDB's file-lock error with exponential backoff and full jitter
    (the "Exponential Backoff And Jitter" scheme, AWS Architecture Blog, 2015) until a
    deadline, then raises LockTimeoutError naming the file and the process holding it; it
    applies pending migrations.
  - `open_read` opens a read-only connection, retrying the lock briefly, for callers that
    close it soon (the dashboard, `attnwatch sql`). It never migrates, so a history last
    written by an older attnwatch lacks the newer views until `upgrade` (or any write) runs.
Both waits scale with one setting, ATTNWATCH_LOCK_WAIT_S (history.store.locks).
Both refuse a database migrated by a newer attnwatch (SchemaTooNewError), and a file written
by a newer DuckDB storage format than this one reads (StorageTooNewError, with the way out).

A file is written durably: its write connection checkpoints every commit into the file and
writes nothing to DuckDB's write-ahead log (DURABLE_WRITES). So a schema change never rests in
the log, where DuckDB 1.5.5 cannot replay it (docs/upstream.md), and a commit that returns is in
the file: a write the disk refuses fails its COMMIT and leaves the file as it was. Every fault
of the file (disk full, read-only, permission, lock, an unreplayable log) leaves here as one
history.store.faults line.
"""

from __future__ import annotations

import errno
import os
import random
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb

from attnwatch.history.store import file_check, lake, lake_faults, sealed
from attnwatch.history.errors import HistoryError, HistoryNotFoundError, NotAHistoryError
from attnwatch.history.store.faults import file_fault, is_lock_text, lock_timeout
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.locks import holder, lock_wait_s, read_wait_s
from attnwatch.history.store.migrations import (
    applied_migrations,
    check_compatible,
    code_schema_version,
    database_schema_version,
    migrate,
)

FIRST_BACKOFF_S = 0.02
MAX_BACKOFF_S = 1.0

# Checkpoint at every commit (a WAL threshold of 0) and skip the WAL write for it (DuckDB skips it
# when the commit's estimated size reaches this threshold): the commit is the checkpoint, and a
# checkpoint the disk refuses fails the COMMIT, with the file still at its last checkpoint.
# DuckDB's duck_transaction_manager.cpp, CommitTransaction, says which commits qualify: all of a
# connection that is the only one in its process, as history.store.db's writers are.
DURABLE_WRITES = {"wal_autocheckpoint": "0KB", "auto_checkpoint_skip_wal_threshold": 0}


class StorageTooNewError(HistoryError):
    """The file was written by a newer DuckDB storage format than the pinned DuckDB reads."""


def _storage_error(db_path: Path, exc: BaseException) -> StorageTooNewError | None:
    text = str(exc)
    if not (isinstance(exc, duckdb.IOException) and "created with an newer version of DuckDB" in text):
        return None
    found = text.split("version number", 1)[-1].split(",")[0].strip()
    return StorageTooNewError(
        f"{db_path}: this history file was written by a newer DuckDB (storage version {found}) than the "
        f"DuckDB {duckdb.__version__} attnwatch is pinned to, which cannot read it. Export it where it was "
        f"written (`attnwatch --db {db_path} export DIR`, run with that newer DuckDB) and import it here "
        f"(`attnwatch --db NEW_FILE import DIR`); see pyproject.toml for why DuckDB is pinned"
    )


def is_lock_error(exc: BaseException) -> bool:
    """True when the file is busy and waiting helps.

    Two cases: another process holds the file's lock (IOException), or this process already
    has the file open with a different configuration, e.g. a dashboard read while a user's
    sandboxed SQL query runs in another thread (ConnectionException). Both are short-lived.
    """
    text = str(exc)
    if isinstance(exc, duckdb.IOException):
        return is_lock_text(text)
    return isinstance(exc, duckdb.ConnectionException) and "different configuration" in text


def connect_with_retry(
    db_path: Path, deadline_s: float, *, label: str | None = None, **connect_kwargs
) -> duckdb.DuckDBPyConnection:
    """history.store.sealed.connect, retried on the file lock with capped exponential backoff + full jitter.

    A writer (no `read_only`) gets DURABLE_WRITES; a connection given no settings of its own has its
    configuration locked (history.store.sealed). DuckDB is given the absolute path, so that no
    file name is read as an extension's prefix (`md:x`). A fault of the file is a
    history.store.faults line naming `label` (default: the path)."""
    label = label or str(db_path)
    connect_kwargs.setdefault("locked", not connect_kwargs.get("config"))
    if not connect_kwargs.get("read_only"):
        connect_kwargs["config"] = {**connect_kwargs.get("config", {}), **DURABLE_WRITES}
    give_up_at = time.monotonic() + deadline_s
    attempt = 0
    while True:
        try:
            return sealed.connect(os.path.abspath(db_path), **connect_kwargs)
        except duckdb.Error as exc:
            too_new = _storage_error(db_path, exc)
            if too_new is not None:
                raise too_new from None
            if not is_lock_error(exc):
                fault = file_fault(exc, label, writing=not connect_kwargs.get("read_only")) or _not_duckdb(db_path, exc)
                if fault is None:
                    raise
                raise fault from None
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                raise lock_timeout(label, deadline_s, holder(str(exc), db_path)) from None
            ceiling = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * (2**attempt))
            time.sleep(min(remaining, random.uniform(0, ceiling)))
            attempt += 1


def exists(loc: HistoryLocation) -> bool:
    """Whether there is a history to read (a DuckDB file on disk; a lake whose catalog answers).
    A path that holds something else is refused (NotAHistoryError), not reported absent."""
    if not loc.is_lake:
        return file_check.existing(loc.file, loc.label)
    try:
        with open_read(loc):
            return True
    except HistoryNotFoundError:
        return False


@contextmanager
def open_write(loc: HistoryLocation, deadline_s: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-write connection with the schema migrated to this code's version; closed on exit.
    `deadline_s`: how long to wait for the file's lock (None: history.store.locks.lock_wait_s())."""
    deadline_s = lock_wait_s() if deadline_s is None else deadline_s
    if loc.is_lake:
        con = _lake_cursor(loc, read_only=False)
    else:
        if not file_check.existing(loc.file, loc.label):
            file_check.refuse_uncreatable(loc.file, loc.label)
            _create_whole(loc, deadline_s)
        con = connect_with_retry(loc.file, deadline_s)
    failed = True
    try:
        with _faults_named(loc, writing=True):
            migrate(con, loc.label)
            yield con
            if not loc.is_lake:
                con.execute("CHECKPOINT")  # a no-op after DURABLE_WRITES' commits; nothing is left in the log
        failed = False
    except duckdb.Error as exc:
        _raise_lake_fault(loc, exc)
        raise
    finally:
        _close(con, loc, failed)


def _create_whole(loc: HistoryLocation, deadline_s: float) -> None:
    """Make a new history file appear whole or not at all.

    DuckDB writes a new file's headers after creating it, so a kill or a full disk at that moment
    would leave an empty or cut-off file that DuckDB then refuses to open. Instead the file is
    created and migrated under a temporary name beside it, then hard-linked into place; of two
    processes creating one history at once, the second finds the first's (FileExistsError).
    """
    temp = loc.file.with_name(f".{loc.file.name}.new-{os.getpid()}")
    try:
        loc.file.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(loc.file)
        con = connect_with_retry(temp, deadline_s, label=loc.label)
        try:
            with _faults_named(loc, writing=True):
                migrate(con, loc.label, new_file=True)
        finally:
            _close(con, loc)
        _link_new(temp, loc.file)
    except FileExistsError:
        pass
    except OSError as exc:
        raise (file_fault(exc, loc.label) or exc) from None
    finally:
        for leftover in (temp, temp.with_name(temp.name + ".wal")):
            leftover.unlink(missing_ok=True)


def _link_new(temp: Path, path: Path) -> None:
    """Put the made file in place unless one is there; FileExistsError when another creator won."""
    try:
        os.link(temp, path)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.EMLINK) or path.exists():
            raise
        # A file system without hard links: rename, which would replace a file that another creator
        # linked in this instant (narrow, and only between two first writers of one new history).
        os.replace(temp, path)


def _remove_abandoned(path: Path) -> None:
    """Temporary files of creators that were killed (their process is gone); never linked, so empty of runs."""
    for leftover in path.parent.glob(f".{path.name}.new-*"):
        pid = leftover.name.rsplit("-", 1)[-1].removesuffix(".wal")
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            leftover.unlink(missing_ok=True)
        except (ValueError, OSError):
            pass  # not ours, or a live process (maybe another user's)


def _not_duckdb(db_path: Path, exc: BaseException) -> HistoryError | None:
    """A file DuckDB says is no database: name it and say what it probably is (not deleted: it is not ours)."""
    if (
        not isinstance(exc, duckdb.IOException)
        or "not a valid DuckDB database file" not in str(exc)
        and "Could not read enough bytes" not in str(exc)
    ):
        return None
    size = db_path.stat().st_size if db_path.exists() else 0
    return NotAHistoryError(f"{db_path}: not a DuckDB database ({size} bytes). {file_check.CUT_OFF_HINT}")


def _lake_cursor(loc: HistoryLocation, read_only: bool, config: dict | None = None):
    try:
        return lake.shared_connection(loc, read_only=read_only, config=config)
    except duckdb.Error as exc:  # the attach itself answers with LakeUnavailableError
        lake.forget_shared(loc, read_only, config)
        _raise_lake_fault(loc, exc)
        raise


def _raise_lake_fault(loc: HistoryLocation, exc: BaseException) -> None:
    """On a lake, a catalog or data-path fault as its one-line error (history.store.lake_faults); a
    broken connection's cached instance is dropped first. Anything else: the caller re-raises."""
    if not loc.is_lake:
        return
    fault = lake_faults.translate(exc, loc.label)
    if fault is None:
        return
    if isinstance(fault, lake_faults.LakeUnavailableError):
        lake.forget_location(loc)
    raise fault from None


@contextmanager
def open_read(
    loc: HistoryLocation, deadline_s: float | None = None, config: dict | None = None
) -> Iterator[duckdb.DuckDBPyConnection]:
    """A short-lived read-only connection; a missing history is a clear error, not a new database.

    `deadline_s`: how long to wait for a file's lock (None: history.store.locks.read_wait_s()).
    `config`: DuckDB settings, e.g. history.sql.query's sandbox. Readers of a lake share this process's
    attached instance for their settings (a cursor each; history.store.lake).
    """
    deadline_s = read_wait_s() if deadline_s is None else deadline_s
    if loc.is_lake:
        con = _lake_cursor(loc, read_only=True, config=config)
    else:
        if not file_check.existing(loc.file, loc.label):
            raise HistoryNotFoundError(
                f"{loc.path}: no history here yet (ingest a bundle first: attnwatch ingest BUNDLE_DIR)"
            )
        con = connect_with_retry(loc.file, deadline_s, read_only=True, config=config or {})
    failed = True
    try:
        with _faults_named(loc, writing=False):
            check_compatible(con, loc.label)
            yield con
        failed = False
    except (duckdb.ConnectionException, duckdb.IOException, duckdb.FatalException, duckdb.InternalException) as exc:
        if loc.is_lake:
            lake.forget_shared(loc, True, config)  # a broken catalog connection is not kept for the next reader
        _raise_lake_fault(loc, exc)
        raise
    except duckdb.Error as exc:
        _raise_lake_fault(loc, exc)
        raise
    finally:
        _close(con, loc, failed)


@contextmanager
def _faults_named(loc: HistoryLocation, writing: bool) -> Iterator[None]:
    """On a file, a DuckDB or OS error that is a fault of the file becomes its one-line FaultError."""
    try:
        yield
    except (duckdb.Error, OSError) as exc:
        fault = None if loc.is_lake else file_fault(exc, loc.label, writing=writing)
        if fault is None:
            raise
        raise fault from None


def _close(con, loc: HistoryLocation, failed: bool = False) -> None:
    """Close. After a failure a lake cursor goes through history.store.lake.release: an instance
    DuckDB invalidated is kept, not closed (closing it can abort the process, when a DuckLake
    transaction is open in it). A clean exit has committed its transaction or begun none, so it
    skips release's probe (0.4 ms on a 28 ms lake read, docs/benchmarks.md). A file connection a
    failed checkpoint invalidated raises again on close, and has nothing to keep."""
    if loc.is_lake and failed:
        lake.release(con)
        return
    try:
        con.close()
    except duckdb.FatalException:
        pass


@dataclass(frozen=True)
class MigrationReport:
    """What one `migrate_history` did. `seen`: the schema when it first read the history;
    `found`: the schema when it held the history for writing (another migrate may have run in
    between); `left`: the schema it left; `applied`: the migrations it applied itself."""

    seen: int
    found: int
    left: int
    applied: list[int]


def migrate_history(loc: HistoryLocation, deadline_s: float | None = None) -> MigrationReport:
    """Apply the migrations an existing history still lacks, and say what schema it found and left.

    The check is made read-only first, so a history that is already current is never opened
    for writing (a dashboard calling this on start does not contend with ingest for the lock).
    Both waits for the file's lock are `deadline_s` (None: history.store.locks.lock_wait_s()).
    """
    deadline_s = lock_wait_s() if deadline_s is None else deadline_s
    with open_read(loc, deadline_s) as con:
        seen = database_schema_version(con)
        if not check_compatible(con, loc.label):
            return MigrationReport(seen, seen, seen, [])
    con = _lake_cursor(loc, read_only=False) if loc.is_lake else connect_with_retry(loc.file, deadline_s)
    failed = True
    try:
        with _faults_named(loc, writing=True):
            found = database_schema_version(con)
            applied = migrate(con, loc.label)
            left = database_schema_version(con)
        failed = False
        return MigrationReport(seen, found, left, applied)
    except duckdb.Error as exc:
        _raise_lake_fault(loc, exc)
        raise
    finally:
        _close(con, loc, failed)


def upgrade(loc: HistoryLocation, deadline_s: float | None = None) -> list[int]:
    """Apply the migrations an existing history still lacks; return the versions applied (migrate_history)."""
    return migrate_history(loc, deadline_s).applied


def schema_version(loc: HistoryLocation, deadline_s: float | None = None) -> tuple[int, int]:
    """(the history's schema version, this code's); read-only."""
    with open_read(loc, deadline_s) as con:
        applied = applied_migrations(con)
    return (max(applied) if applied else 0, code_schema_version())
