"""Trends on a team-scale history (the synthetic generator: ten variants, ~1,080 runs on one GPU,
detection run): ten variants open on a log axis instead of flattening the fast ones onto the
floor, a point is hollow only when its number is not the kernel's time (an unconverged median
is drawn solid, its note on hover), and the default window reaches back to every alert listed
under the chart."""

from __future__ import annotations

import pytest

from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.detection.alerts import record_alerts
from attnwatch.history.detection.scan import scan_history
from attnwatch.history.store.db import open_read, open_write
from attnwatch.scripts.make_synthetic_history import VARIANTS, main as make_synthetic
from test_app_pages import frame_with, open_page, texts, trend_charts, trend_points
from attnwatch.history.store.location import parse_location

H200 = "NVIDIA H200"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def team_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("trends_scale") / "history.duckdb"
    assert make_synthetic(["--rows", "150000", "--gpus", "1", "--db", str(db)]) == 0
    with open_write(parse_location(db)) as con:  # what `attnwatch detect` does
        record_alerts(con, scan_history(con, load_thresholds).findings)
    return db


def y_scale(at) -> str:
    (spec,) = trend_charts(at)
    return spec["layers"]["lines"]["encoding"]["y"]["scale"]["type"]


def test_ten_variants_open_on_a_log_axis(team_db, monkeypatch):
    every = ",".join(VARIANTS)
    at = open_page(
        team_db, monkeypatch, "views/trends.py", gpu=H200, variants=every, shapes="b4_h16_s2k", dtype="fp16", causal="0"
    )
    (spec,) = trend_charts(at)
    assert trend_points(spec)["series"].nunique() == 10
    assert y_scale(at) == "log" and at.toggle(key="trends_log").value
    # Two variants a few percent apart keep a linear axis; the reader's choice in the URL stands.
    near = open_page(
        team_db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants="sdpa,sdpa_flash",
        shapes="b4_h16_s2k",
        dtype="fp16",
        causal="0",
    )
    assert y_scale(near) == "linear"
    chosen = open_page(
        team_db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants=every,
        shapes="b4_h16_s2k",
        dtype="fp16",
        causal="0",
        log="0",
    )
    assert y_scale(chosen) == "linear"


def test_an_unconverged_point_is_solid_and_a_throttled_one_hollow(team_db, monkeypatch):
    at = open_page(
        team_db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants=",".join(VARIANTS),
        shapes="b4_h16_s2k",
        dtype="fp16",
        causal="0",
    )
    (spec,) = trend_charts(at)
    fill = spec["layers"]["points"]["encoding"]["fill"]
    assert fill["condition"] == {"test": "datum.hollow", "value": "#ffffff"}  # a hollow point: white inside
    points = list(zip(trend_points(spec)["hollow"], trend_points(spec)["notes"]))
    unconverged = [
        h for h, note in points if "unconverged" in note and "throttled" not in note and "dispatch" not in note
    ]
    doubted = [h for h, note in points if "throttled" in note or "dispatch-bound" in note]
    assert unconverged and set(unconverged) == {False}
    assert set(doubted) <= {True}
    assert sum(not h for h, _ in points) > 0.9 * len(points)  # a normal point is solid
    assert any("solid point(s) carry a note on hover" in c and "unconverged:" in c for c in texts(at, "caption"))


def test_the_default_window_holds_every_alert_listed(team_db, monkeypatch):
    with open_read(parse_location(team_db)) as con:  # the case of the oldest alert detection raised
        (case,) = con.execute(
            "SELECT case_id FROM series_alerts WHERE kind <> 'correctness' ORDER BY run_started_at, case_id LIMIT 1"
        ).fetchone()
    variant, shape, dtype, mode = case.split("/")
    at = open_page(
        team_db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants=variant,
        shapes=shape,
        dtype=dtype,
        causal="1" if mode == "causal" else "0",
    )
    listed = frame_with(at, "alert_id")
    assert not listed.empty
    plotted = set(trend_points(trend_charts(at)[0])["run_id"])
    assert set(listed["run_id"]) <= plotted, (
        at.slider(key="trends_max_runs").value,
        sorted(set(listed["run_id"]) - plotted),
    )
    assert not [c for c in texts(at, "caption") if "outside the" in c]
