"""The Kernel page's charts, drawn as SVG images the server writes: no chart library in the browser.

The page shows a variant's build report and Nsight Compute metrics over commits and a roofline
under the GPU's measured ceilings. Drawn with plotly they cost a fresh browser about 2 s of the
page's first load (the plotly bundle parsed and compiled, as on the Alerts page:
docs/benchmarks/dashboard.md) against a cold-load target of 2.5 s; they are fixed pictures that
need no zoom, so the server draws them as the Alerts step chart is drawn (app/step_chart.py, with
the parts both share in app/svg_parts.py) and the page shows them with `st.image`, never as markup
(docs/design.md, "Security rules"). Each point's value, commit and run are an SVG <title>.

  - `lines_svg`: several columns of one frame over runs on the commit axis, one colour each
    (PALETTE), with the environment changes marked (app.data.trends.environment_epochs);
  - `roofline_svg`: achieved TFLOP/s against FLOP per DRAM byte, log-log, under the measured
    compute and memory ceilings, one marker series per point label;
  - `bandwidth_svg`: a memory-bound operator's achieved bandwidth per shape under the measured
    copy bandwidth.

Each SVG says what it draws in its attributes, for tests and for anyone reading the page's source:
on the <svg>, `data-chart` (lines, roofline, bandwidth), `data-key` (which chart of the page),
`data-x-type` / `data-y-type` (category, linear or log), `data-y-min` / `data-y-max` and, for
lines, `data-y-range` ("flat": drawn from zero, or "auto"); each series a `data-role="series"`
group with its `data-name`, each point `data-role="point"` with `data-x` and `data-value`; the
roofs (`data-role="roof"`), the environment marks (`data-role="epoch"`, at `data-position` in
category units) and the axes' ticks (`y-tick`, `x-tick`, `x-category`).
"""

from __future__ import annotations

import math

import pandas as pd

from attnwatch.app.data.trends import environment_epochs
from attnwatch.app.svg_parts import (
    Frame,
    attr,
    category_x_axis,
    decades,
    dot_mark,
    legend,
    line_mark,
    log_x_axis,
    log_y_minor,
    num,
    padded,
    plain,
    svg_open,
    text,
    ticks,
    y_axis,
)
from attnwatch.app.ui import short_sha

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
ROOF, EPOCH = "#444", "#9467bd"
NAME_CHARS = 60  # a series' name in the legend and tooltips is cut here
EPOCH_CHARS = 80  # an environment change's label on the chart is cut here (its whole text is its <title>)
# A series whose values span less than this share of their size is drawn from zero: an axis fitted
# to a constant 54,528 would run from 54,527 to 54,529, making nothing look like a step.
FLAT_SPAN = 0.01


def flat_range(values) -> list[float] | None:
    """The y range for values that (nearly) do not move: from 0 to above the largest (to below
    the smallest where all are negative); None when they move, or there are none."""
    finite = [float(v) for v in values if v is not None and not pd.isna(v) and math.isfinite(float(v))]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    size = max(abs(low), abs(high))
    if high - low > FLAT_SPAN * size:
        return None
    if size == 0:
        return [0.0, 1.0]
    return [0.0, high * 1.2] if low >= 0 else [low * 1.2, 0.0] if high <= 0 else [low * 1.2, high * 1.2]


def _frame(width: int, height: int, legend_bottom: float) -> Frame:
    """Room for the legend above the plot, the y ticks and title left, the rotated labels below."""
    return Frame(width, height, left=72, right=16, top=int(legend_bottom) + 22, bottom=64)


def _tip(head: str, row: dict) -> str:
    """A point's <title>: what it is, then its commit and run where the frame has them."""
    commit = f" · commit {short_sha(row['commit_sha'])}" if isinstance(row.get("commit_sha"), str) else ""
    run = f" · run {row['run_id']}" if row.get("run_id") is not None else ""
    return head + commit + run


def _point(cx: float, cy: float, color: str, tip: str, r: float, **data: str) -> str:
    """A marker with its `data-*` (values already escaped or numbers) and its tooltip."""
    extra = "".join(f' data-{key.replace("_", "-")}="{value}"' for key, value in data.items())
    return (
        f'<circle data-role="point"{extra} cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="{color}">'
        f"<title>{text(tip)}</title></circle>"
    )


def lines_svg(
    frame: pd.DataFrame, x: str, columns: list[str], y_title: str, key: str = "", width: int = 900, height: int = 360
) -> str:
    """Several numeric columns of one frame over runs (build report or ncu metrics), one y axis:
    give it columns of one unit only. `x` is the commit axis label column (data.trends'
    `with_commit_axis`), drawn as categories in the frame's order, so runs stand in commit order
    as on Trends. A column absent or without a value is not drawn (its colour stays its own).
    Values that do not move are drawn on an axis from zero (`flat_range`). Environment changes
    are marked where the frame carries the runs' environment fields (`x` is "x", with `x_order`):
    a dotted line just before the run where it changed, named by what changed (from → to)."""
    drawn = [(i, c) for i, c in enumerate(columns) if c in frame and frame[c].notna().any()]
    axis = [str(v) for v in dict.fromkeys(frame[x])] if x in frame else []
    position = {label: i for i, label in enumerate(axis)}
    values = frame[[c for _, c in drawn]].to_numpy(dtype=float).ravel() if drawn else []
    finite = [v for v in values if math.isfinite(v)]
    flat = flat_range(finite)
    if flat:
        y_min, y_max = flat
    else:
        y_min, y_max = padded(min(finite), max(finite)) if finite else (0.0, 1.0)
    entries = [(dot_mark(PALETTE[i % len(PALETTE)], with_line=True), c) for i, c in drawn]
    legend_parts, legend_bottom = legend(entries, width, 14, NAME_CHARS, [c for _, c in drawn])
    box = _frame(width, height, legend_bottom)
    x_at, y_at = box.category_x(len(axis)), box.linear_y(y_min, y_max)
    parts = [
        svg_open(
            box,
            "lines",
            y_title,
            key=key,
            x_type="category",
            y_type="linear",
            y_range="flat" if flat else "auto",
            y_min=num(y_min),
            y_max=num(y_max),
            y_title=y_title,
        ),
        *legend_parts,
        *y_axis(box, ticks(y_min, y_max), y_at, y_title),
    ]
    records = frame.to_dict("records")
    for index, column in drawn:
        color = PALETTE[index % len(PALETTE)]
        segments: list[list[str]] = [[]]
        points = []
        for row in records:
            value = row[column]
            if value is None or pd.isna(value) or not math.isfinite(float(value)):
                segments.append([])  # a gap: the line does not pass through a run without a value
                continue
            label = str(row[x])
            cx, cy = x_at(position[label]), y_at(float(value))
            segments[-1].append(f"{cx:.1f},{cy:.1f}")
            tip = _tip(f"{column} {plain(value)}", row)
            points.append(_point(cx, cy, color, tip, 3.5, x=attr(label), value=num(value)))
        lines = [
            f'<polyline data-role="line" points="{" ".join(s)}" fill="none" stroke="{color}" stroke-width="2"/>'
            for s in segments
            if len(s) > 1
        ]
        parts.append(
            f'<g data-role="series" data-name="{attr(column)}" data-color="{color}">{"".join(lines + points)}</g>'
        )
    if not drawn:
        parts.append(
            f'<text data-role="empty" x="{box.left + box.plot_w / 2:.0f}" y="{box.top + box.plot_h / 2:.0f}" '
            'text-anchor="middle" font-size="12" fill="#777">no values to draw</text>'
        )
    if x == "x" and "x_order" in frame:
        parts += _epochs(box, environment_epochs(frame), position, x_at)
    parts += category_x_axis(box, axis, x_at, "commit (in commit order)")
    parts.append("</svg>")
    return "".join(parts)


def _epochs(box: Frame, epochs: pd.DataFrame, position: dict[str, int], x_at) -> list[str]:
    """A dotted line between the commit before and the run where the environment changed, with
    "env: what changed" at its top (staggered, so that close marks stay readable)."""
    out = []
    for k, row in enumerate(epochs.itertuples()):
        if row.x not in position:
            continue
        at = position[row.x] - 0.5
        x = x_at(at)
        label = "env: " + str(row.label)
        right = x > box.left + box.plot_w * 0.6  # near the right edge the label runs leftwards
        out.append(
            f'<g data-role="epoch" data-position="{num(at)}" data-commit="{attr(row.x)}" data-run="{attr(row.run_id)}" '
            f'data-label="{attr(label)}"><title>{text(label)}</title>'
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{box.top}" y2="{box.base}" stroke="{EPOCH}" stroke-width="1.5" '
            f'stroke-dasharray="2 3"/>'
            f'<text data-role="epoch-label" x="{x - 4 if right else x + 4:.1f}" y="{box.top + 11 + 12 * (k % 3)}" '
            f'text-anchor="{"end" if right else "start"}" font-size="10" fill="{EPOCH}">{text(label, EPOCH_CHARS)}</text>'
            "</g>"
        )
    return out


def _roof_legend(ceiling_label: str, groups: list) -> tuple[list[str], float]:
    """The legend of a chart under a roof: the roof's dashed line, then one marker per point label."""
    entries = [(line_mark(ROOF, 2, "6 4"), ceiling_label)]
    entries += [(dot_mark(PALETTE[i % len(PALETTE)]), str(label)) for i, (label, _) in enumerate(groups)]
    return legend(entries, 900, 14, NAME_CHARS + 40, [ceiling_label, *(str(label) for label, _ in groups)])


def roofline_svg(points: pd.DataFrame, peak_tflops: float, bandwidth_tbps: float, ceiling_label: str) -> str:
    """Achieved TFLOPS against arithmetic intensity (FLOP/byte of DRAM traffic), log-log, under two roofs.

    The roofs are min(peak, bandwidth × intensity) with both ceilings *measured* (the caller
    passes them with their provenance in `ceiling_label`). `points` columns: label, shape_id,
    arithmetic_intensity, achieved_tflops, run_id, optionally commit_sha. Both axes are labelled
    once per decade, in plain numbers (1, 10, 100, 1,000).
    """
    finite = points[(points["arithmetic_intensity"] > 0) & (points["achieved_tflops"] > 0)]
    xs, ys = finite["arithmetic_intensity"].astype(float).tolist(), finite["achieved_tflops"].astype(float).tolist()
    lo, hi = min([1.0, *xs]) / 2, max([1e4, *xs]) * 2
    ridge = peak_tflops / bandwidth_tbps  # TFLOP/s ÷ TB/s = FLOP/byte
    y_lo, y_hi = min([bandwidth_tbps * lo, *ys]) / 1.5, max([peak_tflops, *ys]) * 1.5
    groups = list(finite.groupby("label", sort=True))
    legend_parts, legend_bottom = _roof_legend(ceiling_label, groups)
    box = Frame(900, 460, left=72, right=16, top=int(legend_bottom) + 22, bottom=48)
    x_at, y_at = box.log_x(lo, hi), box.log_y(y_lo, y_hi)
    title = "achieved TFLOP/s"
    parts = [
        svg_open(
            box,
            "roofline",
            f"roofline: {title} against arithmetic intensity",
            key="roofline_chart",
            x_type="log",
            y_type="log",
            x_min=num(lo),
            x_max=num(hi),
            y_min=num(y_lo),
            y_max=num(y_hi),
            y_title=title,
        ),
        *legend_parts,
        *y_axis(box, decades(y_lo, y_hi), y_at, title),
        *log_y_minor(box, y_lo, y_hi, y_at),
        *log_x_axis(box, lo, hi, x_at, "arithmetic intensity (FLOP per DRAM byte)"),
    ]
    knee = min(max(ridge, lo), hi)
    roof = [(lo, min(peak_tflops, bandwidth_tbps * lo)), (knee, min(peak_tflops, bandwidth_tbps * knee))]
    roof.append((hi, min(peak_tflops, bandwidth_tbps * hi)))
    parts.append(
        f'<polyline data-role="roof" data-name="{attr(ceiling_label)}" data-peak="{num(peak_tflops)}" '
        f'data-bandwidth="{num(bandwidth_tbps)}" data-ridge="{num(ridge)}" '
        f'points="{" ".join(f"{x_at(x):.1f},{y_at(y):.1f}" for x, y in roof)}" fill="none" stroke="{ROOF}" '
        f'stroke-width="2" stroke-dasharray="6 4"><title>{text(ceiling_label)}</title></polyline>'
    )
    for index, (label, group) in enumerate(groups):
        color = PALETTE[index % len(PALETTE)]
        circles = []
        for row in group.to_dict("records"):
            x, y = float(row["arithmetic_intensity"]), float(row["achieved_tflops"])
            tip = _tip(f"{label}: {plain(y)} TFLOP/s at {plain(x)} FLOP/B · {row['shape_id']}", row)
            circles.append(_point(x_at(x), y_at(y), color, tip, 5, x=num(x), value=num(y), shape=attr(row["shape_id"])))
        parts.append(f'<g data-role="series" data-name="{attr(label)}" data-color="{color}">{"".join(circles)}</g>')
    parts.append("</svg>")
    return "".join(parts)


def bandwidth_svg(points: pd.DataFrame, bandwidth_tbps: float, ceiling_label: str) -> str:
    """A memory-bound operator's roofline: achieved DRAM bandwidth (its byte model's bytes over
    the median) per shape, under the *measured* copy bandwidth (the caller passes it with its
    provenance in `ceiling_label`), on an axis from zero. `points` columns: label, shape_id,
    achieved_tbps, run_id, optionally commit_sha. Points of several labels at one shape sit side
    by side in its slot."""
    shapes = [str(s) for s in dict.fromkeys(points["shape_id"])]
    groups = list(points.groupby("label", sort=True))
    values = [float(v) for v in points["achieved_tbps"] if math.isfinite(float(v))]
    y_min, y_max = 0.0, max([bandwidth_tbps, *values]) * 1.1
    legend_parts, legend_bottom = _roof_legend(ceiling_label, groups)
    box = _frame(900, 420, legend_bottom)
    x_at, y_at = box.category_x(len(shapes)), box.linear_y(y_min, y_max)
    title = "achieved DRAM bandwidth (TB/s)"  # bytes of the byte model / median: the caption says so
    parts = [
        svg_open(
            box,
            "bandwidth",
            title,
            key="bandwidth_chart",
            x_type="category",
            y_type="linear",
            y_min=num(y_min),
            y_max=num(y_max),
            y_title=title,
        ),
        *legend_parts,
        *y_axis(box, ticks(y_min, y_max), y_at, title),
    ]
    y = y_at(bandwidth_tbps)
    parts.append(
        f'<line data-role="roof" data-name="{attr(ceiling_label)}" data-value="{num(bandwidth_tbps)}" '
        f'x1="{box.left}" x2="{box.width - box.right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{ROOF}" stroke-width="2" '
        f'stroke-dasharray="6 4"><title>{text(ceiling_label)}</title></line>'
    )
    slot = box.plot_w / max(len(shapes), 1)
    shift = min(10.0, slot * 0.6 / max(len(groups), 1))
    for index, (label, group) in enumerate(groups):
        color = PALETTE[index % len(PALETTE)]
        offset = (index - (len(groups) - 1) / 2) * shift
        circles = []
        for row in group.to_dict("records"):
            value, shape = float(row["achieved_tbps"]), str(row["shape_id"])
            share = 100 * value / bandwidth_tbps
            tip = _tip(f"{label}: {plain(value)} TB/s ({share:.1f}% of the roof) · {shape}", row)
            circles.append(
                _point(x_at(shapes.index(shape)) + offset, y_at(value), color, tip, 5, x=attr(shape), value=num(value))
            )
        parts.append(f'<g data-role="series" data-name="{attr(label)}" data-color="{color}">{"".join(circles)}</g>')
    parts += category_x_axis(box, shapes, x_at, "shape")
    parts.append("</svg>")
    return "".join(parts)
