"""`attnwatch history recover`: make a history file whose write-ahead log DuckDB cannot replay open again.

DuckDB 1.5.5 replays a file's log while opening the file as its main database, before a default
database exists, and replaying an ALTER TABLE on a table with a function DEFAULT (nextval(),
now()) then fails (docs/upstream.md). Attnwatch no longer leaves a schema change in the log
(history.store.db, DURABLE_WRITES), but a file written by an earlier attnwatch, or by another
program, may be in that state. The same replay succeeds when the file is ATTACHed to an
in-memory database, which is the default one by then. So, in order:

  1. back up the file and its log into `<file>.recover-<UTC time>/` (nothing is ever deleted);
  2. attach the file to an in-memory DuckDB, which replays the whole log, and CHECKPOINT it:
     every committed transaction is then in the file and the log is empty;
  3. if that replay fails too, move the log aside (it stays in the backup) and keep what the
     file held at its last checkpoint, and say that the log's transactions were not kept;
  4. open the file as every command does, and report its schema version and run count.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from attnwatch.history.store import file_check, sealed
from attnwatch.history.store.db import open_read
from attnwatch.history.errors import HistoryError, WalReplayError
from attnwatch.history.store.faults import file_fault
from attnwatch.history.store.location import parse_location
from attnwatch.history.store.migrations import database_schema_version


class RecoveryError(HistoryError):
    """The history could not be recovered; the message says what was kept and where."""


@dataclass
class RecoveryReport:
    path: Path
    backup: Path | None = None
    wal_bytes: int = 0
    replayed: bool = False
    runs: int = 0
    schema: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        if self.backup is None:
            return [f"{self.path}: opens normally and has no write-ahead log to fold in; nothing to recover "
                    f"(schema {self.schema}, {self.runs} run(s))"]
        out = [f"backup of the file and its log: {self.backup}"]
        if self.replayed:
            out.append(f"replayed the write-ahead log ({self.wal_bytes} bytes) and checkpointed it into the file: "
                       "every committed transaction was kept")
        else:
            out.append(f"the write-ahead log ({self.wal_bytes} bytes) could not be replayed; its transactions were "
                       f"NOT kept (they remain in the backup); the file holds what its last checkpoint held")
        out += self.notes
        out.append(f"{self.path}: recovered; opens at schema {self.schema} with {self.runs} run(s)")
        return out


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def recover(location: str | Path) -> RecoveryReport:
    loc = parse_location(location)
    if loc.is_lake:
        raise RecoveryError(f"{loc.label}: recover is for a history file; a lake has no write-ahead log of its own")
    path = loc.path
    if not file_check.existing(path, loc.label):
        raise RecoveryError(f"{path}: no history file here")
    report = RecoveryReport(path)
    wal = wal_path(path)
    if not wal.is_file() or wal.stat().st_size == 0:
        report.runs, report.schema = _opened(path, "and has no write-ahead log, so recover cannot help")
        return report
    report.wal_bytes = wal.stat().st_size
    report.backup = _backup(path, wal)
    try:
        _replay_attached(path)
        report.replayed = True
    except duckdb.Error as exc:
        fault = file_fault(exc, str(path))
        if fault is not None and not isinstance(fault, WalReplayError):
            raise fault from None  # disk full, read-only, lock: nothing changed, the backup is there
        said = _first_line(exc).replace(str(wal), wal.name)  # DuckDB names the log by its full path
        report.notes.append(f"replay through an attached database failed too: {said}")
        wal.replace(report.backup / (wal.name + ".unreplayable"))
    report.runs, report.schema = _opened(path, "after recovery; the backup is untouched")
    return report


def _backup(path: Path, wal: Path) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.recover-{stamp}")
    try:
        backup.mkdir()
        shutil.copy2(path, backup / path.name)
        shutil.copy2(wal, backup / wal.name)
    except OSError as exc:
        shutil.rmtree(backup, ignore_errors=True)
        fault = file_fault(exc, str(path))
        raise (fault or RecoveryError(f"{path}: could not back it up before recovering ({exc}); nothing was changed")) from None
    return backup


def _replay_attached(path: Path) -> None:
    """Attach to an in-memory database (which is then the default one), so the log replays, and checkpoint."""
    con = sealed.connect()
    try:
        quoted = os.path.abspath(path).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS recovered")
        con.execute("CHECKPOINT recovered")
        con.execute("DETACH recovered")
    finally:
        con.close()


def _opened(path: Path, otherwise: str) -> tuple[int, int]:
    """(runs, schema version) as an ordinary open sees them; a failure is a RecoveryError."""
    try:
        with open_read(path) as con:
            has_runs = con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchone()[0]
            runs = con.execute("SELECT count(*) FROM runs").fetchone()[0] if has_runs else 0
            return int(runs), database_schema_version(con)
    except HistoryError as exc:
        raise RecoveryError(f"{path}: does not open {otherwise} ({exc})") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
