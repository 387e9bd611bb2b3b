"""`attnwatch`: the command line, and the composition root of the project.

Every subcommand lives in its own module under `ci/commands/` and exposes
`register(subparsers)`, which adds its parser and sets `func(args) -> int` (the exit code).
The list below is explicit: no discovery by file name.

Errors a user can act on (ci.errors.UserError, history.errors.HistoryError, a fault of a file:
history.store.faults) are printed here, as one line, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from attnwatch.ci.errors import UserError
from attnwatch.history.errors import HistoryError
from attnwatch.history.store.faults import file_fault
from attnwatch.history.store.location import DB_ENV, default_file_path
from attnwatch.history.contract.repository import REPO_ENV

COMMAND_MODULES = (
    "run",
    "variants",
    "ingest",
    "sql",
    "export",
    "migrate",
    "history",
    "ncu",
    "compare",
    "bisect",
    "detect",
    "alerts",
    "comment",
    "dashboard",
    "env",
    "install_extras",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attnwatch",
        description="Regression tracking for GPU attention kernels: run, ingest, query, compare, detect.",
    )
    parser.add_argument(
        "--db",
        default=None,
        help="the history: a DuckDB file, or ducklake:postgres:<connection string> for a lake whose data "
        f"path is $ATTNWATCH_LAKE_DATA (default: $ATTNWATCH_DB or {os.environ.get(DB_ENV) or default_file_path()})",
    )
    parser.add_argument(
        "--repo",
        default=None,
        help=f"the repository (owner/name) the history tracks; a run of another is refused at ingest "
        f"(default: ${REPO_ENV}, else the repository of the runs the history holds)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"attnwatch.ci.commands.{name}").register(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI step cancelled, a service stopped), handled as Ctrl-C is: children stopped,
    temporary directories removed, what finished kept. Without it the default action ends the
    process on the spot and no clean-up runs."""


def _terminate(signum, _frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        try:
            return _dispatch(argv)
        finally:
            sys.stdout.flush()  # a closed pipe must surface here, not in the interpreter's exit flush
    except BrokenPipeError:
        # The reader went away (`attnwatch alerts list | head`): stop quietly with the status of a
        # Unix tool killed by SIGPIPE, and keep Python from failing again on its final flush.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _dispatch(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.db is None:
        args.db = os.environ.get(DB_ENV) or str(default_file_path())
    try:
        return int(args.func(args) or 0)
    except (UserError, HistoryError) as exc:
        print(f"attnwatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, read-only or forbidden file outside the history (history.store.faults)
        fault = file_fault(exc, str(exc.filename or "a file"))
        if fault is None:
            raise
        print(f"attnwatch {args.command}: error: {fault}", file=sys.stderr)
        return 2
    except Terminated:
        print("attnwatch: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("attnwatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
