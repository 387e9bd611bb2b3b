"""The pytest plugin (attnwatch.ci.pytest_plugin): a user's own pytest-benchmark suite, run for
real in a pytest subprocess on the CPU, records the engine's measurement in each entry, and
`attnwatch ingest` stores all of it (timing, samples, correctness, the reference's timing);
the record's one writer refuses what its reader refuses."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from attnwatch.ci.pytest_plugin import plugin_args
from attnwatch.history.contract.pytest_record import (
    ENVIRONMENT_KEY,
    MEASUREMENT_KEY,
    measurement_block,
    parse_measurement,
)
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths

REPO_ROOT = Path(__file__).resolve().parent.parent
# Kept under another name, so the project's own test run does not collect it; copied in as a test file.
SUITE_FILE = Path(__file__).parent / "data" / "plugin_suite" / "user_suite.py"


def _suite(folder: Path) -> Path:
    suite = folder / "suite"
    suite.mkdir()
    shutil.copy(SUITE_FILE, suite / "test_user_suite.py")
    return suite


@pytest.fixture(scope="module")
def suite_json(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("suite")
    _suite(work)
    out = work / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
         f"--benchmark-json={out}", "suite"], cwd=work, env=env, capture_output=True, text=True, timeout=300)
    return out, done


def _entries(path: Path) -> dict[str, dict]:
    return {b["name"]: b for b in json.loads(path.read_text())["benchmarks"]}


def test_the_suite_records_the_engine_measurement_on_the_cpu_and_says_so(suite_json):
    out, done = suite_json
    assert done.returncode == 1, done.stdout + done.stderr  # test_wrong_output fails, after it is recorded
    assert "test_wrong_output/default/fp32: incorrect output: 64 element(s) outside" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["machine_info"][ENVIRONMENT_KEY]["device_kind"] == "cpu"
    entries = _entries(out)
    record = entries["test_softmax[256]"]["extra_info"][MEASUREMENT_KEY]
    assert record["timing"]["timing_mode"] == "cpu_wall" and "not a GPU measurement" in record["timing_note"]
    assert record["timing"]["case_id"] == "test_softmax/256/fp32"
    assert record["reference"]["case_id"] == "test_softmax.reference/256/fp32"
    assert record["timing"]["interleave_group"] == record["reference"]["interleave_group"]
    gap = record["timing"]["median_us"] / record["reference"]["median_us"]
    assert record["timing"]["gap_to_baseline"] == pytest.approx(gap)
    assert record["correctness"]["passed"] is True and record["correctness"]["max_abs_err"] < 1e-5
    assert record["bandwidth_gbps"] == pytest.approx(2 * 4 * 32 * 256 / (record["timing"]["median_us"] * 1e-6) / 1e9)
    assert len(record["samples_us"]) == record["timing"]["n"]
    # the user's callable, not an attention case: its own operator, and the byte count the test gave
    assert record["timing"]["operator"] == record["reference"]["operator"] == "callable"
    assert record["timing"]["bytes"] == record["bytes_per_call"] == 2 * 4 * 32 * 256
    assert entries["test_add_checked"]["extra_info"][MEASUREMENT_KEY]["correctness"]["passed"] is True
    wrong = entries["test_wrong_output"]["extra_info"][MEASUREMENT_KEY]["correctness"]
    assert wrong["passed"] is False and wrong["violations"] == 64


def test_ingest_stores_the_whole_record(suite_json, tmp_path):
    out, _ = suite_json
    db = tmp_path / "history.duckdb"
    ingest_paths(db, [out])
    with duckdb.connect(str(db), read_only=True) as con:
        rows = dict(con.execute("SELECT case_id, timing_mode FROM results").fetchall())
        assert rows == {"test_softmax/256/fp32": "cpu_wall", "test_softmax.reference/256/fp32": "cpu_wall",
                        "test_add_checked/default/fp32": "cpu_wall", "test_wrong_output/default/fp32": "cpu_wall"}
        gap, host, operator, nbytes = con.execute(
            "SELECT gap_to_baseline, host_median_us, operator, bytes FROM results WHERE case_id = 'test_softmax/256/fp32'").fetchone()
        assert gap is not None and host is not None
        assert (operator, nbytes) == ("callable", 2 * 4 * 32 * 256)
        samples = con.execute("SELECT count(*) FROM samples WHERE case_id = 'test_softmax/256/fp32'").fetchone()[0]
        assert samples == _entries(out)["test_softmax[256]"]["extra_info"][MEASUREMENT_KEY]["timing"]["n"]
        checks = dict(con.execute("SELECT case_id, passed FROM correctness").fetchall())
        assert checks == {"test_softmax/256/fp32": True, "test_add_checked/default/fp32": True,
                          "test_wrong_output/default/fp32": False}
        assert con.execute("SELECT device_kind FROM runs").fetchone()[0] == "cpu"


def test_with_benchmarks_disabled_the_outputs_are_still_checked(tmp_path):
    _suite(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q",
         "--benchmark-disable", "suite"], cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "test_wrong_output/default/fp32: incorrect output" in done.stdout


def test_the_writer_refuses_what_the_reader_refuses(suite_json, tmp_path):
    out, _ = suite_json
    block = _entries(out)["test_softmax[256]"]["extra_info"][MEASUREMENT_KEY]
    measurement = parse_measurement(block, out, "block")
    measurement.samples_us = measurement.samples_us[1:]
    with pytest.raises(BundleError, match=r"<gpu_benchmark>: extra_info.attnwatch_measurement.samples_us"):
        measurement_block(measurement)
    bad = copy.deepcopy(json.loads(out.read_text()))
    bad["benchmarks"][0]["extra_info"][MEASUREMENT_KEY]["timing"]["timing_mode"] = "guessed"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(BundleError, match=r"bad.json: benchmarks\[0\].extra_info.attnwatch_measurement.timing.timing_mode"):
        ingest_paths(tmp_path / "h.duckdb", [path])
    assert not (tmp_path / "h.duckdb").exists() or not duckdb.connect(str(tmp_path / "h.duckdb")).execute(
        "SELECT count(*) FROM runs").fetchone()[0]


SLOW_SUITE = '''
import time
import torch
from mykernel import scale


def test_scale(gpu_benchmark):
    x = torch.ones(256)
    gpu_benchmark(scale, x, expected=x * 2)
'''


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
                   check=True, capture_output=True, timeout=60)


@pytest.mark.slow
def test_compare_pytest_judges_a_suite_between_two_revisions(tmp_path):
    """`attnwatch compare --pytest`: the suite in each revision's checkout, alternately; a
    kernel made 2 ms slower in the head is a regression by the variant compare's verdict code."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "test_scale.py").write_text(SLOW_SUITE)
    (repo / "mykernel.py").write_text("def scale(x):\n    return x * 2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    (repo / "mykernel.py").write_text("import time\n\ndef scale(x):\n    time.sleep(0.002)\n    return x * 2\n")
    _git(repo, "commit", "-qam", "head: slower")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch.ci.cli", "compare", "--pytest", "bench", "--pytest-args",
         " ".join(plugin_args()), "--base", "HEAD~1", "--rounds", "2", "--ncu", "off",
         "--out", str(tmp_path / "out")], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    verdicts = {c["case_id"]: c["verdict"] for c in report["cases"]}
    assert verdicts == {"test_scale/default/fp32": "regression"}, done.stdout
    assert report["rounds"] == 2 and report["shape_set"] == "pytest"
