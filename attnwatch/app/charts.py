"""What the Trends chart draws, as data: each variant's colour (the same on every chart), which
points are drawn hollow, the points measured under a power or thermal cap, and the runs whose
kernel configuration changed. app/trend_chart.py turns them into the chart's Vega-Lite spec; the
Alerts and Kernel pages' charts are SVG images the server draws (app/step_chart.py,
app/kernel_charts.py).
"""

from __future__ import annotations

import hashlib

import pandas as pd

from attnwatch.history.analysis.caps import cap_mark
from attnwatch.history.analysis.kernel_config import change_text, changed

# The quality marks (app.data.quality) that draw a trend point hollow: the number is not the
# kernel's time at its clock (throttled samples, host launch gaps). An unconverged median is still
# the kernel's time, with its spread said on hover: on a busy history most points stop at the
# sample cap, and a chart of hollow points says nothing about the few that are in doubt.
HOLLOW_MARKS = ("throttled", "dispatch-bound")


def hollow(marks: pd.Series) -> pd.Series:
    """Per point (its quality marks' text), whether it is drawn hollow (HOLLOW_MARKS)."""
    text = marks.fillna("").astype(str)
    return text.map(lambda m: any(mark in m for mark in HOLLOW_MARKS)).astype(bool)


# One colour per variant wherever it is drawn, whatever else is selected. The dashboard draws
# whatever names a history holds (variants of older revisions, of other repositories, of plugins)
# and may not import `kernels` (docs/design.md, "Layers and the direction of imports"), so the
# colour is a function of the name alone: the long-standing variants keep the colours they have
# always had, the CUTLASS pipeline's tiles share one, and any other name takes a colour from its
# hash (stable across sessions) among HASHED_COLORS, which no fixed colour is. A variant needs no
# entry here: tests/test_app_trend_chart.py checks that every registered variant gets a colour no
# other variant of its operator has (a new one whose hash collides gets an entry).
VARIANT_COLORS = {
    "sdpa": "#1f77b4",
    "sdpa_flash": "#17becf",
    "sdpa_efficient": "#9467bd",
    "sdpa_cudnn": "#8c564b",
    "sdpa_math": "#7f7f7f",
    "torch_3op": "#bcbd22",
    "cuda_scalar": "#e377c2",
    "cuda_wmma": "#ff7f0e",
    "cuda_wmma_cpasync": "#d62728",
    "triton_fa2": "#2ca02c",
}
CUTLASS_3K_COLOR = "#393b79"
# d3's category20b without CUTLASS_3K_COLOR: none of them is a fixed colour.
HASHED_COLORS = (
    "#5254a3",
    "#6b6ecf",
    "#9c9ede",
    "#637939",
    "#8ca252",
    "#b5cf6b",
    "#cedb9c",
    "#8c6d31",
    "#bd9e39",
    "#e7ba52",
    "#e7cb94",
    "#843c39",
    "#ad494a",
    "#d6616b",
    "#e7969c",
    "#7b4173",
    "#a55194",
    "#ce6dbd",
    "#de9ed6",
)


def variant_color(variant: str) -> str:
    """The variant's colour on every chart (VARIANT_COLORS, the CUTLASS tiles', else by hash)."""
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    if variant.startswith("cutlass_3k"):
        return CUTLASS_3K_COLOR
    digest = int(hashlib.sha1(variant.encode("utf-8")).hexdigest(), 16)
    return HASHED_COLORS[digest % len(HASHED_COLORS)]


def capped_points(series: pd.DataFrame) -> pd.DataFrame:
    """The points measured under a power or thermal cap (history.analysis.caps, from the stored
    clocks-event reasons): columns x, value, run_id, label ("power cap")."""
    if "throttle_reasons" not in series or series.empty:
        return pd.DataFrame(columns=["x", "value", "run_id", "label"])
    labels = series["throttle_reasons"].map(cap_mark)
    picked = series[labels.notna()]
    return pd.DataFrame(
        {"x": picked["x"], "value": picked["value"], "run_id": picked["run_id"], "label": labels[labels.notna()]}
    )


def config_changes(series: pd.DataFrame) -> pd.DataFrame:
    """The points whose kernel configuration differs from the series' previous recorded one:
    columns series, x, value, run_id, label ("autotuner chose X instead of Y"). A run that
    recorded none is passed over, not counted as a change."""
    rows = []
    if "kernel_config" in series:
        read = series[["series", "x_order", "x", "value", "run_id", "kernel_config"]]  # not every column per row
        for name, s in read.groupby("series", sort=False):
            previous = None
            ordered = s.sort_values("x_order")
            for x, value, run_id, stored in zip(
                ordered["x"].tolist(),
                ordered["value"].tolist(),
                ordered["run_id"].tolist(),
                ordered["kernel_config"].tolist(),
            ):
                config = stored if isinstance(stored, str) else None
                if previous is not None and config is not None and changed(previous, config):
                    rows.append((name, x, value, run_id, f"{name}: {change_text(previous, config)}"))
                previous = config or previous
    return pd.DataFrame(rows, columns=["series", "x", "value", "run_id", "label"])
