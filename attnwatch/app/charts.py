"""Plotly figures built from DataFrames the data layer already aggregated in DuckDB: the Trends
chart, the one interactive chart (zoom, hover, click to a run). The Alerts and Kernel pages'
charts are SVG images the server draws (app/step_chart.py, app/kernel_charts.py); the helpers
environment changes both mark come from app.data.trends.environment_epochs.

Figures carry `customdata` with the run id in column 0, so a click (Streamlit's plotly
selection event) can lead to that run. Hover text from commits is escaped (`app.ui.escape_hover`)
because plotly interprets a subset of HTML in labels.
"""

from __future__ import annotations

import hashlib
import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from attnwatch.app.data.quality import recipe_text
from attnwatch.app.data.trends import environment_epochs
from attnwatch.app.ui import PLAIN_D3, escape_hover, short_sha
from attnwatch.history.analysis.caps import cap_mark
from attnwatch.history.analysis.kernel_config import change_text, changed

# At most this many series get a p10–p90 band; more bands than that hide the lines.
MAX_BANDS = 6


# Detection's alerts on a trend: a change point found on main (regression or improvement) or a
# correctness failure, each drawn at the run where it starts.
MARKER_STYLE = {
    "regression": ("x-thin-open", "#d62728"),
    "improvement": ("triangle-down-open", "#2ca02c"),
    "correctness": ("diamond-open", "#111111"),
}


# The quality marks (app.data.quality) that draw a trend point hollow: the number is not the
# kernel's time at its clock (throttled samples, host launch gaps). An unconverged median is still
# the kernel's time, with its spread said on hover: on a busy history most points stop at the
# sample cap, and a chart of hollow points says nothing about the few that are in doubt.
HOLLOW_MARKS = ("throttled", "dispatch-bound")


def hollow(marks: pd.Series) -> pd.Series:
    """Per point (its quality marks' text), whether it is drawn hollow (HOLLOW_MARKS)."""
    text = marks.fillna("").astype(str)
    return text.map(lambda m: any(mark in m for mark in HOLLOW_MARKS)).astype(bool)


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _escaped(messages: pd.Series) -> np.ndarray:
    """Hover-safe commit text, escaping each distinct message once (many points share a commit)."""
    lookup = {m: escape_hover(m) for m in messages.dropna().unique()}
    return messages.map(lookup).astype(object).fillna("").to_numpy()


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
SHAPE_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")

# The trend's margins, sized for what it draws around the plot: y tick labels and title on the
# left, the legend (one or two rows) above, commit labels (vertical when many) and the axis title
# below. Plotly grows a margin that is too small for them (axis automargin, legend), but does so
# by drawing the whole figure a second time (Plots.doAutoMargin); starting from margins that
# already fit saved ~160 ms of the browser's main-thread time per Trends load (docs/benchmarks.md).
# A longer legend or wider labels still get their room, at the price of that second pass.
TREND_MARGIN = dict(l=70, r=10, t=50, b=100)


def variant_color(variant: str) -> str:
    """The variant's colour on every chart (VARIANT_COLORS, the CUTLASS tiles', else by hash)."""
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    if variant.startswith("cutlass_3k"):
        return CUTLASS_3K_COLOR
    digest = int(hashlib.sha1(variant.encode("utf-8")).hexdigest(), 16)
    return HASHED_COLORS[digest % len(HASHED_COLORS)]


def _config_hover(s: pd.DataFrame) -> np.ndarray:
    """Per point, the hover line naming the kernel configuration it ran ("" when none recorded)."""
    if "kernel_config" not in s:
        return np.full(len(s), "", dtype=object)
    sources = s["kernel_config_source"] if "kernel_config_source" in s else pd.Series(None, index=s.index)
    return np.array(
        [
            f"<br>config {escape_hover(c, 60)}" + (f" ({escape_hover(src, 20)})" if isinstance(src, str) else "")
            if isinstance(c, str)
            else ""
            for c, src in zip(s["kernel_config"], sources)
        ],
        dtype=object,
    )


def _recipe_hover(s: pd.DataFrame) -> np.ndarray:
    """Per point, the hover line naming how its samples were taken ("" for the plain recipe)."""
    if "timing_recipe" not in s:
        return np.full(len(s), "", dtype=object)
    col = lambda name: s[name] if name in s else pd.Series(None, index=s.index)  # noqa: E731
    return np.array(
        [
            ("<br>" + html.escape(t)) if t else ""
            for t in map(
                recipe_text,
                s["timing_recipe"],
                col("clock_normalised_median_us"),
                col("band_discarded_samples"),
                col("pacing_gap_s"),
            )
        ],
        dtype=object,
    )


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


def mark_epochs(fig: go.Figure, epochs: pd.DataFrame, axis: list) -> None:
    """A dotted line on the commit axis just before each run where the environment changed, named
    by what changed (from → to): a step at that run may be the environment's, not the code's."""
    for row in epochs.itertuples():
        if row.x in axis:  # by category position, as the commit range's shading (trend_figure)
            fig.add_vline(
                x=axis.index(row.x) - 0.5,
                line=dict(color="#9467bd", width=1.5, dash="dot"),
                annotation_text="env: " + escape_hover(row.label, 80),
                annotation_position="top right",
                annotation_font=dict(size=10, color="#9467bd"),
            )


def trend_figure(
    series: pd.DataFrame,
    metric_label: str,
    band: bool = True,
    markers: pd.DataFrame | None = None,
    log_y: bool = False,
    highlight: tuple[str, str] | None = None,
) -> go.Figure:
    """One line per series over runs in commit order, with an optional p10–p90 band.

    `series` columns: series, variant, shape_id, x (the run's commit label), x_order, value, p10,
    p90 (may be NaN), run_id, commit_sha, commit_message, commit_date, started_at and `marks`
    (quality marks: said on hover; HOLLOW_MARKS draw the point hollow), optionally kernel_config / _source (shown on
    hover; a run whose configuration changed gets an open diamond). Colour follows the variant,
    dash the shape.
    `markers` (detection's alerts) columns: x, value, label, kind (a MARKER_STYLE key), run_id.
    `highlight`: (first, last) x labels of a commit range to shade.
    """
    fig = go.Figure()
    names = list(dict.fromkeys(series["series"]))
    shapes = list(dict.fromkeys(series["shape_id"]))
    axis = series.drop_duplicates("x").sort_values("x_order")["x"].tolist()
    for name in names:
        s = series[series["series"] == name].sort_values("x_order")
        color = variant_color(str(s["variant"].iloc[0]))
        dash = SHAPE_DASHES[shapes.index(s["shape_id"].iloc[0]) % len(SHAPE_DASHES)]
        if band and len(names) <= MAX_BANDS and s["p10"].notna().any():
            fig.add_trace(
                go.Scatter(
                    x=s["x"],
                    y=s["p90"],
                    mode="lines",
                    line=dict(width=0),
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=name,
                )
            )
            fig.add_trace(
                go.Scatter(
                    x=s["x"],
                    y=s["p10"],
                    mode="lines",
                    line=dict(width=0),
                    fill="tonexty",
                    fillcolor=_rgba(color, 0.18),
                    hoverinfo="skip",
                    name=f"{name} p10–p90",
                    showlegend=False,
                    legendgroup=name,
                )
            )
        marks = s["marks"].fillna("") if "marks" in s else pd.Series("", index=s.index)
        custom = np.column_stack(
            [  # one object array: plotly validates it far faster than tuples
                s["run_id"].astype(str).to_numpy(),
                s["commit_sha"].map(short_sha).to_numpy(),
                _escaped(s["commit_message"]),
                s["commit_date"].astype(str).str.slice(0, 19).to_numpy(),
                s["started_at"].astype(str).str.slice(0, 19).to_numpy(),
                marks.map(lambda m: "<br>⚠ " + html.escape(m) if m else "").to_numpy(),
                _config_hover(s),
                _recipe_hover(s),
            ]
        )
        fig.add_trace(
            go.Scatter(
                x=s["x"],
                y=s["value"],
                mode="lines+markers",
                name=escape_hover(name, 60),
                legendgroup=name,
                line=dict(color=color, width=2, dash=dash),
                marker=dict(
                    size=7,
                    color=color,
                    symbol=["circle-open" if h else "circle" for h in hollow(marks)],
                    line=dict(width=2, color=color),
                ),
                customdata=custom,
                hovertemplate=(
                    "%{y:"
                    + PLAIN_D3
                    + "} "
                    + escape_hover(metric_label, 40)
                    + "<br>commit %{customdata[1]}<br>%{customdata[2]}<br>committed %{customdata[3]}"
                    + "<br>run started %{customdata[4]}<br>run %{customdata[0]}%{customdata[6]}%{customdata[7]}%{customdata[5]}<extra>"
                    + escape_hover(name, 60)
                    + "</extra>"
                ),
            )
        )
    capped = capped_points(series)
    if not capped.empty:  # a badge over each point the GPU's cap may have set, whatever the code did
        fig.add_trace(
            go.Scatter(
                x=capped["x"],
                y=capped["value"],
                mode="markers",
                name="under a power/thermal cap",
                marker=dict(
                    symbol="triangle-down-open", size=13, color="#d62728", line=dict(width=1.5, color="#d62728")
                ),
                customdata=list(zip(capped["run_id"], capped["label"])),
                hovertemplate="measured under %{customdata[1]}<br>run %{customdata[0]}<extra>cap</extra>",
            )
        )
    changes = config_changes(series)
    if not changes.empty:
        fig.add_trace(
            go.Scatter(
                x=changes["x"],
                y=changes["value"],
                mode="markers",
                name="kernel config changed",
                marker=dict(symbol="diamond-open", size=14, color="#7f7f7f", line=dict(width=2, color="#7f7f7f")),
                customdata=list(zip(changes["run_id"], changes["label"].map(lambda t: escape_hover(t, 200)))),
                hovertemplate="%{customdata[1]}<br>run %{customdata[0]}<extra>config change</extra>",
            )
        )
    if markers is not None and not markers.empty:
        for kind, (symbol, color) in MARKER_STYLE.items():
            m = markers[markers["kind"] == kind]
            if m.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=m["x"],
                    y=m["value"],
                    mode="markers",
                    name=f"{kind} alerts",
                    marker=dict(symbol=symbol, size=15, color=color, line=dict(width=2, color=color)),
                    customdata=list(zip(m["run_id"], m["label"].map(lambda t: escape_hover(t, 300)))),
                    hovertemplate="%{customdata[1]}<br>run %{customdata[0]}<extra>" + kind + "</extra>",
                )
            )
    mark_epochs(fig, environment_epochs(series), axis)
    if highlight and highlight[0] in axis and highlight[1] in axis:
        # By category position, never by label: plotly autoranges a shape's string x0 as a number
        # when it looks like one (a short hash '5380e62' is 5.38e65), which squeezed every run
        # of the chart onto one spot.
        fig.add_vrect(
            x0=axis.index(highlight[0]),
            x1=axis.index(highlight[1]),
            fillcolor="rgba(255,200,0,0.18)",
            line_width=0,
            annotation_text="commit range",
            annotation_position="top left",
        )
    fig.update_layout(
        height=460,
        margin=TREND_MARGIN,
        hovermode="closest",
        yaxis=dict(title=metric_label, type="log" if log_y else "linear", tickformat=",~r"),
        xaxis=dict(
            title="commit (in commit order; hover for dates)",
            type="category",
            categoryorder="array",
            categoryarray=axis,
        ),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig
