"""Faults under a history file, as one line each: the file, what happened, what to do.

The one place where an error from DuckDB (or an OSError) met while opening, reading or writing
a history *file* becomes a history.errors.FaultError: disk full, read-only file system,
permission denied, the file lock held past a deadline, and a write-ahead log DuckDB cannot
replay. history.store.db applies it around every connection it hands out, so each command, the
dashboard and `attnwatch sql` get the same words; the CLI prints a HistoryError as one line.

DuckDB's own texts name the machine's paths, the Python binary and a PID (its lock error says
`Conflicting lock is held in /usr/bin/python3 (PID 4242)`); they are not passed on. A message
names the history by the label the user gave (`--db`), in full, and a lock's message names the
process holding it by id and command line (history.store.locks.holder); its `reason`, what the
dashboard shows, leaves out the history's path and the process.
"""

from __future__ import annotations

import errno
import shlex

from attnwatch.history.errors import (
    AccessDeniedError,
    DiskFullError,
    FaultError,
    LockTimeoutError,
    ReadOnlyError,
    WalReplayError,
)
from attnwatch.history.store.locks import LOCK_WAIT_ENV, holder

# (what DuckDB or the OS says, the errno behind it) -> kind. EFBIG: a file-size limit (RLIMIT_FSIZE,
# a quota) refuses a write as a full disk does.
_DISK_FULL = ("No space left on device", "File too large", "Disk quota exceeded")
_READ_ONLY = ("Read-only file system",)
_DENIED = ("Permission denied", "Operation not permitted")
_LOCK = ("Could not set lock", "Conflicting lock")
_WAL_REPLAY = "Failure while replaying WAL file"
_DAMAGED_WAL = "Corrupt WAL file"  # a log entry's checksum does not match: the log itself is damaged
_ERRNOS = {
    errno.ENOSPC: "disk",
    errno.EFBIG: "disk",
    errno.EDQUOT: "disk",
    errno.EROFS: "read-only",
    errno.EACCES: "denied",
    errno.EPERM: "denied",
}


def is_lock_text(text: str) -> bool:
    return any(marker in text for marker in _LOCK)


def _kind(exc: BaseException) -> str | None:
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return _ERRNOS[exc.errno]
    if not type(exc).__module__.lstrip("_").startswith("duckdb"):
        return None
    text = str(exc)
    if _WAL_REPLAY in text:
        return "wal"
    if is_lock_text(text):
        return "lock"
    for kind, markers in (("disk", _DISK_FULL), ("read-only", _READ_ONLY), ("denied", _DENIED)):
        if any(marker in text for marker in markers):
            return kind
    return None


def file_fault(exc: BaseException, label: str, writing: bool = True, doing: str = "") -> FaultError | None:
    """The FaultError for `exc` met on the history file `label`, or None if it is not such a fault.

    `writing`: the connection was opened for writing (what to do differs for a reader).
    `doing`: what was under way, said after the fault, e.g. which run of an ingest.
    """
    if isinstance(exc, FaultError):
        return exc
    kind = _kind(exc)
    if kind is None:
        return None
    if kind == "wal":
        return wal_replay_error(label, damaged=_DAMAGED_WAL in str(exc))
    if kind == "lock":
        return lock_held(label, holder(str(exc), label), f" {doing}" if doing else "")
    cls, words = _WORDS[kind]
    reason = words(f" {doing}" if doing else "", "write" if writing else "read")
    return cls(f"{label}: {reason}", reason)


# kind -> (error class, its reason from (what was under way, "write" | "read")): what happened, what to do.
_WORDS = {
    "disk": (
        DiskFullError,
        lambda after, _: (
            f"the disk is full (a write was refused{after}); the interrupted transaction was not kept and nothing "
            "stored before it was lost. Free space on that disk and run the command again"
        ),
    ),
    "read-only": (
        ReadOnlyError,
        lambda after, mode: (
            f"the file system holding the history is read-only, and this command must {mode} the file{after}. "
            "Mount it read-write, or point --db / ATTNWATCH_DB at a copy on a writable disk"
        ),
    ),
    "denied": (
        AccessDeniedError,
        lambda after, mode: (
            f"permission denied{after}: this user may not {mode} the history file or its directory. Run as the "
            "history's owner, or give this user access to both"
        ),
    ),
}
_WAIT_LONGER = f"Retry when it has finished, or wait longer with --lock-timeout or {LOCK_WAIT_ENV}"


def lock_held(label: str, held_by: str | None, after: str = "") -> LockTimeoutError:
    """Another process holds the history{after}: `held_by` (history.store.locks.holder) or, when
    nothing says which, what usually does."""
    reason = (
        f"another process holds the history{after} (an ingest, or a reader such as the dashboard or "
        f"`attnwatch sql`). {_WAIT_LONGER}"
    )
    said = f"the history is held{after} by {held_by}. {_WAIT_LONGER}" if held_by else reason
    return LockTimeoutError(f"{label}: {said}", reason)


def lock_timeout(label: str, deadline_s: float, held_by: str | None = None) -> LockTimeoutError:
    """The lock wait of `deadline_s` ran out; `held_by` names the holder when known."""
    busy = f"the history stayed busy for more than {deadline_s:g} s"
    reason = f"{busy} (locked by another process, or open in this one with other settings). {_WAIT_LONGER}"
    said = f"{busy}: held by {held_by}. {_WAIT_LONGER}" if held_by else reason
    return LockTimeoutError(f"{label}: {said}", reason)


def wal_replay_error(label: str, damaged: bool = False) -> WalReplayError:
    """A file whose write-ahead log DuckDB's own open cannot replay: intact (docs/upstream.md), or
    `damaged` (a checksum mismatch: then recover keeps only what the last checkpoint wrote)."""

    def text(command: str) -> str:
        if damaged:
            return (
                "this history's write-ahead log is damaged (a checksum does not match), so DuckDB cannot open "
                f"the history. Run `{command}`: it keeps a backup of both, and the history then holds what its "
                "last checkpoint wrote; the transactions only in the damaged log are not kept"
            )
        return (
            "DuckDB cannot replay this history's write-ahead log when opening it (a DuckDB defect after an "
            f"interrupted schema change; nothing is lost yet). Run `{command}`: it keeps a backup and folds "
            "the log into the file"
        )

    return WalReplayError(
        f"{label}: {text(f'attnwatch --db {shlex.quote(label)} history recover')}", text("attnwatch history recover")
    )
