"""Plotly figures built from DataFrames the data layer already aggregated in DuckDB.

Figures carry `customdata` with the run id in column 0, so a click (Streamlit's plotly
selection event) can lead to that run. Hover text from commits is escaped (`app.ui.escape_hover`)
because plotly interprets a subset of HTML in labels.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.ui import escape_hover, short_sha

# At most this many series get a p10–p90 band; more bands than that hide the lines.
MAX_BANDS = 6
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)


# Detection's alerts on a trend: a change point found on main (regression or improvement) or a
# correctness failure, each drawn at the run where it starts.
MARKER_STYLE = {
    "regression": ("x-thin-open", "#d62728"),
    "improvement": ("triangle-down-open", "#2ca02c"),
    "correctness": ("diamond-open", "#111111"),
}


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _escaped(messages: pd.Series) -> np.ndarray:
    """Hover-safe commit text, escaping each distinct message once (many points share a commit)."""
    lookup = {m: escape_hover(m) for m in messages.dropna().unique()}
    return messages.map(lookup).fillna("").to_numpy()


def trend_figure(
    series: pd.DataFrame,
    metric_label: str,
    band: bool = True,
    markers: pd.DataFrame | None = None,
) -> go.Figure:
    """One line per series over runs in time order, with an optional p10–p90 band.

    `series` columns: series, started_at, value, p10, p90 (may be NaN), run_id, commit_sha,
    commit_message, commit_date, failed (bool: the case did not produce a number in that run).
    `markers` (detection's alerts: change points and correctness failures) columns: started_at,
    value, label, kind (a MARKER_STYLE key), run_id.
    """
    fig = go.Figure()
    names = list(dict.fromkeys(series["series"]))
    for index, name in enumerate(names):
        color = PALETTE[index % len(PALETTE)]
        s = series[series["series"] == name].sort_values("started_at")
        if band and len(names) <= MAX_BANDS and s["p10"].notna().any():
            fig.add_trace(go.Scatter(
                x=s["started_at"], y=s["p90"], mode="lines", line=dict(width=0),
                hoverinfo="skip", showlegend=False, legendgroup=name,
            ))
            fig.add_trace(go.Scatter(
                x=s["started_at"], y=s["p10"], mode="lines", line=dict(width=0),
                fill="tonexty", fillcolor=_rgba(color, 0.18), hoverinfo="skip",
                name=f"{name} p10–p90", showlegend=False, legendgroup=name,
            ))
        custom = np.column_stack([  # one object array: plotly validates it far faster than tuples
            s["run_id"].astype(str).to_numpy(),
            s["commit_sha"].map(short_sha).to_numpy(),
            _escaped(s["commit_message"]),
            s["commit_date"].astype(str).str.slice(0, 19).to_numpy(),
        ])
        fig.add_trace(go.Scatter(
            x=s["started_at"], y=s["value"], mode="lines+markers", name=escape_hover(name, 60),
            legendgroup=name, line=dict(color=color, width=2), marker=dict(size=6),
            customdata=custom,
            hovertemplate=(
                "%{y:.4g} " + escape_hover(metric_label, 40)
                + "<br>commit %{customdata[1]}<br>%{customdata[2]}<br>committed %{customdata[3]}"
                + "<br>run %{customdata[0]}<extra>" + escape_hover(name, 60) + "</extra>"
            ),
        ))
    if markers is not None and not markers.empty:
        for kind, (symbol, color) in MARKER_STYLE.items():
            m = markers[markers["kind"] == kind]
            if m.empty:
                continue
            fig.add_trace(go.Scatter(
                x=m["started_at"], y=m["value"], mode="markers", name=f"{kind} alerts",
                marker=dict(symbol=symbol, size=15, color=color, line=dict(width=2, color=color)),
                customdata=list(zip(m["run_id"], m["label"].map(escape_hover))),
                hovertemplate="%{customdata[1]}<br>run %{customdata[0]}<extra>" + kind + "</extra>",
            ))
    fig.update_layout(
        height=460, margin=dict(l=10, r=10, t=30, b=10), hovermode="closest",
        yaxis_title=metric_label, xaxis_title="run start (UTC)",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def roofline_figure(points: pd.DataFrame, peak_tflops: float, bandwidth_tbps: float, ceiling_label: str) -> go.Figure:
    """Achieved TFLOPS against arithmetic intensity (FLOP/byte of DRAM traffic), log-log, under two roofs.

    The roofs are min(peak, bandwidth × intensity) with both ceilings *measured* (the caller
    passes them with their provenance in `ceiling_label`). `points` columns: label, shape_id,
    arithmetic_intensity, achieved_tflops, run_id.
    """
    fig = go.Figure()
    finite = points[(points["arithmetic_intensity"] > 0) & (points["achieved_tflops"] > 0)]
    lo = min([1.0, *finite["arithmetic_intensity"].tolist()]) / 2
    hi = max([1e4, *finite["arithmetic_intensity"].tolist()]) * 2
    ridge = peak_tflops / bandwidth_tbps  # TFLOP/s ÷ TB/s = FLOP/byte
    xs = [lo, ridge, hi]
    ys = [bandwidth_tbps * lo, peak_tflops, peak_tflops]
    fig.add_trace(go.Scatter(
        x=xs, y=ys, mode="lines", name=ceiling_label, line=dict(color="#444", width=2, dash="dash"),
        hovertemplate="roof %{y:.1f} TFLOP/s at %{x:.3g} FLOP/B<extra></extra>",
    ))
    for index, (label, group) in enumerate(finite.groupby("label", sort=True)):
        fig.add_trace(go.Scatter(
            x=group["arithmetic_intensity"], y=group["achieved_tflops"], mode="markers",
            name=escape_hover(label, 60), marker=dict(size=10, color=PALETTE[index % len(PALETTE)]),
            customdata=list(zip(group["run_id"], group["shape_id"].map(escape_hover))),
            hovertemplate="%{y:.1f} TFLOP/s at %{x:.3g} FLOP/B<br>%{customdata[1]}<br>run %{customdata[0]}<extra>"
            + escape_hover(label, 60) + "</extra>",
        ))
    fig.update_layout(
        height=460, margin=dict(l=10, r=10, t=30, b=10),
        xaxis=dict(type="log", title="arithmetic intensity (FLOP per DRAM byte)", range=[math.log10(lo), math.log10(hi)]),
        yaxis=dict(type="log", title="achieved TFLOP/s"),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig


def lines_figure(frame: pd.DataFrame, x: str, columns: list[str], y_title: str) -> go.Figure:
    """Several numeric columns of one frame over `x` (build report or ncu metrics over runs)."""
    fig = go.Figure()
    for index, column in enumerate(columns):
        if column not in frame or frame[column].isna().all():
            continue
        customdata = list(zip(frame["run_id"], frame["commit_sha"].map(short_sha))) if "run_id" in frame else None
        fig.add_trace(go.Scatter(
            x=frame[x], y=frame[column], mode="lines+markers", name=column,
            line=dict(color=PALETTE[index % len(PALETTE)]), customdata=customdata,
            hovertemplate="%{y:.4g}" + ("<br>commit %{customdata[1]}<br>run %{customdata[0]}" if customdata else "")
            + "<extra>" + column + "</extra>",
        ))
    fig.update_layout(
        height=360, margin=dict(l=10, r=10, t=30, b=10), yaxis_title=y_title,
        legend=dict(orientation="h", yanchor="bottom", y=1.02, x=0),
    )
    return fig
