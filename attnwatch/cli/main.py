"""`attnwatch`: the command line, and the composition root of the project.

Every subcommand lives in its own module under `attnwatch/cli/commands/` and exposes
`register(subparsers)`, which adds its parser and sets `func(args) -> int` (the exit code).
The list below is explicit: no discovery by file name.

Every way a command can end, and the one line it prints when it fails, is attnwatch.cli.top_level's:
errors a user can act on (ci.errors.UserError, history.errors.HistoryError, a fault of a file:
history.store.faults) exit 2, an unexpected exception 70 with its traceback saved to a file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from attnwatch.cli.top_level import run_command
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
    if args.db is None:
        args.db = os.environ.get(DB_ENV) or str(default_file_path())
    return args


if __name__ == "__main__":
    sys.exit(main())
