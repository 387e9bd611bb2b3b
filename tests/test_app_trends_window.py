"""Trends' default window reaches back to every alert listed under its chart (issue 44): a
history of 220 main runs on one GPU (the synthetic generator, written in bulk) with a regression
alert recorded, by detection's own writer, on a run 215 runs back, further than the 200 newest
runs a view used to open with."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.history.detection.alerts import NewAlert, record_alerts
from attnwatch.history.store.db import open_write
from test_app_pages import frame_with, open_page, texts, trend_charts, trend_points
from attnwatch.history.store.location import parse_location

REPO = Path(__file__).resolve().parents[1]
H200 = "NVIDIA H200"
CASE = "sdpa/b4_h16_s2k/fp16/noncausal"
RUNS, BACK = 220, 215  # main runs in the history; how far back the alert's run lies


@pytest.fixture(scope="module")
def old_alert(tmp_path_factory):
    """The history and the run id of its one alert, BACK runs before the newest."""
    db = tmp_path_factory.mktemp("trends_window") / "history.duckdb"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "make_synthetic_history.py"),
            "--rows",
            str(RUNS * 240),
            "--gpus",
            "1",
            "--db",
            str(db),
        ],
        cwd=REPO,
        check=True,
        capture_output=True,
        timeout=300,
    )  # 240 cases a run
    with open_write(parse_location(db)) as con:
        assert con.execute("SELECT count(*) FROM series_runs WHERE series_gpu = ?", [H200]).fetchone() == (RUNS,)
        run_id, sha, pool = con.execute(
            "SELECT run_id, commit_sha, series_pool FROM series_runs WHERE series_gpu = ? "
            "ORDER BY series_at DESC, run_id DESC LIMIT 1 OFFSET ?",
            [H200, BACK - 1],
        ).fetchone()
        before, after = con.execute(
            "SELECT median_us, median_us * 1.05 FROM results WHERE run_id = ? AND case_id = ?", [run_id, CASE]
        ).fetchone()
        record_alerts(
            con,
            [
                NewAlert(
                    dedup_key=f"test-old-step:{run_id}",
                    kind="regression",
                    metric="median_us",
                    case_id=CASE,
                    gpu_name=H200,
                    pool=pool,
                    run_id=run_id,
                    commit_sha=sha,
                    baseline_value=before,
                    new_value=after,
                    change_pct=5.0,
                    detail="a step recorded far back in the series",
                )
            ],
        )
    return db, run_id


def test_the_default_window_reaches_an_alert_215_runs_back(old_alert, monkeypatch):
    db, run_id = old_alert
    variant, shape, dtype, _ = CASE.split("/")
    at = open_page(
        db, monkeypatch, "views/trends.py", gpu=H200, variants=variant, shapes=shape, dtype=dtype, causal="0"
    )
    listed = frame_with(at, "alert_id")
    assert list(listed["run_id"]) == [run_id]
    plotted = set(trend_points(trend_charts(at)[0])["run_id"])
    window = at.slider(key="trends_max_runs").value
    assert run_id in plotted, f"the alert's run is not among the {window} newest runs plotted"
    assert window == 220  # back to the alert's run, in tens: not the whole slider's 1000
    assert not [c for c in texts(at, "caption") if "outside the" in c]
