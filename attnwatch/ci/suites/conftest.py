"""pytest wiring of the measuring child: options, one test per planned case, machine info.

* `--attnwatch-plan` / `--attnwatch-journal`: the plan to run and the journal to append to;
* `pytest_generate_tests` makes `test_bench[<case id>]` for every case of the plan, in plan
  order (grouped, so a group's tests run back to back); the parameter is the case id text,
  so pytest-benchmark's `params` read `{"case_id": ...}`;
* `pytest_benchmark_update_machine_info` adds the GPU, driver, CUDA and package versions
  (ci.environment, with device properties) under `machine_info["attnwatch"]`.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest

from attnwatch.ci.environment import capture_environment
from attnwatch.ci.journal import JournalWriter
from attnwatch.ci.plan import RunPlan


def pytest_addoption(parser):
    group = parser.getgroup("attnwatch")
    group.addoption("--attnwatch-plan", default=None, help="run plan JSON written by attnwatch run")
    group.addoption("--attnwatch-journal", default=None, help="JSON-lines journal the parent reads")


def _plan(config) -> RunPlan:
    cached = getattr(config, "_attnwatch_plan", None)
    if cached is None:
        path = config.getoption("--attnwatch-plan")
        if not path:
            raise pytest.UsageError("ci/suites runs under attnwatch run: --attnwatch-plan is required")
        cached = config._attnwatch_plan = RunPlan.load(Path(path))
    return cached


def _environment(config) -> dict:
    cached = getattr(config, "_attnwatch_env", None)
    if cached is None:
        cached = config._attnwatch_env = asdict(capture_environment(probe_device=_plan(config).device_kind == "cuda"))
    return cached


def pytest_generate_tests(metafunc):
    if "case_id" in metafunc.fixturenames:
        ids = [c.case_id for c in _plan(metafunc.config).cases]
        metafunc.parametrize("case_id", ids, ids=ids)


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["attnwatch"] = _environment(config)


@pytest.fixture(scope="session")
def journal(pytestconfig):
    path = pytestconfig.getoption("--attnwatch-journal")
    if not path:
        raise pytest.UsageError("--attnwatch-journal is required")
    writer = JournalWriter(path)
    yield writer
    writer.close()


@pytest.fixture(scope="session")
def measurer(pytestconfig, journal):
    """Builds first, then measures groups on demand; journals the session's environment."""
    from attnwatch.ci.kernels_api import kernels_dir
    from attnwatch.ci.suites.worker import GroupMeasurer

    plan = _plan(pytestconfig)
    env = _environment(pytestconfig)
    m = GroupMeasurer(plan, journal)
    journal.write("session", pid=os.getpid(), environment=env, kernels_path=str(kernels_dir()))
    builds = m.build_all()
    journal.write("fingerprints", fingerprints=_fingerprints(plan, builds, env))
    return m


def _fingerprints(plan, builds: list[dict], env: dict) -> dict:
    """Each planned variant's fingerprint, as a compare's worker takes it (ci/fingerprint/variant.py),
    for the run's manifest; a fault here costs the fingerprints (recorded unknown), never the run."""
    try:
        from attnwatch.ci.fingerprint.variant import plan_fingerprints

        found = plan_fingerprints(plan, builds, env)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        found = {
            name: {"digest": None, "unknown": f"fingerprinting failed: {type(exc).__name__}"}
            for name in dict.fromkeys(c.variant for c in plan.cases)
        }
    return {
        name: {"digest": fp.get("digest"), "code": fp.get("code"), "unknown": fp.get("unknown")}
        for name, fp in found.items()
    }
