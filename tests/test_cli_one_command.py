"""`attnwatch COMMAND` imports only that command's module (attnwatch.cli.main.build_parser): the
name is found past the top-level options, every registered name maps back to its module, and a
name that is not a command, or no name, gets the whole parser, which lists every command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.cli.main import build_parser, command_named

ROOT = Path(__file__).resolve().parent.parent


def _registered(parser) -> set[str]:
    (sub,) = [a for a in parser._actions if a.dest == "command"]
    return set(sub.choices)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["sql", "select 1"], "sql"),
        (["--db", "h.duckdb", "ingest", "b"], "ingest"),
        (["--db=h.duckdb", "--repo", "o/n", "detect"], "detect"),
        (["--repo=o/n", "install-extras", "--help"], "install-extras"),
        (["import", "dir"], "import"),
        (["--help"], None),
        (["sqll"], None),
        ([], None),
        (["--db"], None),
    ],
)
def test_the_command_is_found_past_the_top_level_options(argv, expected):
    assert command_named(argv) == expected


def test_every_registered_name_builds_a_parser_of_that_command_alone():
    names = _registered(build_parser())
    assert len(names) >= 19 and {"import", "export", "cache-key"} <= names
    for name in names:
        assert name in _registered(build_parser(name)), name


def test_a_misspelt_command_is_answered_with_every_command_listed(capsys):
    from attnwatch.cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["sqll"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'sqll'" in err and "'compare'" in err and "'cache-key'" in err


def test_a_query_does_not_import_the_compare_or_the_profiler():
    """In a fresh process, as `attnwatch sql` starts: the other commands' modules stay unloaded."""
    probe = (
        "import sys\n"
        "from attnwatch.cli.main import build_parser, command_named\n"
        "build_parser(command_named(['sql', 'select 1'])).parse_args(['sql', 'select 1'])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('attnwatch.ci.compare', 'attnwatch.ci.ncu', "
        "'attnwatch.ci.integration', 'attnwatch.kernels'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
