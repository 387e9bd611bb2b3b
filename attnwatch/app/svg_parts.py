"""The parts every chart the server draws as an SVG image shares: its frame, axes, legend and text.

The Alerts step chart (app/step_chart.py) and the Kernel page's charts (app/kernel_charts.py)
are pictures the server writes, shown with `st.image` (a data URL), so a page that shows only
them loads no chart library in the browser (docs/benchmarks/dashboard.md: the plotly bundle was
about 2 s of a cold page load). What they have in common lives here once: the plot area inside
its margins, round tick values on a linear axis and decades on a log one, the axes and the
legend, numbers in plain form (1,292 · 0.0123: never 1.29e+03) and text from the history made
safe for SVG (one line, control characters removed, cut, escaped: `app.ui.truncate`).

Every part says what it draws in `data-*` attributes (`data-role`, `data-value`), for tests and
for anyone reading the image's source.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from attnwatch.app.ui import plain_number, truncate

TEXT_CHARS = 1000  # text from the history (labels, the aria-label) is cut here unless a part says less
X_LABELS_MAX = 16  # more categories than this: every k-th one is labelled
X_LABEL_PX = 28  # and on a narrower plot, at most one label per this many px of its width
AXIS, GRID = "#bbb", "#eee"
LEGEND_ROW = 18  # px between two rows of the legend


@dataclass(frozen=True)
class Frame:
    """The picture's size and the margins around its plot area, in px of the viewBox."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int

    @property
    def plot_w(self) -> float:
        return self.width - self.left - self.right

    @property
    def plot_h(self) -> float:
        return self.height - self.top - self.bottom

    @property
    def base(self) -> int:
        """The y of the x axis (the plot area's bottom edge)."""
        return self.height - self.bottom

    def category_x(self, count: int) -> Callable[[float], float]:
        """The x of category i (0..count-1) at the middle of its slot; i - 0.5 is its left edge."""
        return lambda i: self.left + (i + 0.5) * self.plot_w / max(count, 1)

    def linear_y(self, low: float, high: float) -> Callable[[float], float]:
        return lambda v: self.top + (high - v) / (high - low) * self.plot_h

    def log_x(self, low: float, high: float) -> Callable[[float], float]:
        span = math.log10(high) - math.log10(low)
        return lambda v: self.left + (math.log10(v) - math.log10(low)) / span * self.plot_w

    def log_y(self, low: float, high: float) -> Callable[[float], float]:
        span = math.log10(high) - math.log10(low)
        return lambda v: self.top + (math.log10(high) - math.log10(v)) / span * self.plot_h


def svg_open(frame: Frame, chart: str, label: str, **data: str) -> str:
    """The <svg> element's start tag: its size, its accessible name, `data-chart` and any other
    `data-*` attribute given (keyword `y_title` is written `data-y-title`)."""
    extra = "".join(f' data-{key.replace("_", "-")}="{attr(value)}"' for key, value in data.items() if value)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}" '
        f'width="{frame.width}" height="{frame.height}" role="img" aria-label="{attr(label)}" '
        f'data-chart="{attr(chart)}"{extra} font-family="sans-serif">'
    )


def legend(
    entries: Sequence[tuple[str, str]], width: float, y: float, limit: int = TEXT_CHARS, data: Sequence[str] = ()
) -> tuple[list[str], float]:
    """Legend entries (a mark drawn around 0,0 and its label) side by side from the left, on a
    new row where the next would pass `width`; `data` (one per entry, optional) is the entry's
    `data-name`. Returns the parts and the y of the last row."""
    out, x = [], 8.0
    for index, (mark, label) in enumerate(entries):
        shown = truncate(label, limit)
        step = 40 + 7 * len(shown)
        if x > 8 and x + step - 16 > width:
            x, y = 8.0, y + LEGEND_ROW
        name = f' data-name="{attr(data[index])}"' if index < len(data) else ""
        out.append(
            f'<g data-role="legend"{name} transform="translate({x:.0f},{y:.0f})">{mark}'
            f'<text x="24" y="4" font-size="12">{text(shown)}</text></g>'
        )
        x += step
    return out, y


def line_mark(color: str, width: float = 2, dash: str | None = None) -> str:
    """A legend's line sample."""
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    return f'<line x1="0" x2="18" y1="0" y2="0" stroke="{color}" stroke-width="{width}"{dashed}/>'


def dot_mark(color: str, with_line: bool = False) -> str:
    """A legend's marker sample, on a line sample when the series is drawn as lines and markers."""
    return (line_mark(color) if with_line else "") + f'<circle cx="9" cy="0" r="4" fill="{color}"/>'


def y_axis(frame: Frame, ticks: Sequence[float], y_at: Callable[[float], float], label: str) -> list[str]:
    """The y axis: its line, its title (rotated, `data-role="y-title"`) and at each tick a grid
    line and the value in plain form (`data-role="y-tick"`)."""
    out = [
        f'<line x1="{frame.left}" x2="{frame.left}" y1="{frame.top}" y2="{frame.base}" stroke="{AXIS}"/>',
        f'<text data-role="y-title" transform="translate(14,{frame.top + frame.plot_h / 2:.0f}) rotate(-90)" '
        f'text-anchor="middle" font-size="12">{text(label)}</text>',
    ]
    for tick in ticks:
        y = y_at(tick)
        out.append(
            f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>'
        )
        out.append(
            f'<text data-role="y-tick" data-value="{num(tick)}" x="{frame.left - 6}" y="{y + 4:.1f}" '
            f'text-anchor="end" font-size="11">{plain(tick)}</text>'
        )
    return out


def category_x_axis(frame: Frame, axis: Sequence[str], x_at: Callable[[float], float], title: str) -> list[str]:
    """A category x axis (commits, shapes): a short tick under every category
    (`data-role="x-category"`, its label in `data-label`, in order), the label written under
    every k-th one (at most X_LABELS_MAX, fewer on a narrow plot: `data-role="x-tick"`), and the
    axis title."""
    most = max(2, min(X_LABELS_MAX, int(frame.plot_w // X_LABEL_PX)))
    every = max(1, math.ceil(len(axis) / most))
    base = frame.base
    out = [f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{base}" y2="{base}" stroke="{AXIS}"/>']
    for i, label in enumerate(axis):
        x = x_at(i)
        out.append(
            f'<line data-role="x-category" data-label="{attr(label)}" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" '
            f'y2="{base + 4}" stroke="{AXIS}"/>'
        )
        if i % every:
            continue
        out.append(
            f'<text data-role="x-tick" transform="translate({x:.1f},{base + 12}) rotate(-35)" text-anchor="end" '
            f'font-size="11">{text(label, 40)}</text>'
        )
    out.append(x_title(frame, title))
    return out


def log_x_axis(frame: Frame, low: float, high: float, x_at: Callable[[float], float], title: str) -> list[str]:
    """A log x axis over low..high: a grid line and a plain label at each decade, once
    (`data-role="x-tick"`), an unlabelled short tick at 2..9 times each (`data-role="x-minor"`)."""
    base = frame.base
    out = [f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{base}" y2="{base}" stroke="{AXIS}"/>']
    for value in minor_ticks(low, high):
        x = x_at(value)
        out.append(f'<line data-role="x-minor" x1="{x:.1f}" x2="{x:.1f}" y1="{base}" y2="{base + 3}" stroke="{AXIS}"/>')
    for value in decades(low, high):
        x = x_at(value)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.top}" y2="{base}" stroke="{GRID}"/>')
        out.append(
            f'<text data-role="x-tick" data-value="{num(value)}" x="{x:.1f}" y="{base + 16}" text-anchor="middle" '
            f'font-size="11">{plain(value)}</text>'
        )
    out.append(x_title(frame, title))
    return out


def log_y_minor(frame: Frame, low: float, high: float, y_at: Callable[[float], float]) -> list[str]:
    """Unlabelled short ticks at 2..9 times each decade of a log y axis (`data-role="y-minor"`)."""
    return [
        f'<line data-role="y-minor" x1="{frame.left - 3}" x2="{frame.left}" y1="{y_at(v):.1f}" y2="{y_at(v):.1f}" '
        f'stroke="{AXIS}"/>'
        for v in minor_ticks(low, high)
    ]


def x_title(frame: Frame, title: str) -> str:
    return (
        f'<text data-role="x-title" x="{frame.left + frame.plot_w / 2:.0f}" y="{frame.height - 4}" '
        f'text-anchor="middle" font-size="12">{text(title)}</text>'
    )


def padded(low: float, high: float) -> tuple[float, float]:
    """An axis range: the data's with 8% room each side (a flat series gets ±1% of its value)."""
    if high <= low:
        pad = abs(low) * 0.01 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.08
    return low - pad, high + pad


def ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About `count` round values inside low..high: 1, 2 or 5 times a power of ten apart, the
    spacing nearest (high - low) / count."""
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda candidate: abs(candidate - raw))
    first = math.ceil(low / step) * step
    return [round(first + k * step, 12) for k in range(int((high - first) / step + 1e-9) + 1)]


def decades(low: float, high: float) -> list[float]:
    """The powers of ten inside low..high (both > 0): a log axis is labelled once per decade."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    return [float(10**k) if k >= 0 else 1 / 10 ** (-k) for k in range(first, last + 1)]


def minor_ticks(low: float, high: float) -> list[float]:
    """2..9 times each power of ten, inside low..high."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    candidates = (m * (10**k if k >= 0 else 1 / 10 ** (-k)) for k in range(first, last + 1) for m in range(2, 10))
    return [v for v in candidates if low <= v <= high]


def plain(value) -> str:
    """A number as a label: plain decimal form (app.ui.plain_number, four significant digits but
    every digit of the integer part, thousands grouped) without trailing zeros: 54,528 · 12 · 0.0123."""
    shown = plain_number(value, 4)
    return shown.rstrip("0").rstrip(".") if "." in shown else shown


def num(value) -> str:
    """A number for a `data-*` attribute: exact (Python's shortest round-trip form)."""
    return repr(float(value))


def text(value, limit: int = TEXT_CHARS) -> str:
    """Text for SVG content: one line, control characters removed (XML refuses most), cut, escaped."""
    return html.escape(truncate(str(value), limit), quote=False)


def attr(value, limit: int = TEXT_CHARS) -> str:
    """Text for an attribute's value: as `text`, quotes escaped too."""
    return html.escape(truncate(str(value), limit), quote=True)
