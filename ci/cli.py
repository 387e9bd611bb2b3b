"""`attnwatch`: the command line, and the composition root of the project.

Every subcommand lives in its own module under `ci/commands/` and exposes
`register(subparsers)`, which adds its parser and sets `func(args) -> int` (the exit code).
The list below is explicit: no discovery by file name.

Errors a user can act on (ci.errors.UserError, history.errors.HistoryError, a fault of a file:
history.faults) are printed here, as one line, with exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from ci.errors import UserError
from history.errors import HistoryError
from history.faults import file_fault
from history.location import DB_ENV, default_file_path

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
    "detect",
    "alerts",
    "comment",
    "dashboard",
    "env",
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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        importlib.import_module(f"ci.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.db is None:
        args.db = os.environ.get(DB_ENV) or str(default_file_path())
    try:
        return int(args.func(args) or 0)
    except (UserError, HistoryError) as exc:
        print(f"attnwatch {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, read-only or forbidden file outside the history (history.faults)
        fault = file_fault(exc, str(exc.filename or "a file"))
        if fault is None:
            raise
        print(f"attnwatch {args.command}: error: {fault}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("attnwatch: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
