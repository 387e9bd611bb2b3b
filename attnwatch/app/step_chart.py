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
y-title), the band's and the levels' values, and the commits each level covers.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from attnwatch.app.ui import short_sha, truncate

WIDTH, HEIGHT = 900, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 78, 64  # room for the y ticks, the title and legend, the commits
VALUE, BEFORE, AFTER, BAND = "#1f77b4", "#444444", "#d62728", "rgba(120,120,120,0.18)"
X_LABELS_MAX = 16  # more commits than this: every k-th commit is labelled
TITLE_CHARS = 120  # a longer title is cut with an ellipsis (its whole text stays the aria-label)
TEXT_CHARS = 1000  # any other text from the history (labels, the aria-label) is cut here


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
    y_min, y_max = _padded(min([low, after, *finite]), max([high, after, *finite]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x_at(i: float) -> float:
        return LEFT + (i + 0.5) * plot_w / max(len(axis), 1)

    def y_at(v: float) -> float:
        return TOP + (y_max - v) / (y_max - y_min) * plot_h

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{_attr(title)}" data-chart="step" font-family="sans-serif">',
        f'<text data-role="title" x="8" y="18" font-size="13">{_text(title, TITLE_CHARS)}</text>',
    ]
    parts += _legend(before, after, band)
    parts += _y_axis(y_min, y_max, y_at, metric_label)
    parts.append(
        f'<rect data-role="band" data-low="{low:.6g}" data-high="{high:.6g}" x="{LEFT}" y="{y_at(high):.1f}" '
        f'width="{plot_w}" height="{max(y_at(low) - y_at(high), 0.5):.1f}" fill="{BAND}"/>'
    )
    if split > 0:
        parts.append(_level("before", axis[:split], before, x_at(0), x_at(split - 1), y_at(before), BEFORE))
    if split < len(axis):
        parts.append(_level("after", axis[split:], after, x_at(split), x_at(len(axis) - 1), y_at(after), AFTER))
        if split > 0:
            x = x_at(split - 0.5)
            parts.append(
                f'<line data-role="step" data-commit="{_attr(step_x)}" x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" '
                f'y2="{TOP + plot_h}" stroke="{AFTER}" stroke-width="1"/>'
            )
    coords, circles = [], []
    for i, (row, value) in enumerate(zip(t.itertuples(), values)):
        if not math.isfinite(value):
            continue
        x, y = x_at(i), y_at(value)
        coords.append(f"{x:.1f},{y:.1f}")
        tip = f"{value:.4g} · commit {short_sha(row.commit_sha)} · run {row.run_id}"
        circles.append(
            f'<circle data-role="point" data-x="{_attr(axis[i])}" data-value="{value:.6g}" cx="{x:.1f}" '
            f'cy="{y:.1f}" r="3.5" fill="{VALUE}"><title>{_text(tip)}</title></circle>'
        )
    if len(coords) > 1:
        parts.append(
            f'<polyline data-role="value" points="{" ".join(coords)}" fill="none" stroke="{VALUE}" stroke-width="2"/>'
        )
    parts += circles
    parts += _x_axis(axis, x_at)
    parts.append("</svg>")
    return "".join(parts)


def _level(role: str, commits: list[str], value: float, x1: float, x2: float, y: float, color: str) -> str:
    """A dashed level over the commits it covers (a single commit: a short dash around its point)."""
    if x1 == x2:
        x1, x2 = x1 - 8, x2 + 8
    return (
        f'<line data-role="{role}" data-value="{value:.6g}" data-commits="{_attr(",".join(commits))}" '
        f'x1="{x1:.1f}" x2="{x2:.1f}" y1="{y:.1f}" y2="{y:.1f}" stroke="{color}" stroke-width="1.5" '
        f'stroke-dasharray="6 4"><title>{role} {value:.4g}</title></line>'
    )


def _legend(before: float, after: float, band: float) -> list[str]:
    entries = [
        (f'<line x1="0" x2="18" y1="0" y2="0" stroke="{VALUE}" stroke-width="2"/>', "value"),
        (
            f'<line x1="0" x2="18" y1="0" y2="0" stroke="{BEFORE}" stroke-width="1.5" stroke-dasharray="6 4"/>',
            f"before {before:.4g}",
        ),
        (
            f'<line x1="0" x2="18" y1="0" y2="0" stroke="{AFTER}" stroke-width="1.5" stroke-dasharray="6 4"/>',
            f"after {after:.4g}",
        ),
        (f'<rect x="0" y="-6" width="18" height="12" fill="{BAND}"/>', f"threshold band ±{band:.1%} around before"),
    ]
    out, x = [], 8.0
    for mark, label in entries:
        out.append(
            f'<g data-role="legend" transform="translate({x:.0f},44)">{mark}<text x="24" y="4" font-size="12">{_text(label)}</text></g>'
        )
        x += 40 + 7 * len(label)
    return out


def _y_axis(y_min: float, y_max: float, y_at, label: str) -> list[str]:
    out = [
        f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#bbb"/>',
        f'<text data-role="y-title" transform="translate(14,{TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" font-size="12">{_text(label)}</text>',
    ]
    for tick in _ticks(y_min, y_max):
        y = y_at(tick)
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{tick:.4g}</text>')
    return out


def _x_axis(axis: list[str], x_at) -> list[str]:
    every = max(1, math.ceil(len(axis) / X_LABELS_MAX))
    base = HEIGHT - BOTTOM
    out = [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}" stroke="#bbb"/>']
    for i, label in enumerate(axis):
        if i % every:
            continue
        x = x_at(i)
        out.append(
            f'<text transform="translate({x:.1f},{base + 12}) rotate(-35)" text-anchor="end" font-size="11">'
            f"{_text(label)}</text>"
        )
    out.append(
        f'<text x="{LEFT + (WIDTH - LEFT - RIGHT) / 2:.0f}" y="{HEIGHT - 4}" text-anchor="middle" font-size="12">commit</text>'
    )
    return out


def _padded(low: float, high: float) -> tuple[float, float]:
    """The y range: the data's with 8% room each side (a flat series gets ±1% of its value)."""
    if high <= low:
        pad = abs(low) * 0.01 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.08
    return low - pad, high + pad


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values inside low..high: 1, 2 or 5 times a power of ten apart, the
    spacing nearest (high - low) / count."""
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda candidate: abs(candidate - raw))
    first = math.ceil(low / step) * step
    return [round(first + k * step, 12) for k in range(int((high - first) / step + 1e-9) + 1)]


def _text(value, limit: int = TEXT_CHARS) -> str:
    """Text for SVG content: one line, control characters removed (XML refuses most), cut, escaped."""
    return html.escape(truncate(str(value), limit), quote=False)


def _attr(value, limit: int = TEXT_CHARS) -> str:
    return html.escape(truncate(str(value), limit), quote=True)
