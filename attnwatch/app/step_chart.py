"""One alert's step on its series, drawn as an SVG image the server writes: no chart library in the browser.

The Alerts page shows one small, fixed picture per alert: the values over commits, the level
before and after the step (detection's medians), the threshold band (before × (1 ± min_effect))
and where the step sits. Drawn with plotly it cost the page's first load in a fresh browser
about 2 s (the plotly bundle parsed and compiled) and each later load about 0.5 s, on the 2-core
CI machine with the 1M history: Alerts cold 5.28 s with the plotly chart and 3.14 s without
it, warm 1.59 s and 1.09 s (scripts/bench_dashboard.py --browser --pages alerts --servers 2,
2026-12-06; docs/benchmarks/dashboard.md). The picture needs no zoom: Trends holds the
interactive chart of the same series, one link away.

The page shows it as an image (`st.image`, a data URL), never as markup in the page: text from
the history (case ids, commit labels) is escaped here as well, but an image cannot run or link
anything whatever it holds (docs/design.md, "Security rules": no page renders markup from
data). Each point's value, commit and run are an SVG <title> inside it, for anyone who opens
the image on its own.

The SVG says what it draws in its attributes, for tests and for anyone reading the page's
source: `data-role` on each part (title, legend, band, value, point, before, after, step,
y-title), the band's and the levels' values, and the commits each level covers. Its frame, axes,
legend and text escaping are the parts every server-drawn chart shares (app/svg_parts.py).
"""

from __future__ import annotations

import math

import pandas as pd

from attnwatch.app.svg_parts import (
    Frame,
    attr,
    category_x_axis,
    legend,
    line_mark,
    padded,
    plain,
    svg_open,
    text,
    ticks,
    y_axis,
)
from attnwatch.app.ui import short_sha

FRAME = Frame(900, 380, left=72, right=16, top=78, bottom=64)  # room for the y ticks, the title and legend, the commits
VALUE, BEFORE, AFTER, BAND = "#1f77b4", "#444444", "#d62728", "rgba(120,120,120,0.18)"
TITLE_CHARS = 120  # a longer title is cut with an ellipsis (its whole text stays the aria-label)


def step_svg(
    trend: pd.DataFrame, step_x: str, before: float, after: float, band: float, metric_label: str, title: str
) -> str:
    """The step chart (module doc). `trend` columns: x (the commit's label), x_order, value,
    run_id, commit_sha; `step_x` the label of the step's commit; `band` the min_effect."""
    t = trend.sort_values("x_order")
    axis = [str(x) for x in t["x"].tolist()]
    values = [float(v) for v in t["value"].tolist()]
    split = axis.index(step_x) if step_x in axis else len(axis)
    low, high = before * (1 - band), before * (1 + band)
    finite = [v for v in values if math.isfinite(v)]
    y_min, y_max = padded(min([low, after, *finite]), max([high, after, *finite]))
    x_at, y_at = FRAME.category_x(len(axis)), FRAME.linear_y(y_min, y_max)
    parts = [
        svg_open(FRAME, "step", title),
        f'<text data-role="title" x="8" y="18" font-size="13">{text(title, TITLE_CHARS)}</text>',
    ]
    parts += _legend(before, after, band)
    parts += y_axis(FRAME, ticks(y_min, y_max), y_at, metric_label)
    parts.append(
        f'<rect data-role="band" data-low="{low:.6g}" data-high="{high:.6g}" x="{FRAME.left}" y="{y_at(high):.1f}" '
        f'width="{FRAME.plot_w}" height="{max(y_at(low) - y_at(high), 0.5):.1f}" fill="{BAND}"/>'
    )
    if split > 0:
        parts.append(_level("before", axis[:split], before, x_at(0), x_at(split - 1), y_at(before), BEFORE))
    if split < len(axis):
        parts.append(_level("after", axis[split:], after, x_at(split), x_at(len(axis) - 1), y_at(after), AFTER))
        if split > 0:
            x = x_at(split - 0.5)
            parts.append(
                f'<line data-role="step" data-commit="{attr(step_x)}" x1="{x:.1f}" x2="{x:.1f}" y1="{FRAME.top}" '
                f'y2="{FRAME.base}" stroke="{AFTER}" stroke-width="1"/>'
            )
    coords, circles = [], []
    for i, (row, value) in enumerate(zip(t.itertuples(), values)):
        if not math.isfinite(value):
            continue
        x, y = x_at(i), y_at(value)
        coords.append(f"{x:.1f},{y:.1f}")
        tip = f"{plain(value)} · commit {short_sha(row.commit_sha)} · run {row.run_id}"
        circles.append(
            f'<circle data-role="point" data-x="{attr(axis[i])}" data-value="{value:.6g}" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="3.5" fill="{VALUE}"><title>{text(tip)}</title></circle>'
        )
    if len(coords) > 1:
        parts.append(
            f'<polyline data-role="value" points="{" ".join(coords)}" fill="none" stroke="{VALUE}" stroke-width="2"/>'
        )
    parts += circles
    parts += category_x_axis(FRAME, axis, x_at, "commit")
    parts.append("</svg>")
    return "".join(parts)


def _level(role: str, commits: list[str], value: float, x1: float, x2: float, y: float, color: str) -> str:
    """A dashed level over the commits it covers (a single commit: a short dash around its point)."""
    if x1 == x2:
        x1, x2 = x1 - 8, x2 + 8
    return (
        f'<line data-role="{role}" data-value="{value:.6g}" data-commits="{attr(",".join(commits))}" '
        f'x1="{x1:.1f}" x2="{x2:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="1.5" '
        f'stroke-dasharray="6 4"><title>{role} {plain(value)}</title></line>'
    )


def _legend(before: float, after: float, band: float) -> list[str]:
    entries = [
        (line_mark(VALUE), "value"),
        (line_mark(BEFORE, 1.5, "6 4"), f"before {plain(before)}"),
        (line_mark(AFTER, 1.5, "6 4"), f"after {plain(after)}"),
        (f'<rect x="0" y="-6" width="18" height="12" fill="{BAND}"/>', f"threshold band ±{band:.1%} around before"),
    ]
    return legend(entries, FRAME.width, 44)[0]
