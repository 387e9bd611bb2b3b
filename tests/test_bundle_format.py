"""Bundle format 2 and the writer's checks: the writer runs the reader's own validation on what
it writes (one test per rule: a bad bundle cannot be written, and nothing is), the timings live
in timings.json once, a bundle of format 1 still ingests into the same rows, pytest-benchmark's
own `compare` still reads benchmark.json, and `attnwatch run` and `attnwatch compare` share one
assembler and its rule that an ok case comes with its record."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import duckdb
import pytest

from bundle_factory import as_format_1, bundle_contents, case_id, make_bundle
from attnwatch.ci.bundle_assembly import RunHead, write_bundle as write_run
from attnwatch.ci.case_records import NO_RECORD
from attnwatch.ci.compare.bundles import write_side_bundles
from attnwatch.ci.compare.rounds import CaseRound, RoundData
from attnwatch.ci.environment import GitInfo
from attnwatch.ci.plan import plan_cases
from attnwatch.ci.suite_state import SuiteState
from attnwatch.history.contract.bundle import Environment
from attnwatch.history.contract.bundle_writer import write_bundle
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.contract.validate import load_bundle
from attnwatch.kernels.shapes import adhoc_shape
from attnwatch.history.store.location import parse_location

REPO_ROOT = Path(__file__).resolve().parent.parent
SDPA = case_id("sdpa", "l4_mission", "fp16", False)
ENV = Environment(device_kind="cpu", hostname="runner", os="Linux", python_version="3.12.3")
GIT = GitInfo(sha="ab" * 20, branch="main", repo="example/kernels")


def _contents(variants=("sdpa",)):
    return bundle_contents(run_id="r", variants=variants, n_samples=5)


def _timing(contents, index: int, **changes):
    contents.timings[index] = dataclasses.replace(contents.timings[index], **changes)


def _status(contents, case: str, status: str):
    contents.outcomes = [dataclasses.replace(o, status=status) if o.case_id == case else o for o in contents.outcomes]


# (what is wrong, how, the file and field the refusal names)
RULES = [
    (
        "a latency that is not a number",
        lambda c: _timing(c, 0, median_us="fast"),
        "timings.json",
        "timings[0].median_us",
    ),
    ("a timing's unknown mode", lambda c: _timing(c, 1, timing_mode="guess"), "timings.json", "timings[1].timing_mode"),
    ("a timing for a crashed case", lambda c: _status(c, SDPA, "crashed"), "timings.json", "timings[0].case_id"),
    ("an ok case without its timing", lambda c: c.timings.pop(0), "outcomes.json", "cases[0].status"),
    (
        "a timing copied into benchmark.json",
        lambda c: c.benchmark["benchmarks"][0]["extra_info"].update(attnwatch={"median_us": "fast", "bogus": 1}),
        "benchmark.json",
        "benchmarks[0].extra_info.attnwatch",
    ),
    (
        "a host entry of no timed case",
        lambda c: c.benchmark["benchmarks"][0]["extra_info"].update(attnwatch_case="sdpa/other/fp16/causal"),
        "benchmark.json",
        "benchmarks[0].extra_info.attnwatch_case",
    ),
    ("a run id with spaces", lambda c: setattr(c.manifest, "run_id", "bad id with spaces"), "manifest.json", "run_id"),
    ("an unknown trigger", lambda c: setattr(c.manifest, "trigger", "nonsense"), "manifest.json", "trigger"),
    (
        "a run that ends before it starts",
        lambda c: setattr(c.manifest, "finished_at", "2020-01-01T00:00:00+00:00"),
        "manifest.json",
        "finished_at",
    ),
    ("samples the timing does not count", lambda c: c.samples[SDPA].pop(), "samples.json", f"samples.{SDPA}"),
    ("a negative sample", lambda c: c.samples[SDPA].__setitem__(0, -1.0), "samples.json", f"samples.{SDPA}[0]"),
    (
        "one seed checked twice",
        lambda c: c.correctness.__setitem__(1, c.correctness[0]),
        "correctness.json",
        "records[1]",
    ),
    ("a build recorded twice", lambda c: c.builds.append(c.builds[0]), "builds.json", "builds[1]"),
    (
        "a negative error",
        lambda c: c.correctness.__setitem__(0, dataclasses.replace(c.correctness[0], rel_err=-1.0)),
        "correctness.json",
        "records[0].rel_err",
    ),
]


@pytest.mark.parametrize(("what", "break_", "file", "field"), RULES, ids=[r[0] for r in RULES])
def test_the_writer_refuses_what_the_reader_refuses(tmp_path, what, break_, file, field):
    contents = _contents(variants=("sdpa", "triton_fa2"))
    break_(contents)
    with pytest.raises(BundleError) as info:
        write_bundle(tmp_path / "bundle", contents)
    assert info.value.path.endswith(file) and info.value.field == field, info.value
    assert not (tmp_path / "bundle").exists()  # checked before anything was written


def test_the_rules_above_are_the_readers(tmp_path):
    """The same breaks, written past the writer, are refused by the reader naming the same
    file and field: the writer runs the reader's checks, not a copy of them."""
    good = make_bundle(tmp_path / "good", run_id="r", variants=("sdpa",), n_samples=5)
    document = json.loads((good / "manifest.json").read_text())
    document["trigger"] = "nonsense"
    (good / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(BundleError) as info:
        load_bundle(good)
    assert info.value.path.endswith("manifest.json") and info.value.field == "trigger"


def test_each_timing_is_stored_once(tmp_path):
    bundle = make_bundle(tmp_path / "b", run_id="r", variants=("sdpa", "triton_fa2"), n_samples=5)
    timings = json.loads((bundle / "timings.json").read_text())
    assert timings["schema"] == "attnwatch.timings" and timings["schema_version"] == 1
    benchmark = json.loads((bundle / "benchmark.json").read_text())
    assert all(set(e["extra_info"]) == {"attnwatch_case"} for e in benchmark["benchmarks"])
    assert [e["extra_info"]["attnwatch_case"] for e in benchmark["benchmarks"]] == [
        t["case_id"] for t in timings["timings"]
    ]
    assert json.loads((bundle / "manifest.json").read_text())["schema_version"] == 4


def _table(db: Path, table: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        columns = [r[0] for r in con.execute(f"DESCRIBE {table}").fetchall()]
        order = ", ".join(c for c in ("case_id", "seed", "variant", "kernel_index", "sample_index") if c in columns)
        return con.execute(f"SELECT * FROM {table} ORDER BY {order or 'run_id'}").fetchall()
    finally:
        con.close()


def test_a_format_1_bundle_ingests_into_the_same_rows(tmp_path):
    """The same run written in format 2 and rewritten as format 1 wrote it (each timing inside
    its benchmark entry) gives the same rows in every table."""
    statuses = {case_id("sdpa", "l4_mission", "fp16", True): "crashed", "cuda_wmma": "failed"}
    new = make_bundle(
        tmp_path / "new",
        run_id="same-run",
        variants=("sdpa", "cuda_wmma", "triton_fa2"),
        n_samples=8,
        statuses=statuses,
        run_status="partial",
        with_ncu=True,
    )
    old = as_format_1(shutil.copytree(new, tmp_path / "old"))
    assert not (old / "timings.json").exists()
    new_db, old_db = tmp_path / "new.duckdb", tmp_path / "old.duckdb"
    ingest_paths(parse_location(new_db), [new])
    ingest_paths(parse_location(old_db), [old])
    for table in ("results", "samples", "correctness", "builds", "ncu_cases", "ncu_metrics"):
        rows = _table(new_db, table)
        assert rows and _table(old_db, table) == rows, table
    assert load_bundle(old).content_sha256 != load_bundle(new).content_sha256  # each keeps its own bytes' hash


def test_a_bad_format_1_timing_is_named_where_format_1_stored_it(tmp_path):
    old = as_format_1(make_bundle(tmp_path / "old", run_id="r", variants=("sdpa",), n_samples=5))
    document = json.loads((old / "benchmark.json").read_text())
    document["benchmarks"][1]["extra_info"]["attnwatch"]["batch"] = 1.5
    (old / "benchmark.json").write_text(json.dumps(document))
    with pytest.raises(BundleError) as info:
        load_bundle(old)
    assert info.value.path.endswith("benchmark.json") and info.value.field == "benchmarks[1].extra_info.attnwatch.batch"


def test_a_recorded_format_1_bundle_keeps_its_timings_and_host_statistics(tmp_path):
    """The real H200 bundle of format 1: each result row has the CaseTiming and the host
    statistics its benchmark entry carried."""
    with tarfile.open(REPO_ROOT / "tests" / "data" / "bundles" / "h200-main-fp16-3225df5.tgz") as archive:
        archive.extractall(tmp_path / "sample", filter="data")
    (recorded,) = (tmp_path / "sample").iterdir()
    entries = json.loads((recorded / "benchmark.json").read_text())["benchmarks"]
    db = tmp_path / "h.duckdb"
    ingest_paths(parse_location(db), [recorded])
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = {
            r[0]: r[1:]
            for r in con.execute(
                "SELECT case_id, median_us, tflops, n_samples, host_median_us, benchmark_name FROM results"
            ).fetchall()
        }
    finally:
        con.close()
    assert len(entries) > 10
    for entry in entries:
        timing = entry["extra_info"]["attnwatch"]
        median, tflops, n, host_median, name = rows[timing["case_id"]]
        assert (median, tflops, n, name) == (timing["median_us"], timing["tflops"], timing["n"], entry["name"])
        assert host_median == pytest.approx(entry["stats"]["median"] * 1e6)


def _pytest_benchmark_compare(*paths: Path, cwd: Path) -> subprocess.CompletedProcess:
    """pytest-benchmark's own `compare` command (run outside the repository: it loads the
    conftest.py of its working directory)."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pytest_benchmark.cli import main; sys.argv[0] = 'pytest-benchmark'; main()",
            "compare",
            *map(str, paths),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def _round(status: str, samples: list[float]) -> RoundData:
    cid = case_id("sdpa", "h100_small", "fp16", False)
    timing = dataclasses.asdict(_contents().timings[0])
    timing.update(case_id=cid, shape_id="h100_small", n=len(samples) or 1)
    rec = CaseRound(cid, "sdpa", "h100_small", "fp16", False, status, samples_us=samples, timing=timing)
    return RoundData(
        "r", "NVIDIA H200", GIT.sha, {cid: rec}, started_at="2026-11-03T09:00:00Z", finished_at="2026-11-03T09:05:00Z"
    )


def test_pytest_benchmark_compare_reads_a_run_and_a_compare_round(tmp_path):
    """pytest-benchmark's own tool loads both benchmark.json files: a run's (host entries) and
    a compare round's (no entries: compare times no host; format 1's empty `stats` made it fail)."""
    run = make_bundle(tmp_path / "run", run_id="r", variants=("sdpa",), n_samples=5)
    (compare_round,) = write_side_bundles(
        tmp_path / "cmp",
        "head",
        [_round("ok", [10.0, 11.0])],
        git=GIT,
        environment=ENV,
        builds=[],
        shape_set="pr",
        total_cases=1,
    )
    assert len(load_bundle(compare_round, known_commit=False).timings) == 1
    old = as_format_1(shutil.copytree(compare_round, tmp_path / "old"))
    shown = _pytest_benchmark_compare(
        run / "benchmark.json", compare_round / "benchmark.json", old / "benchmark.json", cwd=tmp_path
    )
    assert shown.returncode == 0 and "test_attention[sdpa/l4_mission/fp16/causal]" in shown.stdout
    failed = [line for line in shown.stderr.splitlines() if "Failed to load" in line]
    assert len(failed) == 1 and str(old / "benchmark.json") in failed[0], shown.stderr


def test_run_and_compare_share_the_assembler_and_its_rule(tmp_path):
    """A case reported ok without its samples is lost, with the same error, whichever producer."""
    (compare_round,) = write_side_bundles(
        tmp_path / "cmp", "head", [_round("ok", [])], git=GIT, environment=ENV, builds=[], shape_set="pr", total_cases=1
    )
    (case,) = plan_cases(["sdpa"], [adhoc_shape(1, 2, 16, 64)], ["fp16"], [True])
    state = SuiteState([case])
    timing = dataclasses.asdict(_contents().timings[0])
    state.apply({"kind": "result", "case": case.case_id, "status": "ok", "timing": timing, "samples_us": []})
    state.apply({"kind": "outcome", "case": case.case_id, "status": "ok"})
    run = write_run(
        tmp_path / "run", state, RunHead(GIT, ENV, "pr", "local", "2026-11-03T09:00:00Z", "2026-11-03T09:05:00Z")
    )
    for bundle in (compare_round, run):
        loaded = load_bundle(bundle, known_commit=False)
        assert [(o.status, o.error) for o in loaded.outcomes] == [("failed", NO_RECORD)]
        assert loaded.manifest.status == "failed" and loaded.timings == []


def _runs_packages(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT run_id, bundle_schema_version, packages FROM series_runs ORDER BY run_id").fetchall()
    finally:
        con.close()


def test_format_3_records_the_optional_packages_and_a_format_2_bundle_still_ingests(tmp_path):
    """Format 3 added Environment.packages (an absent package is a key with null); a format-2
    bundle (as the H200 runs of before wrote it) reads with none recorded and ingests, NULL."""
    packages = {"flash-attn-4": "4.0.0b4", "liger-kernel": None}
    new = make_bundle(
        tmp_path / "new", run_id="run-3", variants=("sdpa",), n_samples=5, environment={"packages": packages}
    )
    written = json.loads((new / "manifest.json").read_text())
    assert written["schema_version"] == 4 and written["environment"]["packages"] == packages
    old = shutil.copytree(new, tmp_path / "old")
    document = {**written, "run_id": "run-2", "schema_version": 2}
    del document["environment"]["packages"]
    del document["fingerprints"]
    for name in FORMAT_4_ENVIRONMENT:
        del document["environment"][name]
    (old / "manifest.json").write_text(json.dumps(document))
    assert load_bundle(old).manifest.environment.packages == {}
    db = tmp_path / "h.duckdb"
    ingest_paths(parse_location(db), [new, old])
    assert _runs_packages(db) == [("run-2", 4, None), ("run-3", 4, '{"flash-attn-4": "4.0.0b4", "liger-kernel": null}')]


FORMAT_4_ENVIRONMENT = ("cudnn_version", "cublas_version", "power_limit_w", "harness_digest")


def test_format_4_records_each_variants_fingerprint_and_a_format_3_bundle_records_none(tmp_path):
    """Format 4 added Manifest.fingerprints and four environment fields; they reach the history
    (variant_fingerprints, runs columns: migration 015). A format-3 bundle reads with no
    fingerprints and NULL fields: its code is unknown, never assumed unchanged."""
    from attnwatch.history.contract.bundle import VariantFingerprint

    prints = {
        "sdpa": {"digest": "d" * 64, "code": "c" * 64, "unknown": None},
        "triton_fa2": {"digest": None, "code": None, "unknown": "a compiled binary is not in the cache"},
    }
    new = make_bundle(
        tmp_path / "new",
        run_id="run-4",
        variants=("sdpa", "triton_fa2"),
        n_samples=5,
        environment={"cudnn_version": "9.13.0.50", "power_limit_w": 700.0, "harness_digest": "h" * 64},
        fingerprints=prints,
    )
    written = json.loads((new / "manifest.json").read_text())
    assert written["schema_version"] == 4 and written["fingerprints"] == prints
    old = shutil.copytree(new, tmp_path / "old")
    document = {**written, "run_id": "run-3", "schema_version": 3}
    del document["fingerprints"]
    for name in FORMAT_4_ENVIRONMENT:
        del document["environment"][name]
    (old / "manifest.json").write_text(json.dumps(document))
    assert load_bundle(old).manifest.fingerprints == {}
    assert load_bundle(new).manifest.fingerprints["sdpa"] == VariantFingerprint("d" * 64, "c" * 64, None)
    db = tmp_path / "h.duckdb"
    ingest_paths(parse_location(db), [new, old])
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute(
            "SELECT run_id, variant, code_digest, unknown FROM variant_fingerprints ORDER BY variant"
        ).fetchall() == [
            ("run-4", "sdpa", "c" * 64, None),
            ("run-4", "triton_fa2", None, "a compiled binary is not in the cache"),
        ]
        assert con.execute(
            "SELECT run_id, cudnn_version, power_limit_w, harness_digest FROM runs ORDER BY run_id"
        ).fetchall() == [("run-3", None, None, None), ("run-4", "9.13.0.50", 700.0, "h" * 64)]


def test_packages_that_are_not_versions_are_refused(tmp_path):
    """Packages that are not distribution -> version-or-null are refused in one line naming the field."""
    bundle = make_bundle(tmp_path / "b", run_id="r", variants=("sdpa",), n_samples=5)
    document = json.loads((bundle / "manifest.json").read_text())
    document["environment"]["packages"] = {"flash-attn-4": 4}
    (bundle / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(BundleError) as info:
        load_bundle(bundle)
    assert info.value.path.endswith("manifest.json") and info.value.field == "environment.packages.flash-attn-4"
