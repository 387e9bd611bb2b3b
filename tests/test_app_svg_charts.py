"""The charts the server draws as SVG images (app/svg_parts.py, app/kernel_charts.py): what they
draw, read back from their attributes; text from the history never read as markup and always
well-formed XML; a flat series drawn from zero; a log axis labelled once per decade in plain
numbers; environment changes marked between two commits."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from attnwatch.app.kernel_charts import PALETTE, bandwidth_svg, flat_range, lines_svg, roofline_svg
from attnwatch.app.svg_parts import decades, minor_ticks, plain, ticks
from svg_charts import role, series, tip, values

HOSTILE = '<script>alert(1)</script> "quoted" & <b>bold</b>\x01\x1b[31m'
SHOWN = '<script>alert(1)</script> "quoted" & <b>bold</b>[31m'  # control characters removed, nothing else


def _runs(**columns) -> pd.DataFrame:
    n = len(next(iter(columns.values())))
    commits = [f"{i:07x}" for i in range(n)]
    return pd.DataFrame(
        {
            "x": commits,
            "x_order": range(n),
            "run_id": [f"run-{i}" for i in range(n)],
            "commit_sha": [c + "0" * 33 for c in commits],
            **columns,
        }
    )


def _roofline(points: pd.DataFrame | None = None) -> ET.Element:
    points = (
        points
        if points is not None
        else pd.DataFrame(
            {
                "label": ["sdpa · fp16", "sdpa · fp16 · causal", "triton_fa2 · fp16"],
                "shape_id": ["s1", "s1", "s2"],
                "arithmetic_intensity": [123.0, 250.0, 40.0],
                "achieved_tflops": [45.0, 300.0, 100.0],
                "run_id": ["r1", "r2", "r3"],
                "commit_sha": ["abcdef1234567", "abcdef1234567", None],
            }
        )
    )
    return ET.fromstring(roofline_svg(points, 666.6, 4.22, "measured roof: 666.6 TFLOP/s, 4.22 TB/s"))


def test_ticks_are_round_values_inside_the_range():
    assert ticks(1812.4, 1925.0) == [1820.0, 1840.0, 1860.0, 1880.0, 1900.0, 1920.0]
    small = ticks(0.0123, 0.0191)
    assert small == pytest.approx([0.013, 0.014, 0.015, 0.016, 0.017, 0.018, 0.019])
    assert all(0.0123 <= t <= 0.0191 for t in small)


def test_numbers_are_plain_never_in_exponent_form():
    assert [plain(v) for v in (54528, 1292.4, 12.0, 0.0123, 0.1, 1e4, 157.25)] == [
        "54,528",
        "1,292",
        "12",
        "0.0123",
        "0.1",
        "10,000",
        "157.2",
    ]


def test_decades_and_their_minor_ticks():
    assert decades(0.05, 2e4) == pytest.approx([0.1, 1, 10, 100, 1000, 10000])
    assert decades(1, 1000) == pytest.approx([1, 10, 100, 1000])
    minors = minor_ticks(0.5, 30)
    assert minors[0] == 0.5 and 2 in minors and 30 in minors and all(0.5 <= m <= 30 for m in minors)
    assert not any(math.log10(m).is_integer() for m in minors)


def test_a_flat_series_is_drawn_from_zero_and_a_moving_one_is_autoranged():
    assert flat_range([54528] * 5) == [0.0, 54528 * 1.2]
    assert flat_range([157, 157, 128]) is None
    assert flat_range([0, 0]) == [0.0, 1.0]
    assert flat_range([-4.0, -4.01]) == [pytest.approx(-4.812), 0.0]
    assert flat_range([math.nan, None]) is None
    constant = ET.fromstring(lines_svg(_runs(smem=[54528.0] * 4), "x", ["smem"], "bytes"))
    assert constant.get("data-y-range") == "flat"
    assert (float(constant.get("data-y-min")), float(constant.get("data-y-max"))) == (0.0, 54528 * 1.2)
    labels = [t.text for t in role(constant, "y-tick")]
    assert labels[0] == "0" and "50,000" in labels and not any("e" in t for t in labels)
    moving = ET.fromstring(lines_svg(_runs(regs=[157.0, 157.0, 128.0]), "x", ["regs"], "registers"))
    assert moving.get("data-y-range") == "auto"
    assert 120 < float(moving.get("data-y-min")) < 128 and 157 < float(moving.get("data-y-max")) < 165
    # a larger value is drawn higher up (a smaller y)
    points = role(moving, "point")
    assert float(points[0].get("cy")) < float(points[2].get("cy"))


def test_lines_keep_commit_order_colours_and_say_each_point():
    frame = _runs(spill_store_bytes=[0.0, 0.0, 16.0], spill_load_bytes=[0.0, math.nan, 8.0])
    chart = ET.fromstring(
        lines_svg(frame, "x", ["missing", "spill_store_bytes", "spill_load_bytes"], "bytes", key="spill_chart")
    )
    assert (chart.get("data-chart"), chart.get("data-key"), chart.get("data-x-type")) == (
        "lines",
        "spill_chart",
        "category",
    )
    assert [c.get("data-label") for c in role(chart, "x-category")] == frame["x"].tolist()
    assert values(chart) == {"spill_store_bytes": [0, 0, 16], "spill_load_bytes": [0, 8]}
    groups = {g.get("data-name"): g.get("data-color") for g in role(chart, "series")}
    assert groups == {"spill_store_bytes": PALETTE[1], "spill_load_bytes": PALETTE[2]}  # a column's colour is its own
    assert [e.get("data-name") for e in role(chart, "legend")] == ["spill_store_bytes", "spill_load_bytes"]
    assert tip(series(chart)["spill_store_bytes"][2]) == "spill_store_bytes 16 · commit 0000002000 · run run-2"
    # the run without a value breaks the line: two single points draw no line through nothing
    loads = next(g for g in role(chart, "series") if g.get("data-name") == "spill_load_bytes")
    assert not role(loads, "line")
    assert len(role(next(g for g in role(chart, "series") if g.get("data-name") == "spill_store_bytes"), "line")) == 1


def test_no_values_draw_an_empty_frame_that_says_so():
    chart = ET.fromstring(lines_svg(_runs(a=[math.nan, math.nan]), "x", ["a", "b"], "value"))
    assert not role(chart, "series") and role(chart, "empty")


def test_environment_changes_are_marked_between_two_commits():
    frame = _runs(
        registers_per_thread=[128.0] * 5,
        torch_version=["2.11.0", "2.11.0", None, "2.12.0", "2.12.0"],
        driver_version=["580.65"] * 4 + ["590.10"],
    )
    chart = ET.fromstring(lines_svg(frame, "x", ["registers_per_thread"], "registers"))
    marks = role(chart, "epoch")
    assert [float(m.get("data-position")) for m in marks] == [2.5, 3.5]
    assert [m.get("data-commit") for m in marks] == ["0000003", "0000004"]
    assert [m.get("data-label") for m in marks] == ["env: torch 2.11.0 → 2.12.0", "env: driver 580.65 → 590.10"]
    # only the commit axis of runs ("x" with its order) carries the runs' environment
    assert not role(
        ET.fromstring(lines_svg(frame.drop(columns="x_order"), "x", ["registers_per_thread"], "r")), "epoch"
    )


def test_the_roofline_is_log_log_under_both_roofs_labelled_once_per_decade():
    chart = _roofline()
    assert (chart.get("data-chart"), chart.get("data-x-type"), chart.get("data-y-type")) == ("roofline", "log", "log")
    (roof,) = role(chart, "roof")
    assert (float(roof.get("data-peak")), float(roof.get("data-bandwidth"))) == (666.6, 4.22)
    assert float(roof.get("data-ridge")) == pytest.approx(666.6 / 4.22)
    xs = [float(p.split(",")[0]) for p in roof.get("points").split()]
    ys = [float(p.split(",")[1]) for p in roof.get("points").split()]
    assert xs == sorted(xs) and ys[0] > ys[1] == ys[2]  # rising under the bandwidth, then flat at the peak
    assert list(series(chart)) == ["sdpa · fp16", "sdpa · fp16 · causal", "triton_fa2 · fp16"]
    legend = [e.get("data-name") for e in role(chart, "legend")]
    assert legend == ["measured roof: 666.6 TFLOP/s, 4.22 TB/s", *series(chart)]
    (point,) = series(chart)["sdpa · fp16"]
    assert (float(point.get("data-x")), float(point.get("data-value"))) == (123.0, 45.0)
    assert tip(point) == "sdpa · fp16: 45 TFLOP/s at 123 FLOP/B · s1 · commit abcdef1234 · run r1"
    assert tip(series(chart)["triton_fa2 · fp16"][0]).endswith("· s2 · run r3")  # no commit stored: none said
    for axis in ("x", "y"):
        low, high = float(chart.get(f"data-{axis}-min")), float(chart.get(f"data-{axis}-max"))
        labelled = [float(t.get("data-value")) for t in role(chart, f"{axis}-tick")]
        assert labelled == pytest.approx(decades(low, high)) and len(set(labelled)) == len(labelled) >= 2
    assert [t.text for t in role(chart, "x-tick")] == ["1", "10", "100", "1,000", "10,000"]
    # a point at a low intensity widens the axis by whole decades, labelled in plain numbers
    low = _roofline(pd.DataFrame({**_roofline_row(), "arithmetic_intensity": [0.05]}))
    assert [t.text for t in role(low, "x-tick")][:3] == ["0.1", "1", "10"]


def _roofline_row() -> dict:
    return {"label": ["a"], "shape_id": ["s"], "achieved_tflops": [0.2], "run_id": ["r"]}


def test_the_bandwidth_chart_draws_each_shape_under_the_roof_from_zero():
    points = pd.DataFrame(
        {
            "label": ["rmsnorm_triton · fp16 · fwd", "rmsnorm_torch · fp16 · fwd", "rmsnorm_triton · fp16 · fwd"],
            "shape_id": ["rms_a", "rms_a", "rms_b"],
            "achieved_tbps": [3.1, 2.5, 3.5],
            "run_id": ["r1", "r2", "r3"],
        }
    )
    chart = ET.fromstring(bandwidth_svg(points, 4.2, "measured roof: 4.20 TB/s copy"))
    assert (chart.get("data-chart"), chart.get("data-x-type")) == ("bandwidth", "category")
    assert float(chart.get("data-y-min")) == 0 and float(chart.get("data-y-max")) > 4.2
    (roof,) = role(chart, "roof")
    assert float(roof.get("data-value")) == 4.2 and roof.get("stroke-dasharray")
    assert [c.get("data-label") for c in role(chart, "x-category")] == ["rms_a", "rms_b"]
    triton, torch = (series(chart)[name] for name in ("rmsnorm_triton · fp16 · fwd", "rmsnorm_torch · fp16 · fwd"))
    assert [(p.get("data-x"), float(p.get("data-value"))) for p in triton] == [("rms_a", 3.1), ("rms_b", 3.5)]
    assert float(triton[0].get("cx")) != float(torch[0].get("cx"))  # two points of one shape side by side
    assert tip(torch[0]) == "rmsnorm_torch · fp16 · fwd: 2.5 TB/s (59.5% of the roof) · rms_a · run r2"


def test_text_from_the_history_is_text_never_markup():
    frame = _runs(value=[1.0, 2.0]).assign(x=["<i>a</i>", HOSTILE], run_id=[HOSTILE, "r"])
    svgs = [
        lines_svg(frame.rename(columns={"value": HOSTILE}), "x", [HOSTILE], HOSTILE, key=HOSTILE),
        roofline_svg(
            pd.DataFrame(
                {
                    "label": [HOSTILE],
                    "shape_id": [HOSTILE],
                    "arithmetic_intensity": [10.0],
                    "achieved_tflops": [5.0],
                    "run_id": [HOSTILE],
                    "commit_sha": [HOSTILE],
                }
            ),
            100.0,
            1.0,
            HOSTILE,
        ),
        bandwidth_svg(
            pd.DataFrame({"label": [HOSTILE], "shape_id": [HOSTILE], "achieved_tbps": [1.0], "run_id": [HOSTILE]}),
            2.0,
            HOSTILE,
        ),
    ]
    for svg in svgs:
        chart = ET.fromstring(svg)  # well-formed: every name escaped, control characters removed
        assert "<script>" not in svg and "<b>" not in svg and "<i>" not in svg and "\x01" not in svg
        (name,) = series(chart)
        assert name == SHOWN
        assert all(SHOWN in tip(p) for p in role(chart, "point"))
    lines = ET.fromstring(svgs[0])
    assert lines.get("data-key") == SHOWN and lines.get("aria-label") == SHOWN
    assert role(lines, "y-title")[0].text == SHOWN
    assert [c.get("data-label") for c in role(lines, "x-category")] == ["<i>a</i>", SHOWN]
