"""The history's location is parsed once, by the command line (attnwatch.cli.main), and reaches
the history as one HistoryLocation: every spelling of a lake's setting (--db, padded --db,
$ATTNWATCH_DB) arrives as the location parse_location makes of it, through every command that
takes --db; a command that never opens the history is not stopped by a setting it has no use for."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.cli import main as cli_main
from attnwatch.cli.top_level import WITHOUT_HISTORY
from attnwatch.history.store.location import HistoryLocation, parse_location

ROOT = Path(__file__).resolve().parent.parent
LAKE = "ducklake:postgres:dbname=attnwatch host=db.internal user=ci"
# One command line per command that may open the history (the subcommand's own arguments).
OPENING = {
    "run": ["--ingest"],
    "ingest": ["bundle"],
    "sql": ["SELECT 1"],
    "export": ["out"],
    "import": ["out"],
    "migrate": [],
    "history recover": [],
    "history maintain": [],
    "history default-branch": [],
    "bisect": ["--alert", "1"],
    "detect": [],
    "alerts list": [],
    "alerts ack": ["1", "--note", "seen"],
    "alerts resolve": ["1"],
    "dashboard": [],
}


def _commands() -> set[str]:
    parser = cli_main.build_parser()
    return set(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)


def _seen(argv: list[str]) -> HistoryLocation:
    """What `args.db` the command of `argv` receives when it runs."""
    args = cli_main._parse(argv)
    assert hasattr(args.func, "__wrapped__"), f"{argv}: the command is not handed a parsed location"
    received = []
    cli_main._located(lambda a: received.append(a.db) or 0)(args)
    return received[0]


def test_every_command_is_either_located_or_without_history():
    named = {c.split()[0] for c in OPENING}
    assert {c.replace("-", "_") for c in _commands()} == {c.replace("-", "_") for c in named | WITHOUT_HISTORY}


@pytest.mark.parametrize("command", sorted(OPENING))
@pytest.mark.parametrize("form", ["flag", "padded flag", "environment"])
def test_a_lake_setting_reaches_each_command_as_one_location(command, form, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_LAKE_DATA", "/srv/lake-data")
    monkeypatch.delenv("ATTNWATCH_DB", raising=False)
    argv = [*command.split(), *OPENING[command]]
    if form == "environment":
        monkeypatch.setenv("ATTNWATCH_DB", LAKE)
    else:
        argv = ["--db", f"  {LAKE}  " if form == "padded flag" else LAKE, *argv]
    seen = _seen(argv)
    assert isinstance(seen, HistoryLocation)
    assert seen == parse_location(LAKE) == HistoryLocation(catalog=LAKE.split(":", 2)[2], data_path="/srv/lake-data/")


def test_a_file_setting_reaches_a_command_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert _seen(["--db", "~/h.duckdb", "migrate"]) == HistoryLocation(path=tmp_path / "h.duckdb")


@pytest.mark.parametrize("argv", [["env"], ["run"], ["history", "copy", "a.duckdb", "b.duckdb"]])
def test_a_command_without_the_history_leaves_the_setting_unparsed(argv):
    args = cli_main._parse(["--db", "md:not-a-history", *argv])
    assert not hasattr(args.func, "__wrapped__") and args.db == "md:not-a-history"


def test_a_bad_setting_is_refused_once_in_one_line_naming_the_command(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), ATTNWATCH_DB="md:not-a-history")
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "detect"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "attnwatch detect: error: md:not-a-history: not a history location: DuckDB reads `md:` as an extension's "
        "prefix; a history is a DuckDB file's path (write ./md:not-a-history for a file of that name) or "
        "`ducklake:postgres:...`"
    ]
