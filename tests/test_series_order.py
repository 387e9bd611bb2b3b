"""One series order (history.contract.series_key, migration 010) for the Trends chart, detection's
`case_series` and the Overview sparkline: runs whose commits have equal commit times, runs of one
commit, runs started at the same second and a run whose commit time is unknown are ordered
alike by all of them. Real bundles, a real DuckDB file and the same history copied into a real
DuckLake (the suite's PostgreSQL server)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest

from attnwatch.app.data import overview, trends
from attnwatch.app.data.store import current_source
from bundle_factory import make_bundle
from attnwatch.history.store.copy import copy_history
from attnwatch.history.store.db import open_read
from attnwatch.history.detection.scan import series_points
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=timezone.utc)
GPU = "NVIDIA H200"
CASE = "triton_fa2/l4_mission/fp16/causal"


def _sha(name: str) -> str:
    return name.encode().hex().ljust(40, "0")[:40]


# (run id, commit, commit time in hours after T0 or None (unknown), start in hours after T0);
# listed in the one series order: commit time (else start), then start, then run id.
RUNS = (
    ("run-a", "a", 0.0, 1.0),
    ("run-b", "b", 0.0, 2.0),  # b's commit has a's commit time: start decides
    ("run-m", "m", None, 2.5),  # commit time unknown: placed at its start (case_series put it last)
    ("run-c1", "c", 3.0, 4.0),
    ("run-c3", "c", 3.0, 5.0),  # c measured three times; c2 and c3 started in the same second:
    ("run-c2", "c", 3.0, 5.0),  # the run id decides (c2 before c3), not the order of ingest
    ("run-d", "d", 1.0, 6.0),  # an older commit measured last: placed at its commit time
)
EXPECTED = ["run-a", "run-b", "run-d", "run-m", "run-c1", "run-c2", "run-c3"]


def _bundles(work):
    paths = []
    for run_id, commit, committed, started in RUNS:
        path = make_bundle(
            work / run_id,
            run_id=run_id,
            commit_sha=_sha(commit),
            seed=len(paths),
            variants=("sdpa", "triton_fa2"),
            started_at=T0 + timedelta(hours=started),
            commit_date=T0 + timedelta(hours=committed or 0),
            with_samples=False,
        )
        if committed is None:
            manifest = path / "manifest.json"
            document = json.loads(manifest.read_text())
            document["commit_date"] = None
            manifest.write_text(json.dumps(document))
        paths.append(path)
    return paths


@pytest.fixture(params=["file", "lake"])
def history(request, tmp_path, monkeypatch):
    file = tmp_path / "history.duckdb"
    monkeypatch.setenv("ATTNWATCH_DB", str(file))
    ingest_paths(parse_location(file), _bundles(tmp_path / "bundles"))
    if request.param == "file":
        return str(file)
    lake = request.getfixturevalue("lake_db")
    copy_history(parse_location(file), parse_location(lake))
    return lake


def test_trends_detection_and_sparklines_order_runs_alike(history):
    with open_read(parse_location(history)) as con:
        unknown = con.execute("SELECT committed_at FROM commits WHERE sha = ?", [_sha("m")]).fetchone()
        stored = [
            r[0]
            for r in con.execute(
                "SELECT run_id FROM case_series WHERE case_id = ? ORDER BY series_index", [CASE]
            ).fetchall()
        ]
        detected = [p["run_id"] for p in series_points(con, GPU, window=200) if p["case_id"] == CASE]
    assert unknown == (None,)  # the planted case: a commit whose time is not recorded
    assert stored == EXPECTED
    assert detected == EXPECTED

    source = current_source(history)
    label = next(label for label, m in trends.METRICS.items() if m.column == "median_us")
    chart = trends.trend_series(source, label, GPU, "main", ("triton_fa2",), ("l4_mission",), "fp16", True)
    assert list(dict.fromkeys(chart["run_id"])) == EXPECTED
    assert list(chart.drop_duplicates("run_id").sort_values("x_order")["run_id"]) == EXPECTED

    # The sparkline of the newest run (by start: run-d) ends at it, in the same order.
    newest = overview.latest_cases(source, "run-d", GPU).set_index("case_id").loc[CASE, "trend_us"]
    assert list(newest) == list(chart.set_index("run_id").loc[EXPECTED[: EXPECTED.index("run-d") + 1], "median_us"])
