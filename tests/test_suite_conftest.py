"""This suite's own conftest, run on scratch test files: `make test`'s split over pytest-xdist
workers (tests/worker_groups.py) keeps each test file on one worker and builds a module fixture
once; a failed session keeps only its failed tests' temporary folders."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from collections import defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
from worker_groups import order_and_group

TESTS = Path(__file__).resolve().parent
REPO_ROOT = TESTS.parent

A_FILE = """
import os
import pytest


@pytest.fixture(scope="module")
def built():
    with open(os.environ["GROUP_LOG"], "a") as log:
        log.write(f"setup {__name__} {os.getpid()}\\n")


@pytest.mark.parametrize("i", range(6))
def test_one(built, i):
    with open(os.environ["GROUP_LOG"], "a") as log:
        log.write(f"test {__name__} {os.getpid()}\\n")
"""


def _scratch_suite(tmp_path: Path, files: dict[str, str]) -> Path:
    """A checkout-like folder: this suite's conftest and the modules it imports, pyproject's
    temporary-folder retention, and `files`."""
    suite = tmp_path / "tests"
    suite.mkdir()
    for helper in TESTS.glob("*.py"):
        if not helper.name.startswith("test_"):
            shutil.copy(helper, suite / helper.name)
    for name, text in files.items():
        (suite / name).write_text(text)
    ini = {
        k: v
        for k, v in tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"].items()
        if k.startswith("tmp_path_retention")
    }
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nmarkers =\n    gpu: g\n    slow: s\n    browser: b\n"
        + "".join(f"{k} = {v}\n" for k, v in ini.items())
    )
    return suite


def _pytest(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


@pytest.mark.slow
def test_each_file_runs_whole_on_one_worker_with_its_module_fixture_built_once(tmp_path):
    _scratch_suite(tmp_path, {name: A_FILE for name in ("test_first.py", "test_second.py", "test_third.py")})
    log = tmp_path / "log"
    done = _pytest(
        tmp_path, "-n", "2", "--dist", "loadgroup", "--no-loadscope-reorder", "tests", env={"GROUP_LOG": str(log)}
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    setups: dict[str, list[str]] = defaultdict(list)
    workers: dict[str, set[str]] = defaultdict(set)
    for line in log.read_text().splitlines():
        kind, module, pid = line.split()
        if kind == "setup":
            setups[module].append(pid)
        else:
            workers[module].add(pid)
    assert sorted(workers) == ["test_first", "test_second", "test_third"]
    assert all(len(pids) == 1 for pids in workers.values()), dict(workers)
    assert all(len(pids) == 1 for pids in setups.values()), dict(setups)
    assert len(set().union(*workers.values())) == 2  # both workers took files


KEPT_FILE = """
import pytest


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    folder = tmp_path_factory.mktemp("module_history")
    (folder / "history.duckdb").write_text("x")
    return folder


def test_passes(history, tmp_path):
    (tmp_path / "out").write_text("x")


def test_fails(history, tmp_path):
    (tmp_path / "out").write_text("x")
    assert False, "planted"
"""


@pytest.mark.slow
def test_a_failed_session_keeps_only_its_failed_tests_folders(tmp_path):
    _scratch_suite(tmp_path, {"test_kept.py": KEPT_FILE})
    base = tmp_path / "base"
    done = _pytest(tmp_path, "--basetemp", str(base), "tests")
    assert done.returncode == 1 and "planted" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    kept = sorted(p.name for p in base.iterdir() if not p.is_symlink())
    assert kept == ["test_fails0"]
    assert (base / "test_fails0" / "out").is_file()


def _item(nodeid: str, *marks: str) -> SimpleNamespace:
    return SimpleNamespace(nodeid=nodeid, keywords=set(marks))


def test_slow_files_go_first_and_gpu_tests_share_one_group_only_on_a_gpu_machine():
    items = [
        _item("tests/test_a.py::test_x"),
        _item("tests/test_b.py::test_gpu", "gpu"),
        _item("tests/test_b.py::test_cpu"),
        _item("tests/test_c.py::test_fast"),
        _item("tests/test_c.py::test_long", "slow"),
        _item("tests/test_d.py::test_gpu", "gpu"),
    ]
    on_cpu = order_and_group(items, has_cuda=False)
    assert [i.nodeid for i in items][:2] == ["tests/test_c.py::test_fast", "tests/test_c.py::test_long"]
    assert on_cpu == {i.nodeid: i.nodeid.split("::")[0] for i in items}
    on_gpu = order_and_group(items, has_cuda=True)
    assert on_gpu["tests/test_b.py::test_gpu"] == on_gpu["tests/test_d.py::test_gpu"] == "gpu"
    assert on_gpu["tests/test_b.py::test_cpu"] == "tests/test_b.py"
