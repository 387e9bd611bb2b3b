"""The linter passes on the whole checkout: `ruff check` with the project's rule set
([tool.ruff] in pyproject.toml: pyflakes, the non-layout pycodestyle errors, bugbear less the rules
named there with their reasons), and `ruff format --check`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"ruff exit {proc.returncode}:\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"


def test_ruff_format_leaves_every_file_as_it_is():
    """Every Python file is laid out by `ruff format` ([tool.ruff.format]; the Triton kernel sources
    it excludes say why): a change that is not formatted fails here, not in review."""
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--no-cache", "--check", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"ruff format exit {proc.returncode}:\n{proc.stdout[-6000:]}{proc.stderr[-2000:]}"
