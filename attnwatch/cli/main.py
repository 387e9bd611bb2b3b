"""`attnwatch`: the command line, and the composition root of the project.

Every subcommand lives in its own module under `attnwatch/cli/commands/` and exposes
`register(subparsers)`, which adds its parser and sets `func(args) -> int` (the exit code).
The list below is explicit: no discovery by file name.

Every way a command can end, and the one line it prints when it fails, is attnwatch.cli.top_level's:
errors a user can act on (ci.errors.UserError, history.errors.HistoryError, a fault of a file:
history.store.faults) exit 2, an unexpected exception 70 with its traceback saved to a file.

The history's location is read here once: `--db`, else $ATTNWATCH_DB, else the default file,
parsed (history.store.location.parse_location) as the command starts, so a command finds
`args.db` a HistoryLocation and hands that object down. A command that never opens the history
(top_level.WITHOUT_HISTORY, `run` without --ingest, a subcommand that sets `db_unused` such as
`history copy`, which names its own two) does not parse it: a setting it has no use for cannot stop it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
from typing import Callable

from attnwatch.cli.top_level import WITHOUT_HISTORY, run_command
from attnwatch.history.store.faults import file_fault
from attnwatch.history.store.location import DB_ENV, default_file_path, default_location, parse_location
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
    "affected",
    "bisect",
    "detect",
    "alerts",
    "comment",
    "dashboard",
    "env",
    "install_extras",
    "cache_key",
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
        importlib.import_module(f"attnwatch.cli.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (attnwatch.cli.top_level says which, and turns every failure into one line)."""
    return run_command(lambda: _parse(argv), fault_of=file_fault, argv=argv)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    if opens_history(args):
        args.func = _located(args.func)
    return args


def opens_history(args: argparse.Namespace) -> bool:
    """Whether the command may open the history (module docstring)."""
    if args.command.replace("-", "_") in WITHOUT_HISTORY or getattr(args, "db_unused", False):
        return False
    return not (args.command == "run" and not args.ingest)


def _located(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`command`, with `args.db` parsed into a HistoryLocation first (inside the command, so a bad
    setting's one-line error names the command, as every refusal does)."""

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        args.db = parse_location(args.db) if args.db is not None else default_location()
        return command(args)

    return run


if __name__ == "__main__":
    sys.exit(main())
