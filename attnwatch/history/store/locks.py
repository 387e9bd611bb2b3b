"""How long a command waits for a history file another process holds, and which process holds it.

One setting scales every wait: ATTNWATCH_LOCK_WAIT_S (seconds; DEFAULT_LOCK_WAIT_S when unset)
is how long a writer (ingest, detect, alerts, migrate, history default-branch) waits for the
file's lock, unless its `--lock-timeout` says otherwise. Readers that close soon (the
dashboard, `attnwatch sql`, the schema check of `migrate`) wait READ_SHARE of it, and ingest's
"already stored?" check PRECHECK_SHARE (it validates everything instead when the history is
busy), so on a loaded machine raising the one setting lengthens every wait in proportion. A
second `migrate` beside another used to give up after a fixed 10 s read wait.

When a wait runs out the message says what holds the lock: DuckDB's lock error names the
holder's process id (`Conflicting lock is held in /usr/bin/python3 (PID 4242)`), else the
kernel's table of file locks (/proc/locks) does; the process is then described by its command
line (/proc/PID/cmdline, the program by its base name, ASCII with other characters escaped, cut
to CMDLINE_CHARS characters).
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from attnwatch.history.errors import HistoryError

LOCK_WAIT_ENV = "ATTNWATCH_LOCK_WAIT_S"
DEFAULT_LOCK_WAIT_S = 60.0
READ_SHARE = 1 / 6  # a short-lived reader's wait: 10 s of the default
PRECHECK_SHARE = 1 / 30  # ingest's unchanged-input check: 2 s of the default
CMDLINE_CHARS = 200
_PID = re.compile(r"\(PID (\d+)\)")


def lock_wait_s() -> float:
    """The writers' wait for a busy history file: ATTNWATCH_LOCK_WAIT_S, else DEFAULT_LOCK_WAIT_S."""
    text = os.environ.get(LOCK_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_LOCK_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise HistoryError(f"{LOCK_WAIT_ENV}={text[:40]!r}: expected a number of seconds, 0 or more")
    return value


def read_wait_s() -> float:
    """A short-lived reader's wait: READ_SHARE of lock_wait_s()."""
    return lock_wait_s() * READ_SHARE


def precheck_wait_s() -> float:
    """Ingest's "already stored?" check's wait: PRECHECK_SHARE of lock_wait_s()."""
    return lock_wait_s() * PRECHECK_SHARE


def holder(error_text: str, path: Path | str | None = None) -> str | None:
    """The process holding a history file's lock, in words ("process 4242 (attnwatch ingest b)",
    or "this process" for another connection of the caller's own), or None when nothing says.

    DuckDB's lock error is read first; else /proc/locks for a lock on `path`'s file."""
    match = _PID.search(error_text or "")
    pid = int(match.group(1)) if match else _lock_owner(path)
    if pid is None:
        return None
    if pid == os.getpid():
        return "this process (another connection to the history, with other settings)"
    command = command_line(pid)
    return f"process {pid}" + (f" ({command})" if command else "")


def command_line(pid: int) -> str | None:
    """`pid`'s command line as a user would type it, its program by base name, printable ASCII only,
    cut to CMDLINE_CHARS; None when it cannot be read (gone, another user's, not Linux)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    args = [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0") if a]
    if not args:
        return None
    args[0] = os.path.basename(args[0])
    text = "".join(ch if ch.isascii() and ch.isprintable() else ascii(ch)[1:-1] for ch in shlex.join(args))
    return text if len(text) <= CMDLINE_CHARS else text[: CMDLINE_CHARS - 3] + "..."


def _lock_owner(path: Path | str | None) -> int | None:
    """The process id /proc/locks gives for a lock on `path`'s file (another process's first)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
        table = Path("/proc/locks").read_text()
    except OSError:
        return None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    owners = []
    for line in table.splitlines():
        fields = line.split()
        # "1: POSIX  ADVISORY  WRITE 4242 08:01:1234 0 EOF" (a blocked waiter's line has "->" in front)
        if "->" in fields:
            continue
        if len(fields) >= 6 and fields[5] == device and fields[4].isdigit():
            owners.append(int(fields[4]))
    others = [pid for pid in owners if pid != os.getpid()]
    return others[0] if others else owners[0] if owners else None
