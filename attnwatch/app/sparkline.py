"""A table cell's sparkline as an SVG image: every run a dot, consecutive runs joined by a line.

The grid's own line-chart cell draws a single value as a line across the cell, which reads as a
flat history that does not exist; here one run is one dot. Values are ratios to the row's own
median, drawn on one fixed axis for every row (the caller's low..high), so noise looks like
noise and a step like a step; a value beyond the axis is drawn on its edge as a hollow dot.
"""

from __future__ import annotations

import base64
import math
from typing import Sequence

import numpy as np

WIDTH, HEIGHT, MARGIN = 84, 24, 3  # the image's size (px); the grid scales it into the cell
COLOR = "#1f77b4"


def sparkline_svg(values: Sequence[float] | None, low: float, high: float) -> str | None:
    """A data URL of the sparkline of `values` on the axis low..high, or None without a value."""
    if not isinstance(values, (list, tuple, np.ndarray)):  # a case without a number has no list
        return None
    points = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not points:
        return None
    span = WIDTH - 2 * MARGIN
    step = span / (len(points) - 1) if len(points) > 1 else 0.0
    marks, coords = [], []
    for i, value in enumerate(points):
        clipped = min(max(value, low), high)
        x = MARGIN + i * step if len(points) > 1 else WIDTH / 2
        y = MARGIN + (high - clipped) / (high - low) * (HEIGHT - 2 * MARGIN)
        coords.append(f"{x:.1f},{y:.1f}")
        fill = COLOR if clipped == value else "white"
        marks.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="1.8" fill="{fill}" stroke="{COLOR}" stroke-width="0.8"/>')
    line = (
        f'<polyline points="{" ".join(coords)}" fill="none" stroke="{COLOR}" stroke-width="1"/>'
        if len(points) > 1
        else ""
    )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}">{line}{"".join(marks)}</svg>'
    )
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()
