"""`attnwatch history recover`: fold a history file's write-ahead log into the file, and say exactly
which of its transactions were replayed and which were not.

DuckDB 1.5.5 replays a file's log while opening the file as its main database, before a default
database exists, and replaying an ALTER TABLE on a table with a function DEFAULT (nextval(),
now()) then fails (docs/upstream.md). Attnwatch no longer leaves a schema change in the log
(history.store.db, DURABLE_WRITES), but a file written by an earlier attnwatch, or by another
program, may be in that state. The same replay succeeds when the file is ATTACHed to an
in-memory database, which is the default one by then. A log can also be damaged: cut short, or
overwritten. DuckDB's own replay then keeps what it can without saying what it dropped, so the
log is read first (history.store.wal_layout: its committed transactions, and what follows them).
In order, holding the file's lock so that no other process writes it meanwhile:

  1. back up the file and its log into `<file>.recover-<UTC time>/` (nothing is ever deleted),
     and read the runs the file held at its last checkpoint (from the backup, without its log);
  2. keep in the log only its committed transactions (a cut-off or unreadable tail is left in the
     backup), attach the file to an in-memory DuckDB, which replays them, and CHECKPOINT it;
  3. if an entry's checksum does not match, replay the transactions before the damaged one
     instead; if the replay fails otherwise, or the log has no header DuckDB reads, set the log
     aside (it stays in the backup) and keep what the file held at its last checkpoint;
  4. open the file as every command does, and report its schema version, its runs, which
     transactions were replayed (by number, and the runs they added) and which bytes were not.
The command exits 0 only when every byte of the log was a committed transaction that was replayed.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import duckdb

from attnwatch.history.store import file_check, sealed
from attnwatch.history.errors import HistoryError, WalReplayError
from attnwatch.history.store.db import open_read
from attnwatch.history.store.faults import file_fault, lock_held
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.locks import holder
from attnwatch.history.store.migrations import database_schema_version
from attnwatch.history.store.wal_layout import CUT, UNCOMMITTED, UNREADABLE, LogLayout, read_layout

_DAMAGED_AT = re.compile(r"entry at byte position (\d+)")
_TAILS = {
    CUT: "a transaction whose end is missing (the log is cut off there)",
    UNCOMMITTED: "entries of a transaction whose commit record is missing",
    UNREADABLE: "bytes that are not log entries (damage)",
}


class RecoveryError(HistoryError):
    """The history could not be recovered; the message says what was kept and where."""


@dataclass
class RecoveryReport:
    path: Path
    backup: Path | None = None
    layout: LogLayout | None = None  # None: no log, or an empty one
    replayed: int = 0  # committed transactions replayed, the first ones of the log
    damaged: tuple[int, int] | None = None  # (transaction index, byte) where a checksum did not match
    set_aside: str = ""  # why the whole log was set aside unreplayed ("" when it was not)
    runs_before: list[str] | None = None  # runs at the last checkpoint (None: unknown)
    runs_after: list[str] = field(default_factory=list)
    schema: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every byte of the log was a committed transaction, and each was replayed."""
        layout = self.layout
        return layout is None or (
            layout.readable
            and not layout.tail
            and not self.set_aside
            and self.damaged is None
            and self.replayed == len(layout.transactions)
        )

    def lines(self) -> list[str]:
        runs = f"schema {self.schema}, {len(self.runs_after)} run(s)"
        if self.backup is None:
            log = (
                "an empty write-ahead log (0 bytes), nothing to replay"
                if self.layout is None and wal_path(self.path).exists()
                else "no write-ahead log to fold in"
            )
            return [f"{self.path}: opens normally and has {log}; nothing to recover ({runs})"]
        layout = self.layout
        assert layout is not None  # recover backs up only a log it has read
        out = [
            f"backup of the file and its write-ahead log: {self.backup}",
            self._what_the_log_held(layout),
            self._replayed_line(layout),
        ]
        missed = self._not_replayed_line(layout)
        if missed:
            out.append(missed)
        if self.runs_before is not None:
            added = sorted(set(self.runs_after) - set(self.runs_before))
            out.append(f"runs the replay added: {_names(added)}" if added else "the replay added no run")
        out += self.notes
        out.append(f"{self.path}: recovered; opens at {runs}")
        return out

    def _what_the_log_held(self, layout: LogLayout) -> str:
        wal = wal_path(self.path)
        if layout.version is None:
            return f"{wal}: {layout.size} bytes that are not a DuckDB write-ahead log (no header DuckDB reads)"
        if not layout.readable:
            return (
                f"{wal}: {layout.size} bytes, a DuckDB write-ahead log of version {layout.version}, whose "
                f"transactions this attnwatch cannot count (it reads version 2)"
            )
        held = f"{wal}: {layout.size} bytes, {len(layout.transactions)} committed transaction(s)"
        if layout.tail:
            held += f", then {layout.size - layout.tail_start} bytes of {_TAILS[layout.tail]}"
        return held

    def _replayed_line(self, layout: LogLayout) -> str:
        total = len(layout.transactions)
        if layout.readable and total == 0:
            return "the log held no committed transaction: nothing to replay"
        if self.set_aside:
            return f"replayed nothing: {self.set_aside}; the file holds what its last checkpoint held"
        if not layout.readable:
            return "replayed the log as DuckDB reads it and checkpointed it into the file"
        if self.damaged is not None:
            index, byte = self.damaged
            return (
                f"replayed {_span(self.replayed)} of {total} and checkpointed into the file; transaction "
                f"{index + 1} is damaged (a checksum does not match at byte {byte})"
            )
        if self.complete:
            return (
                f"replayed {_span(self.replayed)} of {total} and checkpointed into the file: every committed "
                "transaction was kept"
            )
        return f"replayed {_span(self.replayed)} of {total} and checkpointed into the file"

    def _not_replayed_line(self, layout: LogLayout) -> str:
        total = len(layout.transactions)
        parts = []
        if total > self.replayed:
            parts.append(
                f"transaction(s) {self.replayed + 1}-{total} of {total}"
                if total > self.replayed + 1
                else f"transaction {total} of {total}"
            )
        if layout.readable and layout.tail:
            parts.append(f"bytes {layout.tail_start}-{layout.size} ({_TAILS[layout.tail]})")
        if not layout.readable and self.set_aside:
            parts.append(f"all {layout.size} bytes")
        if not parts:
            return ""
        return f"NOT replayed, so not in the history (the backup keeps them): {'; '.join(parts)}"


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + ".wal")


def recover(loc: HistoryLocation) -> RecoveryReport:
    if loc.is_lake:
        raise RecoveryError(f"{loc.label}: recover is for a history file; a lake has no write-ahead log of its own")
    path = loc.file
    if not file_check.existing(path, loc.label):
        raise RecoveryError(f"{path}: no history file here")
    report = RecoveryReport(path)
    wal = wal_path(path)
    if not wal.is_file() or wal.stat().st_size == 0:
        report.runs_after, report.schema = _opened(path, "and has no write-ahead log, so recover cannot help")
        return report
    with _held(path) as relock:
        data = wal.read_bytes()
        report.layout = layout = read_layout(data)
        report.backup = _backup(path, wal)
        report.runs_before = _runs_at_checkpoint(report.backup / path.name)
        if layout.version is None:
            report.set_aside = "the log has no header DuckDB reads, so none of it is a transaction it can replay"
            wal.replace(report.backup / (wal.name + ".unreplayable"))
        else:
            _replay(report, path, wal, data, relock)
        report.runs_after, report.schema = _opened(path, "after recovery; the backup is untouched")
    return report


def _replay(report: RecoveryReport, path: Path, wal: Path, data: bytes, relock) -> None:
    """Replay the log's committed transactions (all of them when it cannot be read), the first
    ones only when a checksum fails; set it aside when the replay fails otherwise. `relock`
    takes the file's lock again after DuckDB, closing the file, released this process's."""
    layout, backup = report.layout, report.backup
    assert layout is not None and backup is not None  # recover read the log and backed it up first
    count = len(layout.transactions)
    while True:
        if layout.readable:
            _keep_prefix(wal, data[: layout.end_of(count)] if count else b"")
        try:
            _replay_attached(path)
            report.replayed = count
            return
        except duckdb.Error as exc:
            fault = file_fault(exc, str(path))
            if fault is not None and not isinstance(fault, WalReplayError):
                _keep_prefix(wal, data)  # as it was (the backup has it too): nothing changed
                raise fault from None
            relock()
            damaged = _DAMAGED_AT.search(str(exc))
            byte = int(damaged.group(1)) if damaged else None
            index = layout.transaction_at(byte) if byte is not None and layout.readable else None
            if index is not None and byte is not None and index < count:
                report.damaged, count = (index, byte), index
                continue
            said = _first_line(exc)
            report.notes.append(f"replay through an attached database failed: {said}")
            report.set_aside = "DuckDB could not replay the log, even attached"
            report.replayed = 0
            if wal.exists():
                wal.replace(backup / (wal.name + ".unreplayable"))
            else:
                (backup / (wal.name + ".unreplayable")).write_bytes(data)
            return


def _keep_prefix(wal: Path, data: bytes) -> None:
    """The log holding `data` only (none at all when it is empty), written whole through a rename."""
    if not data:
        wal.unlink(missing_ok=True)
        return
    temp = wal.with_name(f".{wal.name}.recover-{os.getpid()}")
    temp.write_bytes(data)
    os.replace(temp, wal)


@contextmanager
def _held(path: Path) -> Iterator[Callable[[], None]]:
    """The file's lock (the POSIX lock DuckDB takes) for the whole recovery, refused in one line
    naming the process that holds it; yields the function that takes it again (a POSIX lock is
    the process's, so DuckDB closing the file in this process releases it)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise (file_fault(exc, str(path)) or RecoveryError(f"{path}: cannot open it ({exc})")) from None

    def lock() -> None:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise lock_held(str(path), holder("", path)) from None

    try:
        lock()
        yield lock
    finally:
        os.close(fd)


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
        raise (
            fault or RecoveryError(f"{path}: could not back it up before recovering ({exc}); nothing was changed")
        ) from None
    return backup


def _runs_at_checkpoint(copy: Path) -> list[str] | None:
    """The run ids the file held at its last checkpoint: its backup copy opened without its log
    (set aside for the moment, in the backup); None when that copy does not open."""
    log = wal_path(copy)
    held = log.with_name(log.name + ".held")
    log.replace(held)
    try:
        con = sealed.connect(os.path.abspath(copy), read_only=True)
        try:
            return _run_ids(con)
        finally:
            con.close()
    except duckdb.Error:
        return None
    finally:
        held.replace(log)


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


def _opened(path: Path, otherwise: str) -> tuple[list[str], int]:
    """(run ids, schema version) as an ordinary open sees them; a failure is a RecoveryError."""
    try:
        with open_read(HistoryLocation(path=path)) as con:
            return _run_ids(con), database_schema_version(con)
    except HistoryError as exc:
        raise RecoveryError(f"{path}: does not open {otherwise} ({exc})") from None


def _run_ids(con) -> list[str]:
    has_runs = con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchone()[0]
    return [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()] if has_runs else []


def _span(count: int) -> str:
    return "no transaction" if count == 0 else "transaction 1" if count == 1 else f"transactions 1-{count}"


def _names(runs: list[str], shown: int = 10) -> str:
    more = f" and {len(runs) - shown} more" if len(runs) > shown else ""
    return ", ".join(runs[:shown]) + more


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
