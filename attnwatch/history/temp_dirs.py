"""Private temporary directories that do not outlive their process, even one that was killed.

attnwatch keeps some state in the system temp directory: the DuckDB extension links of a lake
connection (history/store/lake.py), a run's child logs and journals (ci/supervisor.py). They are removed
when their process ends normally, but a process that is SIGKILLed, or SIGTERMed without a
handler, runs no clean-up (atexit included), and a test run used to leave dozens behind. So
each directory's name carries its owner's PID (`attnwatch-ext-4242-k3j2l1`), and creating one
first removes this user's directories of the same kind whose process no longer exists. A
directory marked kept (a run's logs shown to the user after lost cases) is never swept.

Limitation: a PID is checked in this process's PID namespace; containers that share one /tmp
but not their PIDs should each have their own TMPDIR.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

KEPT_MARKER = ".attnwatch-kept"  # a file in a directory that must outlive its process


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def sweep_stale(prefix: str, root: Path | None = None) -> list[Path]:
    """Remove this user's `<prefix><pid>-*` directories in `root` (default: the temp directory)
    whose process is gone and that are not marked kept; returns what was removed."""
    root = Path(root or tempfile.gettempdir())
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[^/]+$")
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for path in entries:
        found = pattern.match(path.name)
        if not found or int(found.group(1)) == os.getpid():
            continue
        try:
            info = path.lstat()
        except OSError:
            continue
        if not path.is_dir() or path.is_symlink() or info.st_uid != os.getuid():
            continue
        if _alive(int(found.group(1))) or (path / KEPT_MARKER).exists():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def owned_temp_dir(prefix: str) -> Path:
    """A new mode-0700 `<prefix><pid>-XXXXXX` directory, after sweeping the stale ones."""
    sweep_stale(prefix)
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))


def mark_kept(path: Path, why: str) -> None:
    """Keep `path` past its process (never swept); the caller has told the user where it is."""
    (Path(path) / KEPT_MARKER).write_text(why + "\n", encoding="utf-8")
