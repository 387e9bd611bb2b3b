"""Honest numbers wherever a latency is shown: unconverged, throttled and dispatch-bound cases are
marked and explained, the graph-replay time stands beside the event time, TFLOPS and gap say
which time they use, and a correctness check that never ran reads "not run"."""

from __future__ import annotations

import pandas as pd
import pytest

from attnwatch.app.data.quality import correctness_text, dispatch_ratio, marks
from app_history import DISPATCH_CASE, DISPATCH_GRAPH_US, H100, H200, NOISY_CASE, build_push_history
from test_app_pages import frame_with, open_page, texts, trend_charts, trend_points


@pytest.fixture(scope="module")
def push_history(tmp_path_factory):
    work = tmp_path_factory.mktemp("numbers")
    db = work / "history.duckdb"
    return db, build_push_history(db, work / "bundles")


def test_marks_from_what_the_harness_stored():
    frame = pd.DataFrame(
        {
            "median_us": [37.7, 20.0, 100.0, 10.0, None],
            "graph_median_us": [11.5, None, None, 9.0, None],
            "converged": [False, True, True, True, None],
            "rel_spread": [0.69, 0.004, 0.003, 0.01, None],
            "throttled_samples": [0, 0, 12, 0, 0],
            "n_samples": [300, 300, 300, 300, None],
        }
    )
    assert marks(frame).tolist() == [
        "unconverged (300 samples, IQR/median 69.0%); dispatch-bound (graph 11.5 µs)",
        "",
        "throttled (12 of 300 samples)",
        "",
        "",
    ]  # 10 µs by events over 9 µs by graph replay: under the threshold
    assert 10.0 / 9.0 < dispatch_ratio() <= 37.7 / 11.5
    assert [correctness_text(v) for v in (True, False, None, pd.NA, float("nan"))] == [
        "pass",
        "FAIL",
        "not run",
        "not run",
        "not run",
    ]


def test_overview_marks_and_explains_and_shows_graph_time(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/overview.py", gpu=H200)
    cases = frame_with(at, "marks").set_index("case_id")
    assert cases.loc[DISPATCH_CASE, "graph_median_us"] == pytest.approx(DISPATCH_GRAPH_US)
    assert cases.loc[DISPATCH_CASE, "marks"].startswith("dispatch-bound")
    caption = next(c for c in texts(at, "caption") if "dispatch-bound:" in c)
    assert "graph replay" in caption.lower() and "CUDA-event median" in caption  # what TFLOPS and gap use
    assert cases.iloc[0]["correctness"] == "FAIL"  # what needs a look comes first


def test_overview_says_not_run_when_correctness_never_ran(push_history, monkeypatch):
    db, _ = push_history
    at = open_page(db, monkeypatch, "views/overview.py", gpu=H100)
    cases = frame_with(at, "marks")
    assert set(cases["correctness"]) == {"not run"}
    assert [m.value for m in at.metric if m.label == "correctness failures"] == ["not run"]
    assert cases.set_index("case_id").loc[NOISY_CASE, "marks"] == "unconverged (50 samples, IQR/median 8.0%)"
    assert any("unconverged:" in c for c in texts(at, "caption"))


def test_compare_run_and_trends_mark_the_same_cases(push_history, monkeypatch):
    db, ids = push_history
    at = open_page(db, monkeypatch, "views/compare.py", gpu=H200, base=ids["h200_base"], head=ids["h200_head"])
    table = frame_with(at, "head_marks").set_index("case_id")
    assert table.loc[DISPATCH_CASE, "head_graph_median_us"] == pytest.approx(DISPATCH_GRAPH_US)
    assert table.loc[DISPATCH_CASE, "head_marks"].startswith("dispatch-bound")
    run = open_page(db, monkeypatch, "views/run.py", run=ids["h200_head"])
    cases = frame_with(run, "marks").set_index("case_id")
    assert cases.loc[DISPATCH_CASE, "marks"].startswith("dispatch-bound")
    trend = open_page(
        db,
        monkeypatch,
        "views/trends.py",
        gpu=H200,
        variants="sdpa_flash",
        shapes="l4_mission",
        dtype="fp16",
        causal="0",
    )
    (spec,) = trend_charts(trend)
    (name,) = set(trend_points(spec)["series"])
    line = trend_points(spec, name)
    assert list(line["hollow"][-2:]) == [True, True] and not line["hollow"][:-2].any()
    assert "dispatch-bound" in line["notes"].iloc[-1]  # said on hover
    assert any("Hollow points (2)" in c for c in texts(trend, "caption"))
