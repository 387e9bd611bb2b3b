"""examples/adopt, end to end on the CPU as a new user would run it: a separate git repository
(a Triton kernel under Triton's interpreter, a torch one, a pytest-benchmark suite on the
gpu_benchmark fixture) with attnwatch installed from the built wheel into a fresh environment
(tests/wheel_env.py), no PYTHONPATH: the suite finds the fixture through the installed
`pytest11` entry point; `attnwatch ingest` stores the file; `attnwatch compare --pytest` A/B's
the suite between two commits; the dashboard (Streamlit's AppTest, the installed app) shows
the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from wheel_env import pip, venv_with_wheel

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "adopt"
pytestmark = pytest.mark.slow

DASHBOARD = textwrap.dedent("""\
    import json, sys
    from streamlit.testing.v1 import AppTest
    from attnwatch.ci.commands.dashboard import entrypoint
    at = AppTest.from_file(str(entrypoint()), default_timeout=120)
    at.run()
    at.switch_page("views/run.py").run()
    shown = [str(getattr(e, "value", "")) for kind in ("markdown", "dataframe", "caption") for e in getattr(at, kind)]
    print(json.dumps({"file": str(entrypoint()), "exceptions": [str(e.value) for e in at.exception], "shown": shown}))
    """)


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=adopter", "-c", "user.email=adopter@example.com", *args],
                   check=True, capture_output=True, timeout=60)


def test_the_example_repository_runs_end_to_end_on_the_cpu(tmp_path, attnwatch_wheel):
    python = venv_with_wheel(tmp_path, attnwatch_wheel)
    bin_dir = python.parent
    repo = tmp_path / "mykernels-repo"
    shutil.copytree(EXAMPLE, repo)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "row softmax in Triton and torch")
    pip(python, "install", "--no-deps", "--no-build-isolation", "--no-index", str(repo))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNWATCH_DB", "ATTNWATCH_REPO")}
    env.update(TRITON_INTERPRET="1", ATTNWATCH_DB=str(tmp_path / "history.duckdb"), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")

    def run(*command: str) -> subprocess.CompletedProcess:
        done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    run(str(python), "-m", "pytest", "tests/bench", "-q", "-p", "no:cacheprovider", "--benchmark-json=bench.json")
    entries = {b["name"]: b["extra_info"]["attnwatch_measurement"] for b in json.loads((repo / "bench.json").read_text())["benchmarks"]}
    triton = entries["test_softmax_triton[4x64]"]
    assert triton["timing"]["timing_mode"] == "cpu_wall" and triton["correctness"]["passed"]
    assert triton["reference"]["variant"] == "test_softmax_triton.reference"
    assert entries["test_softmax_torch[4x64]"]["correctness"]["passed"]

    run(str(bin_dir / "attnwatch"), "ingest", "--default-branch", "main", "bench.json")
    counted = run(str(bin_dir / "attnwatch"), "sql", "--format", "csv",
                  "select count(*) as n from results where status = 'ok' and timing_mode = 'cpu_wall'")
    assert counted.stdout.split() == ["n", "3"], counted.stdout

    kernel = repo / "mykernels" / "softmax_triton.py"
    kernel.write_text(kernel.read_text().replace("    y = e / tl.sum(e, axis=0)\n",
                                                 "    y = e / tl.sum(e, axis=0)\n    y = y + 0.0 * tl.exp(x)\n"))
    _git(repo, "commit", "-qam", "softmax: one more exp")
    run(str(bin_dir / "attnwatch"), "compare", "--pytest", "tests/bench", "--base", "HEAD~1", "--rounds", "2",
        "--ncu", "off", "--out", str(tmp_path / "compare"))
    report = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert {c["case_id"] for c in report["cases"]} == {
        "test_softmax_triton/4x64/fp32", "test_softmax_triton.reference/4x64/fp32", "test_softmax_torch/4x64/fp32"}
    assert all(c["verdict"] not in ("failed", "new", "removed") for c in report["cases"]), report["cases"]

    shown = json.loads(run(str(python), "-c", DASHBOARD).stdout.strip().splitlines()[-1])
    assert "site-packages/attnwatch/app" in shown["file"] and not shown["exceptions"]
    assert any("test_softmax_triton/4x64/fp32" in text for text in shown["shown"]), shown["shown"]
