"""An unexpected exception: its full traceback saved to a file, so the terminal gets one line.

A command that meets an exception nobody anticipated (a defect of attnwatch, or of a library
under it, not a refused input) prints one line saying what failed, on which input and where
this module saved the traceback (attnwatch.cli.top_level words the line), and exits with EXIT_INTERNAL.

Where: `$XDG_STATE_HOME/attnwatch/tracebacks/` (`~/.local/state/attnwatch/tracebacks/` when
XDG_STATE_HOME is unset or not absolute, as the XDG Base Directory Specification says: state
that outlives a run but is not worth backing up, such as logs). Never beside the history: a
refused or failing command must leave the history's directory as it found it. The directory is
made with mode 0700 and used only while it is a real directory (not a link) of this user that
no one else may write; each file is created new (O_EXCL, O_NOFOLLOW, mode 0600), named by the
UTC time, the command and the process id. At most KEEP files are kept (the oldest go). When
that directory cannot be used (a read-only home, say), the file goes to the system temporary
directory under a unique name; when neither can be written, the line says why.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
import traceback
from datetime import datetime, timezone
from pathlib import Path

from attnwatch.history.terminal_text import one_line

EXIT_INTERNAL = 70  # sysexits.h EX_SOFTWARE, "an internal software error": not 1 (a verdict), not 2 (refused input)
KEEP = 50
DIR_NAME = ("attnwatch", "tracebacks")
MAX_MESSAGE = 300  # characters of the exception's text on the terminal line


def log_dir() -> Path:
    """The per-user directory tracebacks are saved in (module docstring)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if os.path.isabs(state) else Path.home() / ".local" / "state"
    return base.joinpath(*DIR_NAME)


def describe(exc: BaseException, limit: int = MAX_MESSAGE) -> str:
    """`Type: message` of `exc` as one printable line (the module name left out)."""
    text = str(exc).strip()
    return one_line(f"{type(exc).__name__}: {text}" if text else type(exc).__name__, limit)


def saved_where(exc: BaseException, command: str, argv: list[str] | None = None) -> str:
    """Save `exc`'s traceback (save_traceback) and say where, for the end of the one line."""
    path, why = save_traceback(exc, command, argv)
    return f"full traceback in {path}" if path else f"traceback not saved: {why}"


def save_traceback(exc: BaseException, command: str, argv: list[str] | None = None) -> tuple[Path | None, str]:
    """Write `exc`'s traceback (with the command line, versions and time) to a new file.

    Returns (the file, "") or (None, why it could not be written).
    """
    when = datetime.now(timezone.utc)
    text = _report(exc, command, argv if argv is not None else sys.argv, when)
    name = f"{when:%Y%m%dT%H%M%S}Z-{_safe(command)}-{os.getpid()}"
    problems = []
    try:
        directory = log_dir()
    except RuntimeError as exc_home:  # Path.home() with no home directory
        directory, problems = None, [f"no home directory ({exc_home})"]
    if directory is not None:
        try:
            path = _write_new(_private_dir(directory), name, text)
            _prune(directory)
            return path, ""
        except OSError as exc_dir:
            problems.append(f"{directory}: {exc_dir.strerror or exc_dir}")
    try:
        fd, temp_name = tempfile.mkstemp(prefix=f"attnwatch-traceback-{name}-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        return Path(temp_name), ""
    except OSError as exc_tmp:
        problems.append(f"the temporary directory: {exc_tmp.strerror or exc_tmp}")
    return None, "; ".join(problems)


def _report(exc: BaseException, command: str, argv: list[str], when: datetime) -> str:
    version = getattr(sys.modules.get("attnwatch"), "__version__", "?")
    return "".join(
        [
            f"attnwatch {version} {command}: internal error at {when.isoformat()}\n",
            f"python {sys.version.split()[0]} ({sys.executable})\n",
            f"argv: {argv!r}\n\n",
            *traceback.format_exception(exc),
        ]
    )


def _safe(command: str) -> str:
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in command)[:40] or "command"


def _private_dir(directory: Path) -> Path:
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise OSError("not a plain directory")
    if info.st_uid != os.getuid():
        raise OSError("it belongs to another user")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise OSError("other users may write to it")
    return directory


def _write_new(directory: Path, name: str, text: str) -> Path:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for attempt in range(100):
        path = directory / (f"{name}.txt" if attempt == 0 else f"{name}-{attempt}.txt")
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        return path
    raise OSError(f"no free file name for {name}")


def _prune(directory: Path) -> None:
    """Keep the newest KEEP tracebacks (the names sort by time)."""
    try:
        saved = sorted(p for p in directory.iterdir() if p.name.endswith(".txt") and p.is_file())
        for old in saved[:-KEEP]:
            old.unlink(missing_ok=True)
    except OSError:
        pass
