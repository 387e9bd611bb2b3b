"""examples/adopt walked as a new repository from its README, on the CPU: a git repository of its
own (a Triton kernel under Triton's interpreter and a torch one, in a package of its own, with a
pytest-benchmark suite on the gpu_benchmark fixture) and attnwatch installed from the built wheel
into a fresh environment (tests/wheel_env.py), no PYTHONPATH: the suite finds the fixture through
the installed `pytest11` entry point.

The walk, each command as examples/adopt/README.md writes it: measure; ingest into a history
named myteam/mykernels, refused while the records name the checkout `local/mykernels` (no remote)
and stored once ATTNWATCH_REPO names it where the suite is measured; query with `attnwatch sql`;
edit the kernels with a 1% error in the Triton kernel and a slowdown in the torch one, which
`compare --fail-on regression` refuses to judge uncommitted; committed on a branch, the next
measurement sees both (the package is installed, not editable, from main: the suite times the
checkout) and is ingested beside main's run; the compare against `main` judges the slowdown a
regression and the 1% error a correctness failure; the installed dashboard shows the runs.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from wheel_env import pip, venv_with_wheel

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "adopt"

DASHBOARD = textwrap.dedent("""\
    import json, sys
    from streamlit.testing.v1 import AppTest
    from attnwatch.cli.commands.dashboard import entrypoint
    at = AppTest.from_file(str(entrypoint()), default_timeout=120)
    at.run()
    at.switch_page("views/run.py").run()
    shown = [str(getattr(e, "value", "")) for kind in ("markdown", "dataframe", "caption") for e in getattr(at, kind)]
    print(json.dumps({"file": str(entrypoint()), "exceptions": [str(e.value) for e in at.exception], "shown": shown}))
    """)

# The plants, as a user would type them: every output of the Triton kernel 1% high, and the torch
# kernel's exponential taken 200 times (a gross slowdown, clear of a loaded CPU's noise).
ONE_PERCENT = ("    y = e / tl.sum(e, axis=0)\n", "    y = e / tl.sum(e, axis=0) * 1.01\n")
SLOWER = ("    e = torch.exp(shifted.float())\n", "    for _ in range(200):\n        e = torch.exp(shifted.float())\n")


def _readme_commands() -> list[str]:
    """The command lines of examples/adopt/README.md (its indented blocks), comments dropped."""
    lines = (EXAMPLE / "README.md").read_text().splitlines()
    return [line.split("  #")[0].strip() for line in lines if line.startswith("    ") and line.strip()]


PYTEST_SCRIPT = """#!{python}
import sys
from pytest import console_main
sys.exit(console_main())
"""


def _pytest_command(bin_dir: Path, python: Path) -> None:
    """The `pytest` command pip writes into an environment that installs pytest (the fresh one has
    it through the test's own environment, tests/wheel_env.py, without the command): unlike
    `python -m pytest` it does not put the working directory on sys.path, as a user's does not."""
    script = bin_dir / "pytest"
    script.write_text(PYTEST_SCRIPT.format(python=python))
    script.chmod(0o755)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=adopter", "-c", "user.email=adopter@example.com", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, path
    path.write_text(text.replace(old, new))


def test_the_readmes_compare_against_a_branch_a_new_repository_has():
    """`--base origin/main` needs a remote a new local repository does not have: the READMEs
    compare against `main` (compare measures its merge base with the head)."""
    adopt = (ROOT / "README.md").read_text().split("## Adopt it in your repository", 1)[1].split("\n## ", 1)[0]
    for text in (adopt, (EXAMPLE / "README.md").read_text()):
        assert "origin/main" not in text and "compare --pytest tests/bench --base main" in text


@pytest.mark.slow
def test_a_new_repository_walks_the_example_readme_from_install_to_a_caught_regression(tmp_path, attnwatch_wheel):
    documented = _readme_commands()
    python = venv_with_wheel(tmp_path, attnwatch_wheel)
    bin_dir = python.parent
    _pytest_command(bin_dir, python)
    repo = tmp_path / "mykernels"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "row softmax in Triton and torch")
    # Installed as the composite action installs it (not editable): the suite must still time the checkout.
    pip(python, "install", "--no-deps", "--no-build-isolation", "--no-index", str(repo))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "ATTNWATCH_DB", "ATTNWATCH_REPO") and not k.startswith("GITHUB_")
    }
    env.update(
        TRITON_INTERPRET="1", ATTNWATCH_DB=str(tmp_path / "history.duckdb"), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}"
    )

    def run(command: str, rc: int = 0) -> subprocess.CompletedProcess:
        """A command of the README, run as typed in the repository's directory."""
        assert command in documented, f"not in examples/adopt/README.md: {command}"
        done = subprocess.run(shlex.split(command), cwd=repo, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == rc, f"{command}: exit {done.returncode}\n" + done.stdout[-3000:] + done.stderr[-3000:]
        return done

    def sql(query: str) -> list[list[str]]:
        done = subprocess.run(
            [str(bin_dir / "attnwatch"), "sql", "--format", "csv", query],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return [line.split(",") for line in done.stdout.strip().splitlines()[1:]]

    # Measure; the records name the checkout, which has no remote: local/mykernels.
    run("pytest tests/bench --benchmark-json=bench.json")
    assert json.loads((repo / "bench.json").read_text())["commit_info"]["project"] == "local/mykernels"
    env["ATTNWATCH_REPO"] = "myteam/mykernels"  # the history's name, as the README says to set it
    refused = run("attnwatch ingest bench.json", rc=2)
    assert (
        refused.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "commit_info.project: 'local/mykernels' is not this history's repository 'myteam/mykernels' (ATTNWATCH_REPO); "
            "'local/mykernels' is how a checkout without an origin remote is named: add the remote, or set ATTNWATCH_REPO "
            "where it is measured, and measure again; nothing was written"
        )
    ), refused.stderr
    assert not (tmp_path / "history.duckdb").exists()
    run("pytest tests/bench --benchmark-json=bench.json")  # measured again with ATTNWATCH_REPO set
    run("attnwatch ingest bench.json")
    run('attnwatch sql "select variant, shape_id, dtype, median_us from results"')
    assert sql("select repo from runs") == [["myteam/mykernels"]]
    # One series per kernel: no test_ prefix, and the torch kernel once though it is also the Triton test's reference.
    assert sorted(
        row[0] for row in sql("select case_id from results where status = 'ok' and timing_mode = 'cpu_wall'")
    ) == ["softmax_torch/4x64/fp32", "softmax_triton/4x64/fp32"]

    main_torch_us = float(sql("select median_us from results where case_id = 'softmax_torch/4x64/fp32'")[0][0])

    # Edit the kernels in the working tree: compare refuses to judge uncommitted changes.
    _edit(repo / "mykernels" / "softmax_triton.py", *ONE_PERCENT)
    _edit(repo / "mykernels" / "softmax_torch.py", *SLOWER)
    compare = "attnwatch compare --pytest tests/bench --base main --fail-on regression"
    dirty = run(compare, rc=2)
    assert "the head is a checkout with uncommitted changes" in dirty.stderr, dirty.stderr
    assert not (repo / "compare-out").exists()

    # Committed on a branch: measured, both edits are what runs (the installed copy is main's), and stored.
    _git(repo, "switch", "-q", "-c", "slower-softmax")
    _git(repo, "commit", "-qam", "softmax: scale the output; take the exponential again")
    edited = run("pytest tests/bench --benchmark-json=bench.json", rc=1)
    assert (
        "softmax_triton/4x64/fp32: incorrect output: relative error ||out - expected|| / ||expected|| = 0.01 is "
        "over norm_rtol 0.002" in edited.stdout
    ), edited.stdout[-3000:]
    measured = {
        b["extra_info"]["attnwatch_measurement"]["timing"]["case_id"]: b["extra_info"]["attnwatch_measurement"]
        for b in json.loads((repo / "bench.json").read_text())["benchmarks"]
    }
    assert measured["softmax_torch/4x64/fp32"]["timing"]["median_us"] > 5 * main_torch_us
    run("attnwatch ingest bench.json")
    assert sorted(sql("select r.branch, c.case_id, c.passed from correctness c join runs r using (run_id)")) == [
        ["main", "softmax_torch/4x64/fp32", "True"],
        ["main", "softmax_triton/4x64/fp32", "True"],
        ["slower-softmax", "softmax_torch/4x64/fp32", "True"],
        ["slower-softmax", "softmax_triton/4x64/fp32", "False"],
    ]

    # The compare against main catches both: a regression and a correctness failure.
    judged = run(compare, rc=1)
    report = json.loads((repo / "compare-out" / "compare.json").read_text())
    cases = {c["case_id"]: c for c in report["cases"]}
    assert report["repo"] == "myteam/mykernels" and not report["head_dirty"] and not report["base_dirty"]
    assert cases["softmax_torch/4x64/fp32"]["verdict"] == "regression", judged.stdout
    assert cases["softmax_triton/4x64/fp32"]["correctness_failed"], judged.stdout
    assert not cases["softmax_torch/4x64/fp32"]["correctness_failed"]

    shown = json.loads(
        subprocess.run(
            [str(python), "-c", DASHBOARD], cwd=repo, env=env, capture_output=True, text=True, timeout=300, check=True
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert "site-packages/attnwatch/app" in shown["file"] and not shown["exceptions"]
    assert any(re.search(r"softmax_t(orch|riton)/4x64/fp32", text) for text in shown["shown"]), shown["shown"]
