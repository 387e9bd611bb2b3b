"""Ingest into a real DuckDB file: rows land once, re-ingest is a no-op, fixtures import."""

from __future__ import annotations

import dataclasses
import json

import duckdb
import pytest

from bundle_factory import as_format_1, make_bundle, make_pytest_benchmark_file
from attnwatch.cli.main import main as cli_main
from attnwatch.history.contract.bundle import CaseTiming, CorrectnessRecord, Environment, NcuCaseMetrics
from attnwatch.history.store.db import open_read
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location


def _counts(db_path) -> dict[str, int]:
    with open_read(parse_location(db_path)) as con:
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in (
                "runs",
                "commits",
                "results",
                "samples",
                "correctness",
                "builds",
                "ncu_kernels",
                "ncu_metrics",
                "ncu_cases",
            )
        }


def test_bundle_lands_with_every_table(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "b", statuses={"cuda_wmma": "crashed"}, with_ncu=True, n_samples=30)
    report = ingest_paths(parse_location(db_path), [bundle])
    assert [b.action for b in report.bundles] == ["inserted"]
    counts = _counts(db_path)
    # 6 variants x 2 shapes x 1 dtype x 2 causal = 24 cases; 4 crashed (cuda_wmma) have no timing.
    assert counts["runs"] == 1 and counts["commits"] == 1 and counts["results"] == 24
    assert counts["samples"] == 20 * 30 and counts["correctness"] == 20 * 2
    assert (
        counts["ncu_cases"] == 20 and counts["ncu_metrics"] == 40 and counts["builds"] == 1
    )  # triton_fa2; cuda_wmma crashed
    assert report.bundles[0].rows["results"] == 24
    with open_read(parse_location(db_path)) as con:
        crashed = con.execute(
            "SELECT count(*) FROM results WHERE status = 'crashed' AND median_us IS NULL AND error LIKE 'crashed%'"
        ).fetchone()[0]
        gap = con.execute(
            "SELECT gap_to_baseline, gap_to_backends['sdpa_flash'], fastest_reference, baseline_variant, "
            "gap_to_sdpa, operator, bytes FROM results WHERE case_id = 'sdpa/l4_mission/fp16/causal'"
        ).fetchone()
        env = con.execute("SELECT gpu_name, torch_version, device_kind, synthetic FROM runs").fetchone()
    assert crashed == 4
    assert gap[0] == pytest.approx(1.0) and gap[1] > 0 and gap[2] in ("sdpa_flash", "sdpa_efficient")
    # Migration 012 keeps gap_to_sdpa for stored queries: the gap where the baseline is sdpa.
    assert gap[3:] == ("sdpa", gap[0], "attention", 4.0 * 1 * 8 * 512 * 64 * 2)
    assert env == ("NVIDIA H200", "2.11.0", "cuda", False)


def test_same_bundle_twice_adds_nothing(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "b")
    ingest_paths(parse_location(db_path), [bundle])
    before = _counts(db_path)
    report = ingest_paths(parse_location(db_path), [bundle, bundle])
    assert [b.action for b in report.bundles] == ["skipped", "skipped"]
    assert _counts(db_path) == before


def test_stored_values_match_the_bundle(tmp_path, db_path):
    bundle = make_bundle(tmp_path / "b", variants=("sdpa", "triton_fa2"), n_samples=40)
    ingest_paths(parse_location(db_path), [bundle])
    doc = json.loads((bundle / "benchmark.json").read_text())
    timings = {t["case_id"]: t for t in json.loads((bundle / "timings.json").read_text())["timings"]}
    samples = json.loads((bundle / "samples.json").read_text())["samples"]
    assert sorted(e["extra_info"]["attnwatch_case"] for e in doc["benchmarks"]) == sorted(timings)
    with open_read(parse_location(db_path)) as con:
        for entry in doc["benchmarks"]:
            t = timings[entry["extra_info"]["attnwatch_case"]]
            row = con.execute(
                "SELECT median_us, p10_us, tflops, n_samples, host_median_us FROM results WHERE case_id = ?",
                [t["case_id"]],
            ).fetchone()
            assert row[:4] == (t["median_us"], t["p10_us"], t["tflops"], t["n"])
            assert row[4] == pytest.approx(entry["stats"]["median"] * 1e6)
            stored = [
                r[0]
                for r in con.execute(
                    "SELECT latency_us FROM samples WHERE case_id = ? ORDER BY sample_index", [t["case_id"]]
                ).fetchall()
            ]
            assert stored == samples[t["case_id"]]


def test_recorded_pytest_benchmark_2_5_file_imports(fixtures_dir, db_path):
    """The file names no repository (no commit_info.project): stored as the setting's
    (history.contract.repository)."""
    path = fixtures_dir / "pytest-benchmark" / "v2.5.0_storage_example.json"
    report = ingest_paths(parse_location(db_path), [path], repo="example/attention-kernels")
    run_id = report.bundles[0].run_id
    assert run_id.startswith("pb-")
    with open_read(parse_location(db_path)) as con:
        run = con.execute(
            "SELECT commit_sha, source, trigger, dirty, pytest_benchmark_version, repo FROM runs"
        ).fetchone()
        res = con.execute(
            "SELECT variant, timing_mode, shape_id, median_us, n_samples, host_iterations FROM results"
        ).fetchone()
    assert run == (
        "5b78858eb718649a31fb93d8dc96ca2cee41a4cd",
        "pytest-benchmark",
        "import",
        True,
        "2.5.0",
        "example/attention-kernels",
    )
    # stats.median 2.2016379230260297e-07 s is 0.22016... us; rounds 9710, iterations 431.
    assert res[0] == "test_xfast_parametrized[0]" and res[1] == "host" and res[2] is None
    assert res[3] == pytest.approx(0.22016379230260297) and res[4] == 9710 and res[5] == 431
    assert (
        ingest_paths(parse_location(db_path), [path], repo="example/attention-kernels").bundles[0].action == "skipped"
    )


def test_plain_pytest_benchmark_file_uses_group_as_variant(tmp_path, db_path):
    path = make_pytest_benchmark_file(tmp_path / "bench.json", group="softmax")
    ingest_paths(
        parse_location(db_path), [path], repo="example/attention-kernels"
    )  # its project: the bare "attention-kernels"
    with open_read(parse_location(db_path)) as con:
        rows = con.execute("SELECT variant, median_us FROM results ORDER BY median_us").fetchall()
        branch = con.execute("SELECT branch FROM runs").fetchone()[0]
    assert rows == [("softmax", pytest.approx(100.0)), ("softmax", pytest.approx(200.0))]
    assert branch == "main"


def test_every_contract_field_has_a_column(db_path, tmp_path):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b")])
    with open_read(parse_location(db_path)) as con:

        def columns(table):
            return {
                r[0]
                for r in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]
                ).fetchall()
            }

        runs, results = columns("runs"), columns("results")
        correctness, ncu_cases = columns("correctness"), columns("ncu_cases")
    assert {f.name for f in dataclasses.fields(Environment)} <= runs
    renamed = {"n": "n_samples", "schema_version": None}
    timing = {renamed.get(f.name, f.name) for f in dataclasses.fields(CaseTiming)} - {None}
    assert timing <= results
    assert {f.name for f in dataclasses.fields(CorrectnessRecord)} <= correctness
    assert {f.name for f in dataclasses.fields(NcuCaseMetrics)} <= ncu_cases


def test_views_answer_the_common_questions(tmp_path, db_path):
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    paths = [
        make_bundle(
            tmp_path / f"m{i}",
            run_id=f"main-{i}",
            started_at=t0 + timedelta(days=i),
            seed=i,
            variants=("sdpa", "triton_fa2"),
        )
        for i in range(3)
    ]
    paths.append(
        make_bundle(
            tmp_path / "pr",
            run_id="pr-1",
            branch="feature",
            trigger="pull_request",
            pr_number=7,
            started_at=t0 + timedelta(days=5),
            variants=("sdpa", "triton_fa2"),
        )
    )
    paths.append(
        make_bundle(
            tmp_path / "other",
            run_id="l4-0",
            gpu_name="NVIDIA L4",
            started_at=t0 + timedelta(days=1),
            variants=("sdpa",),
        )
    )
    ingest_paths(parse_location(db_path), paths)
    with open_read(parse_location(db_path)) as con:
        latest = dict(con.execute("SELECT gpu_name, run_id FROM latest_main_runs").fetchall())
        series = con.execute(
            "SELECT run_id, series_index FROM case_series WHERE case_id = "
            "'triton_fa2/l4_mission/fp16/causal' AND gpu_name = 'NVIDIA H200' "
            "ORDER BY series_index"
        ).fetchall()
        latest_rows = con.execute("SELECT count(DISTINCT run_id), count(*) FROM latest_results").fetchone()
    assert latest == {"NVIDIA H200": "main-2", "NVIDIA L4": "l4-0"}
    assert series == [("main-0", 1), ("main-1", 2), ("main-2", 3)]  # the PR run is not in main's series
    assert latest_rows == (2, 8 + 4)


def test_cli_ingest_prints_a_report_and_is_idempotent(tmp_path, db_path, capsys):
    bundle = make_bundle(tmp_path / "b")
    assert cli_main(["--db", str(db_path), "ingest", str(bundle)]) == 0
    assert "1 run(s) inserted" in capsys.readouterr().out
    assert cli_main(["--db", str(db_path), "ingest", str(bundle)]) == 0
    assert "0 run(s) inserted" in capsys.readouterr().out


def test_reingest_after_reopen_with_duckdb_directly(tmp_path, db_path):
    """The file is a plain DuckDB database any client can read."""
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b")])
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        assert con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= 1
    finally:
        con.close()


def test_our_benchmark_json_alone_uses_its_gpu_timing(tmp_path, db_path):
    """A harness benchmark.json of format 1 ingested on its own: extra_info.attnwatch is the timing."""
    bundle = as_format_1(make_bundle(tmp_path / "b", variants=("sdpa", "triton_fa2"), n_samples=10))
    alone = tmp_path / "benchmark.json"
    alone.write_bytes((bundle / "benchmark.json").read_bytes())
    report = ingest_paths(parse_location(db_path), [alone], repo="example/attention-kernels")
    assert report.bundles[0].rows["results"] == 8
    with open_read(parse_location(db_path)) as con:
        row = con.execute(
            "SELECT variant, shape_id, batch, causal, timing_mode, n_samples, gap_to_baseline "
            "FROM results WHERE case_id = 'triton_fa2/h100_small/fp16/causal'"
        ).fetchone()
        device = con.execute("SELECT device_kind, source FROM runs").fetchone()
    assert row[:6] == ("triton_fa2", "h100_small", 1, True, "cuda_events", 10) and row[6] > 0
    assert device == ("cuda", "pytest-benchmark")


def test_a_bundles_benchmark_json_alone_is_pytest_benchmarks_host_timing(tmp_path, db_path):
    """Since format 2 a bundle's benchmark.json holds only pytest-benchmark's measurement: alone,
    it ingests as any pytest-benchmark file does, its host statistics keyed by pytest's names."""
    bundle = make_bundle(tmp_path / "b", variants=("sdpa",), n_samples=10)
    alone = tmp_path / "benchmark.json"
    alone.write_bytes((bundle / "benchmark.json").read_bytes())
    ingest_paths(parse_location(db_path), [alone], repo="example/attention-kernels")
    with open_read(parse_location(db_path)) as con:
        rows = con.execute("SELECT case_id, timing_mode, median_us, host_median_us FROM results").fetchall()
    assert len(rows) == 4 and all(r[0].startswith("tests/bench/test_attention.py::") for r in rows)
    assert all(r[1] == "host" and r[2] == r[3] > 0 for r in rows)


def test_unchanged_inputs_are_skipped_without_reparsing(tmp_path, db_path, monkeypatch):
    import attnwatch.history.ingest.write as ingest_module

    stored = make_bundle(tmp_path / "stored", run_id="stored", seed=1)
    ingest_paths(parse_location(db_path), [stored])
    new = make_bundle(tmp_path / "new", run_id="new", seed=2)
    parsed = []
    real_load = ingest_module.load_input
    monkeypatch.setattr(ingest_module, "load_input", lambda p: parsed.append(p.name) or real_load(p))
    report = ingest_paths(parse_location(db_path), [stored, new])
    assert [(b.run_id, b.action) for b in report.bundles] == [("stored", "skipped"), ("new", "inserted")]
    assert parsed == ["new"]

    # One changed byte and the shortcut no longer applies: full validation, then refusal.
    notes = json.loads((stored / "manifest.json").read_text())
    notes["notes"] = "edited after ingest"
    (stored / "manifest.json").write_text(json.dumps(notes))
    with pytest.raises(Exception, match="different content"):
        ingest_paths(parse_location(db_path), [stored])
    assert parsed[-1] == "stored"
