"""How every `attnwatch` command ends: its exit status and, when it fails, one line on stderr.

`run_command` wraps a command line's whole life, from parsing its arguments to its last flush
(`attnwatch …` through attnwatch.cli.main, `python -m attnwatch compare`). Exit statuses
(docs/design.md, "Errors: one line, always"):

  0    done
  1    done, and the answer is no (detect --fail-on-new found something, a compare verdict,
       history recover could not keep everything)
  2    refused: an input or a fault the user can act on (ci.errors.UserError,
       history.errors.HistoryError, a file fault, the system refusing a path the user named),
       one line naming the file and what to do; argparse's usage errors too
  70   an internal error (EXIT_INTERNAL): an exception nobody anticipated, a defect of attnwatch
       and not of the input. One line: the command, the exception's type and text, the history
       and the input files, and where the full traceback was saved (history.crash_log)
  130  interrupted (Ctrl-C); 141 the reader of stdout went away (128 + SIGPIPE); 143 SIGTERM

Every line printed here goes through history.terminal_text: no control character from an
exception's text or a file name reaches the terminal raw.

A signal that arrives while DuckDB runs a statement is not seen as Terminated or
KeyboardInterrupt: DuckDB's client calls the Python handler, then raises its own
`RuntimeError('Query interrupted')` (the handler's exception as its cause), and code on the way
out may wrap that again. So SIGTERM is remembered when it arrives, and whatever a command raises
after it ends as "terminated", exit 143; Ctrl-C found anywhere in an exception's chain as
"interrupted", exit 130.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import Callable

from attnwatch.ci.errors import UserError
from attnwatch.history.crash_log import EXIT_INTERNAL, describe, saved_where
from attnwatch.history.errors import HistoryError
from attnwatch.history.terminal_text import one_line

EXIT_REFUSED = 2
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE
MAX_ERROR = 4000  # characters of a refusal's line (a refusal names full paths: not cut short in practice)
# Parsed arguments that are never an input file.
_NOT_INPUTS = frozenset({"db", "func", "command", "repo"})
# Commands that never open the history: their failure line does not name one
# (tests/test_cli_errors.py checks the list against the commands' source).
WITHOUT_HISTORY = frozenset({"variants", "ncu", "compare", "affected", "cache_key", "comment", "env", "install_extras"})
_PASSWORD = re.compile(r"(password\s*=\s*)\S+", re.IGNORECASE)

FaultOf = Callable[[OSError, str], BaseException | None]


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI step cancelled, a service stopped), handled as Ctrl-C is: children stopped,
    temporary directories removed, what finished kept. Without it the default action ends the
    process on the spot and no clean-up runs."""


def run_command(
    parse: Callable[[], argparse.Namespace], fault_of: FaultOf | None = None, argv: list[str] | None = None
) -> int:
    """Parse the arguments (`parse`), run `args.func(args)` and return the exit status, turning
    every way it can end into one of those in the module docstring.

    `fault_of(exc, label)`: the one-line fault for an OSError (history.store.faults.file_fault),
    or None when it is not one; the CLI passes it in, a command line that must start without the
    store (compare on a GPU runner) does not. `argv`: the arguments, for the saved traceback
    (default: this process's).
    """
    argv = [sys.argv[0], *argv] if argv is not None else list(sys.argv)
    main_thread = threading.current_thread() is threading.main_thread()
    received: list[int] = []

    def on_sigterm(signum, _frame) -> None:
        received.append(signum)
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_sigterm) if main_thread else None
    previous_hook = threading.excepthook
    args: argparse.Namespace | None = None

    def thread_failed(hook_args) -> None:  # a worker thread's exception: saved, one line, not a traceback
        if hook_args.exc_type is not SystemExit and hook_args.exc_value is not None and not received:
            _say(_internal_line(hook_args.exc_value, args, argv, "in a background thread"))

    threading.excepthook = thread_failed
    try:
        try:
            args = parse()
            return int(args.func(args) or 0)
        finally:
            sys.stdout.flush()  # a closed pipe must surface here, not in the interpreter's exit flush
    except BrokenPipeError:
        # The reader went away (`attnwatch alerts list | head`): stop quietly with the status of a
        # Unix tool killed by SIGPIPE, and keep Python from failing again on its final flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
    except Exception as exc:  # noqa: BLE001 - the one place every failure is turned into a line
        return _ended_by(exc, args, argv, received, fault_of)
    except KeyboardInterrupt:
        _say("attnwatch: terminated" if received else "attnwatch: interrupted")
        return EXIT_TERMINATED if received else EXIT_INTERRUPTED
    finally:
        threading.excepthook = previous_hook
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _ended_by(exc: Exception, args, argv: list[str], received: list[int], fault_of: FaultOf | None) -> int:
    if received or _in_chain(exc, Terminated):
        _say("attnwatch: terminated")
        return EXIT_TERMINATED
    if _in_chain(exc, KeyboardInterrupt):
        _say("attnwatch: interrupted")
        return EXIT_INTERRUPTED
    command = _command(args)
    if isinstance(exc, (UserError, HistoryError)):
        _say(f"attnwatch {command}: error: {one_line(str(exc), MAX_ERROR)}")
        return EXIT_REFUSED
    if isinstance(exc, OSError) and fault_of is not None:
        # a full disk, read-only or forbidden file outside the history (history.store.faults)
        fault = fault_of(exc, str(exc.filename or "a file"))
        if fault is not None:
            _say(f"attnwatch {command}: error: {one_line(str(fault), MAX_ERROR)}")
            return EXIT_REFUSED
    if isinstance(exc, OSError) and exc.filename is not None and _names(args, exc.filename):
        # the system refused a path the user named (too long a name, not a directory, a loop): about the input
        _say(f"attnwatch {command}: error: {one_line(f'{exc.filename}: {exc.strerror or exc}', MAX_ERROR)}")
        return EXIT_REFUSED
    _say(_internal_line(exc, args, argv))
    return EXIT_INTERNAL


def _internal_line(exc: BaseException, args, argv: list[str], where: str = "") -> str:
    """What failed, on which input, and where its traceback is."""
    command = _command(args)
    saved = saved_where(exc, command, argv)
    inputs = "; ".join(f"{k} {v}" for k, v in _inputs(args))
    return one_line(
        f"attnwatch {command}: internal error{f' {where}' if where else ''}: {describe(exc)}"
        f"{f' [{inputs}]' if inputs else ''} ({saved}); this is a defect of attnwatch, please report it",
        MAX_ERROR,
    )


def _command(args) -> str:
    return str(getattr(args, "command", None) or "(starting)")


def _inputs(args) -> list[tuple[str, str]]:
    """The history and the input files named on the command line (those that exist)."""
    if args is None:
        return []
    found = []
    # WITHOUT_HISTORY names command modules; the command line spells `cache-key`, `install-extras`
    db = getattr(args, "db", None) if _command(args).replace("-", "_") not in WITHOUT_HISTORY else None
    if db:
        found.append(("history", _PASSWORD.sub(r"\1<hidden>", str(db))))
    files = []
    for name, value in sorted(vars(args).items()):
        if name in _NOT_INPUTS:
            continue
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (str, os.PathLike)) and str(item) != str(db) and os.path.lexists(item):
                files.append(str(Path(item)))
    if files:
        found.append(("input", ", ".join(dict.fromkeys(files))))
    return found


def _names(args, filename) -> bool:
    """Whether `filename` is a path named on the command line (the history, an input), or inside one."""
    if not isinstance(filename, (str, os.PathLike)):
        return False
    wanted = os.fspath(filename)
    for name, value in vars(args or argparse.Namespace()).items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if name in ("func", "command") or not isinstance(item, (str, os.PathLike)):
                continue
            given = os.fspath(item).rstrip(os.sep)
            if given and given != "." and (wanted.rstrip(os.sep) == given or wanted.startswith(given + os.sep)):
                return True
    return False


def _in_chain(exc: BaseException | None, kind: type) -> bool:
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:  # stderr itself is gone: the exit status still tells
        pass
