"""The installed wheel: every module under `attnwatch.`, its data files shipped, beside a user's
own `kernels` package (docs/design.md, "Layers and the direction of imports").

The wheel is built from this checkout and installed without dependencies into a fresh virtual
environment (tests/wheel_env.py). Everything then runs from a directory outside the
checkout with no PYTHONPATH, so only the installed files can answer an `attnwatch.` import.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from wheel_env import fresh_venv, pip, venv_with_wheel

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
    (user / "pyproject.toml").write_text(
        textwrap.dedent("""\
        [build-system]
        requires = ["setuptools"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "user-kernels"
        version = "1.0"
        [tool.setuptools]
        packages = ["kernels"]
        """),
        encoding="utf-8",
    )
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
    done = subprocess.run(
        [str(python), "-c", probe], cwd=outside, env=_env(tmp_path), capture_output=True, text=True, timeout=300
    )
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
    run = subprocess.run(
        [
            str(command),
            "run",
            "--device",
            "cpu",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,torch_3op",
            "--no-progress",
            "--commit",
            "ab" * 20,
            "--out",
            str(tmp_path / "run"),
            "--ingest",
        ],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    counted = subprocess.run(
        [str(command), "sql", "--format", "csv", "select count(*) as n from results where status = 'ok'"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert counted.returncode == 0, counted.stderr
    assert counted.stdout.split() == ["n", "4"], counted.stdout


# ---------------------------------------------------------------- how a kernel repository installs attnwatch

README = ROOT / "README.md"
ACTION = ROOT / ".github" / "actions" / "attnwatch-bench"
GIT_URL = re.compile(r'pip install "attnwatch @ git\+https://github\.com/OWNER/attnwatch@<commit>"')


def _installed(python: Path, cwd: Path) -> dict:
    """Where the fresh environment's attnwatch comes from, and whether pytest finds its plugin."""
    probe = (
        "import json, attnwatch.cli.main as cli; from importlib.metadata import entry_points, version; "
        "print(json.dumps({'file': cli.__file__, 'version': version('attnwatch'), "
        "'plugin': [e.value for e in entry_points(group='pytest11') if e.name == 'attnwatch']}))"
    )
    done = subprocess.run(
        [str(python), "-c", probe], cwd=cwd, env=_env(cwd), capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_attnwatch_installs_from_a_git_url_as_the_readmes_say(tmp_path):
    """No package index has attnwatch: README and examples/adopt/README.md install it from its git
    repository at a commit; the same requirement, with this checkout's own repository as the URL,
    installs into a fresh environment (offline: the dependencies come from the test's own)."""
    for readme in (README, ROOT / "examples" / "adopt" / "README.md"):
        assert GIT_URL.search(readme.read_text()), readme
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    python = fresh_venv(tmp_path)
    # file://localhost/...: pip before 23.3 refuses `git+file:///...@rev` as "a path"
    pip(
        python,
        "install",
        "--no-deps",
        "--no-index",
        "--no-build-isolation",
        f"attnwatch @ git+file://localhost{ROOT}@{sha}",
    )
    found = _installed(python, tmp_path)
    assert f"{tmp_path}/venv/" in found["file"] and found["plugin"] == ["attnwatch.ci.pytest_plugin"]


PIP_OFFLINE = """#!/bin/sh
# The fresh environment's python; its `pip install` without an index or dependencies.
if [ "$1" = "-m" ] && [ "$2" = "pip" ] && [ "$3" = "install" ]; then
  shift 3
  exec "{python}" -m pip install --no-deps --no-index --no-build-isolation "$@"
fi
exec "{python}" "$@"
"""


def test_the_adoption_action_installs_the_attnwatch_of_its_own_commit(tmp_path):
    """The composite action's install step with its default `attnwatch:` input (empty): attnwatch
    from the action's own checkout (here this one) and the kernel repository, into the job's python."""
    action = YAML(typ="safe").load((ACTION / "action.yml").read_text())
    assert action["inputs"]["attnwatch"]["default"] == ""
    step = action["runs"]["steps"][0]
    python = fresh_venv(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").write_text(PIP_OFFLINE.format(python=python))
    (bin_dir / "python").chmod(0o755)
    user = tmp_path / "user-kernels"
    (user / "userkernels").mkdir(parents=True)
    (user / "userkernels" / "__init__.py").write_text("")
    (user / "pyproject.toml").write_text(
        '[project]\nname = "userkernels"\nversion = "1.0"\n[tool.setuptools]\npackages = ["userkernels"]\n'
    )
    env = {
        **_env(tmp_path),
        "ATTNWATCH_REQUIREMENT": "",
        "ACTION_PATH": str(ACTION),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", step["run"]], cwd=user, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = _installed(python, tmp_path)
    assert f"{tmp_path}/venv/" in found["file"] and found["plugin"] == ["attnwatch.ci.pytest_plugin"]
    assert subprocess.run([str(python), "-c", "import userkernels"], cwd=tmp_path, timeout=120).returncode == 0


def test_ci_keeps_each_pushs_wheel_as_an_artifact():
    """The other install path: the wheel the ci workflow builds and uploads (attnwatch-wheel)."""
    steps = YAML(typ="safe").load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["test"]["steps"]
    built = next(i for i, s in enumerate(steps) if "pip wheel --no-deps --wheel-dir dist ." in s.get("run", ""))
    upload = steps[built + 1]
    assert upload["uses"].startswith("actions/upload-artifact@") and upload["with"]["name"] == "attnwatch-wheel"
    assert upload["with"]["path"] == "dist/attnwatch-*.whl" and upload["with"]["if-no-files-found"] == "error"
    assert (
        "attnwatch-wheel" in README.read_text()
        and "attnwatch-wheel" in (ROOT / "examples" / "adopt" / "README.md").read_text()
    )
