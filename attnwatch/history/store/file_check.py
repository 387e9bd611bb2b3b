"""Whether a history path names a DuckDB file, decided by Python before DuckDB is given the path.

DuckDB reads a path by what it looks like and what it holds: a SQLite file is opened through the
SQLite extension, a path through a dangling symbolic link is created at the link's target, and a
directory is an I/O error with a traceback. So the path is looked at first (`existing`), and
only a regular file whose header is a DuckDB database's, or a path that does not exist yet, goes
on; anything else is refused in one line that names it, and nothing is written.

A DuckDB database file starts with its main header block: an 8-byte checksum, then the magic
bytes "DUCK" (DuckDB's storage_info.hpp, MainHeader; checked against a file DuckDB 1.5.5 writes,
tests/test_history_sealed_paths.py). A new history is created only below a directory: the
nearest part of the path that exists must be one (`refuse_uncreatable`).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from attnwatch.history.errors import NotAHistoryError
from attnwatch.history.store.faults import file_fault

MAGIC = b"DUCK"
MAGIC_OFFSET = 8
HEADER_BYTES = MAGIC_OFFSET + len(MAGIC)
OTHER_FORMATS = ((b"SQLite format 3\x00", "a SQLite database"), (b"PAR1", "a Parquet file"))
CUT_OFF_HINT = (
    "An empty or cut-off file is what an older attnwatch left when killed while creating a history: "
    "if it holds nothing of yours, remove it and run the command again"
)


def existing(path: Path, label: str) -> bool:
    """True for a DuckDB database file (or a link to one), False when nothing is at `path`;
    NotAHistoryError for anything else (module docstring), a FaultError when it cannot be read."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there; a parent that is a file: nothing either
        return False
    except OSError as exc:  # a name too long, permission on a parent
        raise _unreadable(exc, label) from None
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise NotAHistoryError(
            f"{label}: a symbolic link to {os.readlink(path)}, which does not exist; "
            "--db or ATTNWATCH_DB must name the history file itself"
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAHistoryError(
                f"{label}: a symbolic link loop; --db or ATTNWATCH_DB must name the history file itself"
            ) from None
        raise _unreadable(exc, label) from None
    if stat.S_ISDIR(info.st_mode):
        raise NotAHistoryError(
            f"{label}: a directory, not a history file; give the file inside it (e.g. history.duckdb)"
        )
    if not stat.S_ISREG(info.st_mode):
        raise NotAHistoryError(f"{label}: not a regular file (a device, pipe or socket), so not a history")
    _check_header(path, label, info.st_size)
    return True


def _check_header(path: Path, label: str, size: int) -> None:
    try:
        with open(path, "rb") as f:
            head = f.read(max(HEADER_BYTES, max(len(m) for m, _ in OTHER_FORMATS)))
    except OSError as exc:
        raise _unreadable(exc, label) from None
    if head[MAGIC_OFFSET:HEADER_BYTES] == MAGIC:
        return
    if len(head) < HEADER_BYTES:
        raise NotAHistoryError(f"{label}: not a DuckDB database ({size} bytes). {CUT_OFF_HINT}")
    what = next((name for magic, name in OTHER_FORMATS if head.startswith(magic)), None)
    if what is not None:
        raise NotAHistoryError(f"{label}: {what}, not a DuckDB history file; --db or ATTNWATCH_DB must name a history")
    raise NotAHistoryError(
        f"{label}: not a DuckDB database file (no DuckDB header in its first bytes; {size} bytes); "
        "--db or ATTNWATCH_DB must name a history"
    )


def refuse_uncreatable(path: Path, label: str) -> None:
    """NotAHistoryError unless a new history may be made at `path` (which does not exist): the
    nearest existing part of the path is a directory (missing ones in between are made)."""
    for parent in Path(os.path.abspath(path)).parents:
        if not os.path.lexists(parent):
            continue
        if not parent.is_dir():
            raise NotAHistoryError(f"{label}: cannot create a history here: {parent} is not a directory")
        return


def _unreadable(exc: OSError, label: str) -> Exception:
    fault = file_fault(exc, label, writing=False)
    if fault is not None:
        return fault
    return NotAHistoryError(f"{label}: cannot be read as a history file ({exc.strerror or exc})")
