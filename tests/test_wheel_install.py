"""The installed wheel: every module under `attnwatch.`, its data files shipped, beside a user's
own `kernels` package (docs/design.md, "Layers and the direction of imports").

The wheel is built from this checkout and installed without dependencies into a fresh virtual
environment (tests/wheel_env.py). Everything then runs from a directory outside the
checkout with no PYTHONPATH, so only the installed files can answer an `attnwatch.` import.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from wheel_env import pip, venv_with_wheel

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory, attnwatch_wheel) -> tuple[Path, Path]:
    """(the fresh environment's python, a working directory outside the checkout)."""
    work = tmp_path_factory.mktemp("wheel")
    python = venv_with_wheel(work, attnwatch_wheel)
    user = work / "user-kernels"
    (user / "kernels").mkdir(parents=True)
    (user / "kernels" / "__init__.py").write_text('WHOSE = "the user\'s own kernels"\n', encoding="utf-8")
    (user / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "user-kernels"
        version = "1.0"
        [tool.setuptools]
        packages = ["kernels"]
        """), encoding="utf-8")
    pip(python, "install", "--no-deps", "--no-build-isolation", "--no-index", str(user))
    outside = work / "elsewhere"
    outside.mkdir()
    return python, outside


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ATTNWATCH_DB", "ATTNWATCH_REPO")}
    env["ATTNWATCH_DB"] = str(tmp / "history.duckdb")
    return env


def test_the_wheel_installs_one_name_beside_a_user_kernels_package(installed, tmp_path):
    python, outside = installed
    probe = textwrap.dedent("""\
        import json, importlib.resources, kernels, attnwatch.kernels.registry, attnwatch.history.store.db
        from attnwatch.history.analysis.thresholds import REPO_THRESHOLDS
        from attnwatch.history.store.migrations import MIGRATIONS_DIR
        print(json.dumps({"user": kernels.WHOSE, "user_file": kernels.__file__,
                          "ours": attnwatch.kernels.registry.__file__,
                          "thresholds": REPO_THRESHOLDS.is_file(),
                          "migrations": len(list(MIGRATIONS_DIR.glob("*.sql")))}))
        """)
    done = subprocess.run([str(python), "-c", probe], cwd=outside, env=_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["user"] == "the user's own kernels" and "site-packages" in seen["user_file"]
    assert "site-packages/attnwatch/kernels/registry.py" in seen["ours"] and str(ROOT) not in seen["ours"]
    assert seen["thresholds"] and seen["migrations"] >= 8
    tops = {p.name for p in Path(seen["ours"]).parents[2].iterdir()}
    assert not {"app", "ci", "history", "scripts"} & tops  # nothing of ours at the top of site-packages


def test_the_installed_command_runs_a_cpu_run_and_ingests_it(installed, tmp_path):
    python, outside = installed
    command = python.parent / "attnwatch"
    env = _env(tmp_path)
    helped = subprocess.run([str(command), "--help"], cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "usage: attnwatch" in helped.stdout, helped.stderr
    run = subprocess.run([str(command), "run", "--device", "cpu", "--shapes", "cpu",
                          "--variants", "sdpa,torch_3op", "--no-progress", "--commit", "ab" * 20,
                          "--out", str(tmp_path / "run"), "--ingest"],
                         cwd=outside, env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    counted = subprocess.run([str(command), "sql", "--format", "csv", "select count(*) as n from results where status = 'ok'"],
                             cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.split() == ["n", "4"], counted.stdout
