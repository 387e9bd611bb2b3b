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
from test_app_pages import frame_with, open_page, plotly_specs, texts
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


def lines(spec):
    return [t for t in spec["data"] if t.get("mode") == "lines+markers"]


def test_ten_variants_open_on_a_log_axis(team_db, monkeypatch):
    every = ",".join(VARIANTS)
    at = open_page(
        team_db, monkeypatch, "views/trends.py", gpu=H200, variants=every, shapes="b4_h16_s2k", dtype="fp16", causal="0"
    )
    (spec,) = plotly_specs(at)
    assert len(lines(spec)) == 10
    assert spec["layout"]["yaxis"]["type"] == "log" and at.toggle(key="trends_log").value
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
    assert plotly_specs(near)[0]["layout"]["yaxis"]["type"] == "linear"
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
    assert plotly_specs(chosen)[0]["layout"]["yaxis"]["type"] == "linear"


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
    points = [
        (symbol, custom[5])
        for line in lines(plotly_specs(at)[0])
        for symbol, custom in zip(line["marker"]["symbol"], line["customdata"])
    ]
    unconverged = [
        s for s, note in points if "unconverged" in note and "throttled" not in note and "dispatch" not in note
    ]
    doubted = [s for s, note in points if "throttled" in note or "dispatch-bound" in note]
    assert unconverged and set(unconverged) == {"circle"}
    assert set(doubted) <= {"circle-open"}
    assert sum(s == "circle" for s, _ in points) > 0.9 * len(points)  # a normal point is solid
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
    plotted = {custom[0] for line in lines(plotly_specs(at)[0]) for custom in line["customdata"]}
    assert set(listed["run_id"]) <= plotted, (
        at.slider(key="trends_max_runs").value,
        sorted(set(listed["run_id"]) - plotted),
    )
    assert not [c for c in texts(at, "caption") if "outside the" in c]
