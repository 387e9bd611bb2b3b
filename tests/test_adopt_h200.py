"""The example repository's suite as it ran on an H200 (tests/data/adopt/h200-bench-da12a05.json.gz:
`examples/adopt`'s pytest-benchmark suite run with the `gpu_benchmark` fixture by
scripts/adopt_check.py, its `--benchmark-json` file unchanged) ingested into a real DuckDB file:
each case is stored with the engine's GPU statistics (CUDA-event timing, the SM clocks, graph
replay for the launch-bound Triton cases, the reference's gap, correctness), as the user's
callable (operator `callable`) with the test's byte count, on the GPU the run named, and is
queryable with SQL like any other run."""

from __future__ import annotations

import gzip
import json

import pytest

from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.db import open_read
from attnwatch.history.store.location import parse_location

RECORDING = "adopt/h200-bench-da12a05.json.gz"


@pytest.fixture(scope="module")
def stored(tmp_path_factory, fixtures_dir):
    work = tmp_path_factory.mktemp("adopt_h200")
    bench = work / "bench.json"
    bench.write_bytes(gzip.decompress((fixtures_dir / RECORDING).read_bytes()))
    document = json.loads(bench.read_text())
    db = work / "history.duckdb"
    report = ingest_paths(
        parse_location(db), [bench], repo="local/adopt"
    )  # the plugin's identity of a repository with no remote
    assert len(report.bundles) == 1
    with open_read(parse_location(db)) as con:
        rows = con.execute(
            "SELECT r.case_id, r.status, r.timing_mode, r.median_us, r.graph_median_us, r.sm_clock_mhz_before, "
            "r.sm_clock_mhz_after, r.n_samples, u.gpu_name, r.gap_to_baseline, r.operator, r.bytes "
            "FROM results r JOIN runs u USING (run_id)"
        ).fetchall()
    names = (
        "case_id",
        "status",
        "timing_mode",
        "median_us",
        "graph_median_us",
        "clock_before",
        "clock_after",
        "n",
        "gpu",
        "gap",
        "operator",
        "bytes",
    )
    return document, {row[0]: dict(zip(names, row)) for row in rows}


def test_every_case_is_stored_with_the_gpu_statistics_the_h200_measured(stored):
    document, rows = stored
    records = [b["extra_info"]["attnwatch_measurement"] for b in document["benchmarks"]]
    measured = {m["timing"]["case_id"]: m for m in records}
    ours = {cid: row for cid, row in rows.items() if cid in measured}
    assert set(ours) == set(measured) and len(ours) == 4
    # named as the user names them: no `test_` prefix, the reference under its own function's name
    assert set(ours) == {
        f"softmax_{kind}/{shape}/fp16" for kind in ("triton", "torch") for shape in ("4096x1024", "4096x4096")
    }
    for case_id, row in ours.items():
        timing = measured[case_id]["timing"]
        assert row["status"] == "ok" and row["timing_mode"] == "cuda_events" == timing["timing_mode"]
        assert row["median_us"] == pytest.approx(timing["median_us"], rel=1e-12)
        assert row["gpu"] == "NVIDIA H200" and row["clock_before"] == row["clock_after"] == 1980
        assert measured[case_id]["correctness"]["passed"]
        # the user's callable, stored as such (not an attention case) with the byte count the test gave
        n_rows, n_cols = (int(n) for n in case_id.split("/")[1].split("x"))
        assert row["operator"] == timing["operator"] == "callable"
        assert row["bytes"] == timing["bytes"] == 2 * n_rows * n_cols * 2  # fp16: read and write every element
    for shape in ("4096x1024", "4096x4096"):  # launch-bound Triton rows carry graph replay
        triton = ours[f"softmax_triton/{shape}/fp16"]
        assert triton["graph_median_us"] > 0
        gap = measured[f"softmax_triton/{shape}/fp16"]["timing"]["gap_to_baseline"]
        assert triton["gap"] == pytest.approx(gap, rel=1e-12) and 0 < gap < 0.2  # against its naive reference
