"""Every `attnwatch` subcommand explains itself: a one-line summary in its parent's list of
commands, and a description at the top of its own `--help` (issue 44: 9 of 17 had none).

The commands are found by walking the real parser, so a command added later is checked too;
each `--help` runs through the CLI's own entry point, as a shell would reach it.
"""

from __future__ import annotations

import argparse

import pytest

from attnwatch.cli.main import build_parser, main


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, the one-line help its parent lists, its own description) for every subcommand,
    nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            summaries = {choice.dest: choice.help for choice in action._choices_actions}
            for name, child in action.choices.items():
                yield (*path, name), summaries.get(name), child.description
                yield from _commands(child, (*path, name))


COMMANDS = list(_commands(build_parser()))


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_walk_finds_every_command():
    names = {path[0] for path, _, _ in COMMANDS}
    assert len(names) >= 17 and {"run", "ingest", "sql", "history", "alerts", "install-extras"} <= names
    assert ("alerts", "ack") in {path for path, _, _ in COMMANDS}


@pytest.mark.parametrize("path,summary,description", COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_every_subcommand_has_a_summary_and_a_description(path, summary, description, capsys):
    command = f"attnwatch {' '.join(path)}"
    assert summary and summary.strip(), (
        f"`{' '.join(['attnwatch', *path[:-1]])} --help` lists {path[-1]} without a summary"
    )
    assert description and description.strip(), f"`{command} --help` has no description"
    with pytest.raises(SystemExit) as done:
        main([*path, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {command}") and _words(description) in _words(out), out[:600]
