"""The pytest plugin (attnwatch.ci.pytest_plugin): a user's own pytest-benchmark suite, run for
real in a pytest subprocess on the CPU, records the engine's measurement in each entry and the
repository as OWNER/NAME, names each series after its kernel (no `test_` prefix, a reference after
its function, once), leaves the session's threads as it found them, fails a misused fixture in
one line, and holds outputs to a per-element and a norm-relative bound that catch a 1% error at
any scale; `attnwatch ingest` stores all of it (timing, samples, correctness, the reference's
timing); the record's one writer refuses what its reader refuses."""

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
from attnwatch.history.store.location import parse_location

REPO_ROOT = Path(__file__).resolve().parent.parent
# Kept under another name, so the project's own test run does not collect it; copied in as a test file.
SUITE_FILE = Path(__file__).parent / "data" / "plugin_suite" / "user_suite.py"
CORRECTNESS_FILE = Path(__file__).parent / "data" / "plugin_suite" / "correctness_suite.py"


def _suite(folder: Path, source: Path = SUITE_FILE) -> Path:
    suite = folder / "suite"
    suite.mkdir()
    shutil.copy(source, suite / f"test_{source.name}")
    return suite


def _env() -> dict[str, str]:
    """The test process's environment without a repository named by the job running it."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNWATCH_REPO", "GITHUB_REPOSITORY")}
    return {**env, "PYTHONPATH": str(REPO_ROOT)}


def _pytest(work: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", "-q", "-rA", *args, "suite"],
        cwd=work,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def suite_json(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    work = tmp_path_factory.mktemp("suite")
    _suite(work)
    out = work / "out.json"
    return out, _pytest(work, f"--benchmark-json={out}")


def _entries(path: Path) -> dict[str, dict]:
    return {b["name"]: b for b in json.loads(path.read_text())["benchmarks"]}


def _outcomes(done: subprocess.CompletedProcess) -> dict[str, str]:
    """test name -> PASSED / FAILED, from pytest's -rA summary."""
    found = {}
    for line in done.stdout.splitlines():
        word, _, rest = line.partition(" ")
        if word in ("PASSED", "FAILED") and "::" in rest:
            found[rest.split("::", 1)[1].split(" ", 1)[0]] = word
    return found


def test_the_suite_records_the_engine_measurement_on_the_cpu_and_says_so(suite_json):
    out, done = suite_json
    assert done.returncode == 1, done.stdout + done.stderr  # test_wrong_output fails, after it is recorded
    assert "wrong_output/default/fp32: incorrect output: 64 element(s) outside" in done.stdout
    doc = json.loads(out.read_text())
    assert doc["machine_info"][ENVIRONMENT_KEY]["device_kind"] == "cpu"
    entries = _entries(out)
    record = entries["test_softmax[256]"]["extra_info"][MEASUREMENT_KEY]
    assert record["timing"]["timing_mode"] == "cpu_wall" and "not a GPU measurement" in record["timing_note"]
    assert "one intra-op thread" in record["timing_note"]  # the setting it measures under, said
    assert record["timing"]["case_id"] == "softmax/256/fp32"
    assert record["reference"]["case_id"] == "softmax.reference/256/fp32"  # a lambda has no name of its own
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


def test_the_repository_is_recorded_as_owner_and_name(suite_json):
    """Not pytest-benchmark's bare basename: the rule of `attnwatch run` and `env`; here, a
    directory outside any repository (pytest's rootdir): local/<its name>."""
    out, _ = suite_json
    assert json.loads(out.read_text())["commit_info"]["project"] == f"local/{out.parent.name}"


def test_one_function_is_one_series_named_after_it(suite_json):
    """test_fast_softmax's reference is the function test_reference_softmax measures: stored once,
    as that test's own case; the gap to it stays with test_fast_softmax's timing."""
    out, _ = suite_json
    entries = _entries(out)
    fast = entries["test_fast_softmax[64]"]["extra_info"][MEASUREMENT_KEY]
    own = entries["test_reference_softmax[64]"]["extra_info"][MEASUREMENT_KEY]
    assert (
        fast["timing"]["case_id"] == "fast_softmax/64/fp32" and own["timing"]["case_id"] == "reference_softmax/64/fp32"
    )
    assert fast["reference"] is None and fast["reference_samples_us"] == []
    assert fast["timing"]["baseline_variant"] == "reference_softmax" and fast["timing"]["gap_to_baseline"] > 0
    variants = {e["extra_info"][MEASUREMENT_KEY]["timing"]["variant"] for e in entries.values()}
    assert not any(v.startswith("test_") for v in variants), variants


def test_a_misused_fixture_fails_its_test_in_one_line(suite_json):
    out, done = suite_json
    outcomes = _outcomes(done)
    assert outcomes["test_a_tensor_where_the_function_belongs"] == "FAILED"
    assert (
        "gpu_benchmark: the first argument, the function to measure, must be a function; got Tensor "
        "(gpu_benchmark(my_kernel, x), not gpu_benchmark(my_kernel(x)))"
    ) in done.stdout
    assert outcomes["test_same_case_twice[256]"] == "FAILED"
    assert (
        "gpu_benchmark: softmax/256/fp32 is already measured by suite/test_user_suite.py::test_softmax[256]"
        in done.stdout
    )
    assert "TypeError" not in done.stdout and "not used at all" not in done.stdout + done.stderr, done.stdout
    assert "test_a_tensor_where_the_function_belongs" not in _entries(out)


def test_the_session_keeps_its_threads_after_a_measurement(suite_json):
    _, done = suite_json
    assert _outcomes(done)["test_the_session_keeps_its_threads"] == "PASSED", done.stdout


def test_ingest_stores_the_whole_record(suite_json, tmp_path):
    out, _ = suite_json
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [out])
    with duckdb.connect(str(db), read_only=True) as con:
        rows = dict(con.execute("SELECT case_id, timing_mode FROM results").fetchall())
        assert rows == {
            c: "cpu_wall"
            for c in (
                "softmax/256/fp32",
                "softmax.reference/256/fp32",
                "add_checked/default/fp32",
                "wrong_output/default/fp32",
                "fast_softmax/64/fp32",
                "reference_softmax/64/fp32",
            )
        }
        gap, host, operator, nbytes = con.execute(
            "SELECT gap_to_baseline, host_median_us, operator, bytes FROM results WHERE case_id = 'softmax/256/fp32'"
        ).fetchone()
        assert gap is not None and host is not None
        assert (operator, nbytes) == ("callable", 2 * 4 * 32 * 256)
        samples = con.execute("SELECT count(*) FROM samples WHERE case_id = 'softmax/256/fp32'").fetchone()[0]
        assert samples == _entries(out)["test_softmax[256]"]["extra_info"][MEASUREMENT_KEY]["timing"]["n"]
        checks = dict(con.execute("SELECT case_id, passed FROM correctness").fetchall())
        assert checks == {
            "softmax/256/fp32": True,
            "add_checked/default/fp32": True,
            "wrong_output/default/fp32": False,
            "fast_softmax/64/fp32": True,
            "reference_softmax/64/fp32": True,
        }
        assert con.execute("SELECT device_kind, repo FROM runs").fetchone() == ("cpu", f"local/{out.parent.name}")


def test_with_benchmarks_disabled_the_outputs_are_still_checked(tmp_path):
    _suite(tmp_path)
    done = _pytest(tmp_path, "--benchmark-disable")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "wrong_output/default/fp32: incorrect output" in done.stdout
    failed = sorted(name for name, outcome in _outcomes(done).items() if outcome == "FAILED")
    assert failed == ["test_a_tensor_where_the_function_belongs", "test_same_case_twice[256]", "test_wrong_output"]
    assert "not used at all" not in done.stdout + done.stderr, done.stdout


def test_the_default_bounds_catch_a_1pct_error_at_any_scale_and_pass_rounding(tmp_path):
    """A 1% error everywhere fails in fp32, fp16 and bf16 on a softmax (values ~1e-3, under atol)
    and on values ~1e3; rounding every step of a softmax to the dtype passes."""
    _suite(tmp_path, CORRECTNESS_FILE)
    done = _pytest(tmp_path, "--benchmark-disable")
    outcomes = _outcomes(done)
    expected = {
        f"test_off_by_1pct_{scale}_values[torch.{dtype}]": "FAILED"
        for scale in ("small", "large")
        for dtype in ("float32", "float16", "bfloat16")
    }
    expected |= {f"test_genuine_rounding[torch.{dtype}]": "PASSED" for dtype in ("float32", "float16", "bfloat16")}
    expected |= {
        "test_a_test_may_loosen_the_norm_bound": "PASSED",
        "test_a_reference_that_is_not_a_function": "FAILED",
        "test_an_integer_output_needs_its_bounds": "FAILED",
    }
    assert outcomes == expected, done.stdout
    assert (
        "off_by_1pct_small_values/torch.float32/fp32: incorrect output: relative error ||out - expected|| / "
        "||expected|| = 0.01 is over norm_rtol 0.002" in done.stdout
    ), done.stdout
    assert "gpu_benchmark: reference= must be a function; got Tensor" in done.stdout
    assert "gpu_benchmark: no default tolerance for dtype 'int64'" in done.stdout
    assert "Traceback" not in done.stdout and "TypeError" not in done.stdout


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
    with pytest.raises(
        BundleError, match=r"bad.json: benchmarks\[0\].extra_info.attnwatch_measurement.timing.timing_mode"
    ):
        ingest_paths(parse_location(tmp_path / "h.duckdb"), [path])
    assert (
        not (tmp_path / "h.duckdb").exists()
        or not duckdb.connect(str(tmp_path / "h.duckdb")).execute("SELECT count(*) FROM runs").fetchone()[0]
    )


SLOW_SUITE = """
import time
import torch
from mykernel import scale


def test_scale(gpu_benchmark):
    x = torch.ones(256)
    gpu_benchmark(scale, x, expected=x * 2)
"""


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _scale_repository(tmp_path: Path) -> Path:
    """A repository without a remote: a `scale` kernel and its gpu_benchmark suite, one commit."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    (repo / "bench" / "test_scale.py").write_text(SLOW_SUITE)
    (repo / "mykernel.py").write_text("def scale(x):\n    return x * 2\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    return repo


@pytest.mark.slow
def test_compare_pytest_judges_a_suite_between_two_revisions(tmp_path):
    """`attnwatch compare --pytest`: the suite in each revision's checkout, alternately; a
    kernel made 2 ms slower in the head is a regression by the variant compare's verdict code."""
    repo = _scale_repository(tmp_path)
    (repo / "mykernel.py").write_text("import time\n\ndef scale(x):\n    time.sleep(0.002)\n    return x * 2\n")
    _git(repo, "commit", "-qam", "head: slower")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--pytest",
            "bench",
            "--pytest-args",
            " ".join(plugin_args()),
            "--base",
            "HEAD~1",
            # Three rounds, not two: the rounds-t interval of two rounds has one degree of freedom
            # (t = 12.7), and on a loaded CI machine the base's 23 us rounds read 14.9 and 32.3 us,
            # so a 100x slowdown's interval reached below 1 and read "no change".
            "--rounds",
            "3",
            "--ncu",
            "off",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=repo,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    verdicts = {c["case_id"]: c["verdict"] for c in report["cases"]}
    assert verdicts == {"scale/default/fp32": "regression"}, done.stdout
    assert report["rounds"] == 3 and report["shape_set"] == "pytest"
    # a repository without a remote is named local/<its directory>, never ""; both sides committed code
    assert report["repo"] == "local/repo" and not report["base_dirty"] and not report["head_dirty"]


def test_compare_pytest_refuses_a_dirty_head_with_fail_on_before_measuring(tmp_path):
    repo = _scale_repository(tmp_path)
    (repo / "mykernel.py").write_text("def scale(x):\n    return x * 2.0\n")  # not committed
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "compare",
            "--pytest",
            "bench",
            "--base",
            "HEAD",
            "--rounds",
            "2",
            "--fail-on",
            "regression",
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=repo,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and not (tmp_path / "out").exists(), done.stdout + done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "the head is a checkout with uncommitted changes, which no commit holds: commit or stash them, or pass "
            "--allow-dirty to judge them anyway"
        )
    ), done.stderr
