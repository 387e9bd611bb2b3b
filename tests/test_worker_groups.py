"""`make test`'s split over pytest-xdist workers (tests/worker_groups.py): a real two-worker run
of this suite's conftest keeps each test file on one worker and builds a module fixture once."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


@pytest.mark.slow
def test_each_file_runs_whole_on_one_worker_with_its_module_fixture_built_once(tmp_path):
    suite = tmp_path / "tests"
    suite.mkdir()
    for helper in TESTS.glob("*.py"):  # the conftest and the modules it imports
        if not helper.name.startswith("test_"):
            shutil.copy(helper, suite / helper.name)
    for name in ("test_first.py", "test_second.py", "test_third.py"):
        (suite / name).write_text(A_FILE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: g\n    slow: s\n    browser: b\n")
    log = tmp_path / "log"
    env = {**os.environ, "GROUP_LOG": str(log), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2"]
        + ["--dist", "loadgroup", "--no-loadscope-reorder", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
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
