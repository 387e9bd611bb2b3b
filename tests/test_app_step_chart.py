"""The Alerts page's step chart, drawn by the server as SVG (app/step_chart.py): what it draws, read
back from its attributes, and text from the history never read as markup."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from attnwatch.app.step_chart import step_svg
from svg_charts import role as _role, tip


def _trend(values, commits=None) -> pd.DataFrame:
    commits = commits or [f"{i:07x}" for i in range(len(values))]
    return pd.DataFrame(
        {
            "x": commits,
            "x_order": range(len(values)),
            "value": values,
            "run_id": range(100, 100 + len(values)),
            "commit_sha": [c + "0" * 33 for c in commits],
        }
    )


def _chart(*args, **kwargs) -> ET.Element:
    return ET.fromstring(step_svg(*args, **kwargs))


def test_levels_band_step_and_points_are_drawn_where_the_alert_says():
    trend = _trend([10.0, 10.1, 9.9, 12.0, 12.1])
    chart = _chart(trend, "0000003", 10.0, 12.05, 0.02, "median latency (µs), CUDA events", "an alert")
    (band,) = _role(chart, "band")
    assert float(band.get("data-low")) == pytest.approx(9.8) and float(band.get("data-high")) == pytest.approx(10.2)
    (before,), (after,), (step,) = _role(chart, "before"), _role(chart, "after"), _role(chart, "step")
    assert before.get("data-commits").split(",") == ["0000000", "0000001", "0000002"]
    assert after.get("data-commits").split(",") == ["0000003", "0000004"]
    assert float(after.get("data-value")) == pytest.approx(12.05) and step.get("data-commit") == "0000003"
    # the step line sits between the last commit before and the first after; a larger value is
    # drawn higher up (a smaller y)
    assert float(before.get("x2")) < float(step.get("x1")) < float(after.get("x1"))
    assert float(after.get("y1")) < float(before.get("y1"))
    points = _role(chart, "point")
    assert [p.get("data-x") for p in points] == trend["x"].tolist()
    tips = [tip(p) for p in points]
    assert tips[3] == "12 · commit 0000003000 · run 103"
    (title,) = _role(chart, "y-title")
    assert title.text == "median latency (µs), CUDA events"


def test_a_step_at_the_first_commit_or_outside_the_series_draws_one_level_and_no_step():
    trend = _trend([12.0, 12.1, 11.9])
    first = _chart(trend, "0000000", 10.0, 12.0, 0.02, "µs", "t")
    assert not _role(first, "before") and len(_role(first, "after")) == 1 and not _role(first, "step")
    outside = _chart(trend, "fffffff", 12.0, 14.0, 0.02, "µs", "t")
    assert len(_role(outside, "before")) == 1 and not _role(outside, "after") and not _role(outside, "step")


def test_one_point_and_missing_values_draw_no_line_through_nothing():
    single = _chart(_trend([5.0]), "0000000", 4.0, 5.0, 0.03, "µs", "t")
    assert len(_role(single, "point")) == 1 and not _role(single, "value")
    gaps = _chart(_trend([5.0, math.nan, 5.1]), "0000002", 5.0, 5.1, 0.03, "µs", "t")
    assert len(_role(gaps, "point")) == 2
    flat = _chart(_trend([7.0, 7.0, 7.0]), "0000001", 7.0, 7.0, 0.0, "µs", "t")
    assert all(math.isfinite(float(c.get("cy"))) for c in _role(flat, "point"))


def test_text_from_the_history_is_text_never_markup():
    hostile = '<script>alert(1)</script> "quoted" & <b>bold</b>'
    svg = step_svg(_trend([1.0, 2.0], ["<i>a</i>", "b&c"]), "b&c", 1.0, 2.0, 0.02, hostile, hostile)
    chart = ET.fromstring(svg)  # well-formed: every name escaped
    assert "<script>" not in svg and "<b>" not in svg and "<i>" not in svg
    assert _role(chart, "y-title")[0].text == hostile
    assert chart.get("aria-label") == hostile
    assert [p.get("data-x") for p in _role(chart, "point")] == ["<i>a</i>", "b&c"]
    # a control character (which XML refuses) in a case id leaves the picture well-formed
    assert _role(_chart(_trend([1.0, 2.0]), "0000001", 1.0, 2.0, 0.02, "µs", "case\x01\x1b[31m"), "title")[0].text


def test_a_long_title_is_cut_and_kept_whole_for_screen_readers():
    title = "x" * 300
    chart = _chart(_trend([1.0, 2.0]), "0000001", 1.0, 2.0, 0.02, "µs", title)
    (shown,) = _role(chart, "title")
    assert len(shown.text) == 120 and shown.text.endswith("…") and chart.get("aria-label") == title
