"""docs/howto/adopt-attnwatch.md against what it describes: its table of the composite action's
inputs is the action's, its commands are examples/adopt/README.md's, and (slow) its steps 1-2
measure examples/adopt's suite in a new repository and store it in a history."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import duckdb
import pytest
from ruamel.yaml import YAML

from howto_support import HOWTO, ROOT

PAGE = (HOWTO / "adopt-attnwatch.md").read_text(encoding="utf-8")
EXAMPLE = ROOT / "examples" / "adopt"


def test_the_input_table_is_the_actions_inputs():
    inputs = YAML(typ="safe").load((ROOT / ".github" / "actions" / "attnwatch-bench" / "action.yml").read_text())[
        "inputs"
    ]
    table = PAGE.split("## The action's inputs", 1)[1]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+)` \| ([^|]+) \|", table, re.MULTILINE)}
    assert set(rows) == set(inputs)
    for name, spec in inputs.items():
        default = rows[name].strip()
        assert default.startswith("empty") if spec["default"] == "" else default == f"`{spec['default']}`", name


def test_the_commands_are_the_example_repositorys():
    example = (EXAMPLE / "README.md").read_text(encoding="utf-8")
    for command in (
        "pytest tests/bench --benchmark-json=bench.json",
        "attnwatch ingest bench.json",
        "compare --pytest tests/bench --base main",
    ):
        assert command in PAGE and command in example, command


@pytest.mark.slow
def test_steps_one_and_two_store_the_example_suite(tmp_path):
    """On the CPU (Triton's interpreter): measure, then ingest, as step 2 writes it."""
    repo = tmp_path / "mykernels"
    shutil.copytree(EXAMPLE, repo)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    for args in (["init", "--quiet", "-b", "main"], ["add", "-A"], ["commit", "--quiet", "-m", "kernels"]):
        subprocess.run([*git, *args], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNWATCH_")}
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", ATTNWATCH_REPO="myteam/mykernels")
    measured = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "tests/bench", "--benchmark-json=bench.json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert measured.returncode == 0, measured.stdout + measured.stderr
    db = tmp_path / "history.duckdb"
    ingested = subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), "ingest", "bench.json"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ingested.returncode == 0, ingested.stderr
    con = duckdb.connect(str(db), read_only=True)
    try:
        variants = {v for (v,) in con.execute("SELECT DISTINCT variant FROM results").fetchall()}
        repos = {r for (r,) in con.execute("SELECT DISTINCT repo FROM runs").fetchall()}
    finally:
        con.close()
    assert variants == {"softmax_triton", "softmax_torch"} and repos == {"myteam/mykernels"}
