"""A GPU runner measures without the history's packages: duckdb, streamlit and plotly may be
missing there (the GPU machine has none), so the command line must parse, and `run` start,
without importing them. Every command module is registered at parse time, so one top-level
import of a history module anywhere breaks `attnwatch run` on that runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MISSING = ("duckdb", "streamlit", "plotly")


@pytest.fixture(scope="module")
def env_without_history_packages(tmp_path_factory) -> dict:
    missing = tmp_path_factory.mktemp("missing")
    for name in MISSING:
        (missing / f"{name}.py").write_text(f"raise ImportError('{name} is not installed here')\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(missing), str(ROOT)])
    return env


@pytest.mark.parametrize("argv", [["--help"], ["run", "--help"], ["bisect", "--help"], ["ncu", "--help"]])
def test_the_command_line_parses_without_duckdb_streamlit_or_plotly(env_without_history_packages, argv):
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", *argv],
        cwd=ROOT,
        env=env_without_history_packages,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage: attnwatch" in done.stdout
    assert "internal error" not in done.stderr


def test_the_stand_ins_really_are_unimportable(env_without_history_packages):
    """The check above proves something only if the stand-ins shadow the real packages."""
    done = subprocess.run(
        [sys.executable, "-c", "import duckdb"],
        cwd=ROOT,
        env=env_without_history_packages,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "duckdb is not installed here" in done.stderr
