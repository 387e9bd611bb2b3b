"""The type checker passes on the whole package: `python -m mypy -p attnwatch` with the project's
configuration ([tool.mypy] in pyproject.toml: default checks, unused ignores reported, only the
named third-party packages without type information left unresolved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_finds_no_error_in_the_package(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(tmp_path / "mypy-cache"),
            "-p",
            "attnwatch",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, f"mypy exit {proc.returncode}:\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
