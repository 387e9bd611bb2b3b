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
from attnwatch.history.contract.names import REPO_ENV

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
# The command names a module registers other than its own ("import" is export's other direction).
OTHER_NAMES = {"import": "export"}

# The top-level options that take a value (build_parser): skipped when finding the command's name.
VALUED_OPTIONS = ("--db", "--repo")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or, given the name of one of its commands, only that command's
    parser: each command module imports what its work needs, so `attnwatch sql` does not pay for
    the compare's and the profiler's imports (`command_named` finds the name)."""
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
    for name in COMMAND_MODULES if command is None else (_module_of(command),):
        importlib.import_module(f"attnwatch.cli.commands.{name}").register(sub)
    return parser


def _module_of(command: str) -> str:
    return OTHER_NAMES.get(command, command.replace("-", "_"))


def command_named(argv: list[str]) -> str | None:
    """The command `argv` names when it is one of ours, else None (no command, a top-level option
    such as --help, or a misspelt name: the whole parser answers those, listing every command)."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in VALUED_OPTIONS:
            i += 2
        elif arg.startswith(tuple(f"{o}=" for o in VALUED_OPTIONS)):
            i += 1
        elif arg.startswith("-"):
            return None
        else:
            return arg if _module_of(arg) in COMMAND_MODULES else None
    return None


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status (attnwatch.cli.top_level says which, and turns every failure into one line)."""
    return run_command(lambda: _parse(argv), fault_of=file_fault, argv=argv)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    args = build_parser(command_named(sys.argv[1:] if argv is None else argv)).parse_args(argv)
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
