"""The Trends chart as a Vega-Lite spec: one line per series over runs in commit order, an optional
p10–p90 band, hollow points where the number is not a clean kernel time, detection's alerts, the
points under a power or thermal cap and the configuration changes as open symbols, the
environment's epochs as dotted lines, and a commit range shaded.

Why Vega-Lite and not plotly: on the 2-core CI machine and the 1M-result history, Trends loaded
1.0-1.4 s faster on a first visit (no plotly bundle to parse and compile) and 0.15-0.2 s faster on
a repeat one (docs/benchmarks/dashboard.md, "Trends drawn by Vega-Lite"); every other page loads
no chart library at all.

The data travel as named datasets (`points`, `marks`, `epochs`, `range`: Streamlit sends each as
Arrow), and every value is plain text: Vega's tooltip escapes what it shows, so commit messages
are never read as markup. The x axis is each run's place in commit order (`pos`), labelled with
its commit; a position, not a category, so a label that looks like a number (`5380e62`) stays a
label, and the axes zoom and pan together (the `zoom` parameter, bound to the scales). A click on a
point selects its run (the `pick` parameter, by `run_id`): the page opens that run.
"""

from __future__ import annotations

import math

import pandas as pd

from attnwatch.app.charts import capped_points, config_changes, hollow, variant_color
from attnwatch.app.data.quality import recipe_text
from attnwatch.app.data.trends import environment_epochs
from attnwatch.app.ui import PLAIN_D3, short_sha, truncate

HEIGHT = 460
# At most this many series get a p10–p90 band; more bands than that hide the lines.
MAX_BANDS = 6
# A shape's line dash (stroke dash arrays in pixels: solid, dash, dot, dash-dot, long dash,
# long dash-dot), in the order the shapes are listed.
SHAPE_DASHES = ((1, 0), (6, 4), (2, 2), (6, 3, 2, 3), (10, 4), (10, 4, 2, 4))
EPOCH_COLOR = "#9467bd"
# The open symbols over points, in the legend's order: kind -> (legend label, shape, colour). The
# first three are detection's alerts (a change point on main, or a correctness failure), drawn at
# the run where each starts; the shapes are Vega's symbol names or, for the regression's thin x,
# an SVG path in Vega's unit square.
MARK_KINDS = {
    "regression": ("regression alert", "M-1,-1L1,1M1,-1L-1,1", "#d62728"),
    "improvement": ("improvement alert", "triangle-down", "#2ca02c"),
    "correctness": ("correctness alert", "diamond", "#111111"),
    "cap": ("under a power/thermal cap", "triangle-down", "#d62728"),
    "config": ("kernel config changed", "diamond", "#7f7f7f"),
}
ALERT_KINDS = ("regression", "improvement", "correctness")
# The selection a click makes, and the one the scales are bound to.
PICK, ZOOM = "pick", "zoom"
# The parameter holding each position's commit label, and how many positions are labelled at
# most (a label per run is unreadable past a few dozen, and each costs the browser a layout).
COMMIT_LABELS = "commit_labels"
MAX_TICKS = 60


def _text(values, limit: int = 80) -> list[str]:
    """Plain one-line text per value (first line, control characters removed, at most `limit`)."""
    return [truncate(v, limit) if isinstance(v, str) else "" for v in values]


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame else pd.Series(None, index=frame.index, dtype=object)


def _config_text(frame: pd.DataFrame) -> list[str]:
    """Per point, the kernel configuration it ran and how it was chosen ("" when none recorded)."""
    return [
        f"config {truncate(c, 60)}" + (f" ({truncate(src, 20)})" if isinstance(src, str) else "")
        if isinstance(c, str)
        else ""
        for c, src in zip(_column(frame, "kernel_config"), _column(frame, "kernel_config_source"))
    ]


def _recipe_text(frame: pd.DataFrame) -> list[str]:
    """Per point, how its samples were taken ("" for the plain recipe)."""
    if "timing_recipe" not in frame:
        return [""] * len(frame)
    return [
        t or ""
        for t in map(
            recipe_text,
            frame["timing_recipe"],
            _column(frame, "clock_normalised_median_us"),
            _column(frame, "band_discarded_samples"),
            _column(frame, "pacing_gap_s"),
        )
    ]


def _points(series: pd.DataFrame, position: dict) -> pd.DataFrame:
    """One row per plotted point, with everything its tooltip says."""
    messages = {m: truncate(m, 80) for m in series["commit_message"].dropna().unique()}
    marks = series["marks"].fillna("") if "marks" in series else pd.Series("", index=series.index)
    return pd.DataFrame(
        {
            "series": series["series"].astype(str).to_numpy(),
            "pos": series["x"].map(position).astype("int64").to_numpy(),
            "commit_label": series["x"].astype(str).to_numpy(),
            "value": series["value"].astype(float).to_numpy(),
            "p10": pd.to_numeric(series["p10"], errors="coerce").to_numpy(dtype=float),
            "p90": pd.to_numeric(series["p90"], errors="coerce").to_numpy(dtype=float),
            "hollow": hollow(marks).to_numpy(),
            "run_id": series["run_id"].astype(str).to_numpy(),
            "commit": [short_sha(c) if isinstance(c, str) else "" for c in series["commit_sha"]],
            "message": [messages.get(m, "") if isinstance(m, str) else "" for m in series["commit_message"]],
            "committed": series["commit_date"].astype(str).str.slice(0, 19).to_numpy(),
            "started": series["started_at"].astype(str).str.slice(0, 19).to_numpy(),
            "notes": [
                " · ".join(part for part in parts if part)
                for parts in zip(
                    _config_text(series), _recipe_text(series), ("⚠ " + m if m else "" for m in _text(marks, 200))
                )
            ],
        }
    )


def _marks(series: pd.DataFrame, markers: pd.DataFrame | None, position: dict) -> pd.DataFrame:
    """The open symbols over points: detection's alerts, cap badges and configuration changes,
    one row each (kind: a MARK_KINDS legend label; label: what the tooltip says)."""
    wanted = ["x", "value", "run_id", "label"]
    parts = [config_changes(series)[wanted].assign(kind="config")]
    capped = capped_points(series)
    parts.append(capped[wanted].assign(kind="cap", label=capped["label"].map("measured under {}".format)))
    if markers is not None and not markers.empty:
        parts += [markers.loc[markers["kind"] == kind, wanted].assign(kind=kind) for kind in ALERT_KINDS]
    rows = pd.concat([p for p in parts if not p.empty] or [parts[0]], ignore_index=True)
    return pd.DataFrame(
        {
            "kind": [MARK_KINDS[k][0] for k in rows["kind"]],
            "pos": rows["x"].map(position).astype("int64").to_numpy(),
            "value": rows["value"].astype(float).to_numpy(),
            "run_id": rows["run_id"].astype(str).to_numpy(),
            "label": _text(rows["label"], 300),
        }
    )


def _scale(domain: list[str], values: list) -> dict:
    return {"domain": domain, "range": values}


def _tooltip(metric_label: str) -> list[dict]:
    return [
        {"field": "value", "type": "quantitative", "title": truncate(metric_label, 60), "format": PLAIN_D3},
        {"field": "series", "type": "nominal", "title": "series"},
        {"field": "commit", "type": "nominal", "title": "commit"},
        {"field": "message", "type": "nominal", "title": "message"},
        {"field": "committed", "type": "nominal", "title": "committed"},
        {"field": "started", "type": "nominal", "title": "run started"},
        {"field": "run_id", "type": "nominal", "title": "run"},
        {"field": "notes", "type": "nominal", "title": "notes"},
    ]


def _x_axis(axis: list[str]) -> dict:
    """The commit axis: positions 0..n-1, at most MAX_TICKS of them labelled with their run's
    commit label (read from the COMMIT_LABELS parameter, so the list is built once per chart, not
    once per label)."""
    step = max(1, math.ceil(len(axis) / MAX_TICKS))
    return {
        "field": "pos",
        "type": "quantitative",
        "title": "commit (in commit order; hover for dates)",
        "scale": {"domain": [-0.5, len(axis) - 0.5], "nice": False, "zero": False},
        "axis": {
            "values": list(range(0, len(axis), step)),
            "labelExpr": f"{COMMIT_LABELS}[datum.value] || ''",
            "labelAngle": -90,
            "labelOverlap": True,
            "grid": False,
        },
    }


def _range_layers(x: dict) -> list[dict]:
    """The commit range: a shaded band from its first to its last run, labelled."""
    return [
        {
            "name": "commit_range",
            "data": {"name": "range"},
            "mark": {"type": "rect", "color": "#ffc800", "opacity": 0.18},
            "encoding": {"x": dict(x, field="start"), "x2": {"field": "end"}},
        },
        {
            "name": "commit_range_label",
            "data": {"name": "range"},
            "mark": {
                "type": "text",
                "text": "commit range",
                "align": "left",
                "baseline": "top",
                "dy": 2,
                "fontSize": 10,
            },
            "encoding": {"x": dict(x, field="start"), "y": {"value": 0}},
        },
    ]


def _band_layer(x: dict, y: dict, by_series: dict) -> dict:
    """Each series' p10-p90 band, in its colour."""
    return {
        "name": "bands",
        "data": {"name": "points"},
        "transform": [{"filter": "isValid(datum.p10) && isValid(datum.p90) && isFinite(datum.p10)"}],
        "mark": {"type": "area", "opacity": 0.18},
        "encoding": {
            "x": x,
            "y": dict(y, field="p10"),
            "y2": {"field": "p90"},
            "color": dict(by_series, legend=None),
            "detail": {"field": "series"},
        },
    }


def _line_layer(x: dict, y: dict, by_series: dict, dashes: dict) -> dict:
    """One line per series (colour by variant, dash by shape), with the legend; the axes zoom
    and pan here (ZOOM, bound to the scales)."""
    return {
        "name": "lines",
        "data": {"name": "points"},
        "params": [{"name": ZOOM, "select": {"type": "interval", "encodings": ["x", "y"]}, "bind": "scales"}],
        "mark": {"type": "line", "strokeWidth": 2},
        "encoding": {
            "x": x,
            "y": y,
            "color": dict(by_series, legend={"orient": "top", "direction": "horizontal", "labelLimit": 360}),
            "strokeDash": {"field": "series", "type": "nominal", "scale": dashes, "legend": None},
            "order": {"field": "pos"},
        },
    }


def _marks_layer(x: dict, y: dict, kinds: set[str]) -> dict:
    """The open symbols (MARK_KINDS), one legend naming those present; drawn under the points,
    so that a click on a point reaches the point."""
    shown = [k for k in MARK_KINDS.values() if k[0] in kinds]
    labels = [k[0] for k in shown]
    legend = {"title": None, "legend": {"orient": "top", "direction": "horizontal"}}  # shape and colour: one legend
    return {
        "name": "marks",
        "data": {"name": "marks"},
        "mark": {"type": "point", "filled": False, "size": 220, "strokeWidth": 2},
        "encoding": {
            "x": x,
            "y": y,
            "shape": {"field": "kind", "type": "nominal", "scale": _scale(labels, [k[1] for k in shown]), **legend},
            "color": {"field": "kind", "type": "nominal", "scale": _scale(labels, [k[2] for k in shown]), **legend},
            "tooltip": [
                {"field": "kind", "type": "nominal", "title": "mark"},
                {"field": "label", "type": "nominal", "title": "what"},
                {"field": "run_id", "type": "nominal", "title": "run"},
            ],
        },
    }


def _points_layer(x: dict, y: dict, by_series: dict, metric_label: str) -> dict:
    """Every point, solid or hollow (white inside), with its tooltip; a click selects its run (PICK)."""
    hidden = dict(by_series, legend=None)
    return {
        "name": "points",
        "data": {"name": "points"},
        "params": [{"name": PICK, "select": {"type": "point", "fields": ["run_id"], "on": "click"}}],
        "mark": {"type": "point", "filled": True, "size": 45, "strokeWidth": 2, "opacity": 1, "cursor": "pointer"},
        "encoding": {
            "x": x,
            "y": y,
            "stroke": hidden,
            "fill": {"condition": {"test": "datum.hollow", "value": "#ffffff"}, **hidden},
            "tooltip": _tooltip(metric_label),
        },
    }


def _epoch_layers(x: dict) -> list[dict]:
    """A dotted line just before each run where the environment changed, named by what changed."""
    return [
        {
            "name": "epochs",
            "data": {"name": "epochs"},
            "mark": {"type": "rule", "color": EPOCH_COLOR, "strokeWidth": 1.5, "strokeDash": [2, 3]},
            "encoding": {"x": x, "tooltip": [{"field": "label", "type": "nominal", "title": "environment"}]},
        },
        {
            "name": "epoch_labels",
            "data": {"name": "epochs"},
            "mark": {
                "type": "text",
                "align": "left",
                "baseline": "top",
                "dx": 3,
                "dy": 14,
                "fontSize": 10,
                "color": EPOCH_COLOR,
            },
            "encoding": {"x": x, "y": {"value": 0}, "text": {"field": "label"}},
        },
    ]


def trend_spec(
    series: pd.DataFrame,
    metric_label: str,
    band: bool = True,
    markers: pd.DataFrame | None = None,
    log_y: bool = False,
    highlight: tuple[str, str] | None = None,
) -> dict:
    """The trend's Vega-Lite spec, its data included as named DataFrames (`datasets`).

    `series` columns: series, variant, shape_id, x (the run's commit label), x_order, value, p10,
    p90 (may be NaN), run_id, commit_sha, commit_message, commit_date, started_at and `marks`
    (quality marks: said in the tooltip; charts.HOLLOW_MARKS draw the point hollow), optionally
    kernel_config / _source and the timing recipe's columns (said in the tooltip; a changed
    configuration gets an open diamond), throttle_reasons (a cap badge). Colour follows the
    variant, dash the shape.
    `markers` (detection's alerts) columns: x, value, label, kind (one of ALERT_KINDS), run_id.
    `highlight`: (first, last) x labels of a commit range to shade.
    """
    axis = series.drop_duplicates("x").sort_values("x_order")["x"].tolist()
    position = {x: i for i, x in enumerate(axis)}
    first = (  # each series' variant and shape, in the order the series come
        series[["series", "variant", "shape_id"]].astype({"series": str}).drop_duplicates("series").set_index("series")
    )
    names = list(first.index)
    shapes = list(dict.fromkeys(first["shape_id"]))
    by_series = {
        "field": "series",
        "type": "nominal",
        "scale": _scale(names, [variant_color(str(v)) for v in first["variant"]]),
        "title": None,
    }
    dashes = _scale(names, [list(SHAPE_DASHES[shapes.index(s) % len(SHAPE_DASHES)]) for s in first["shape_id"]])
    points = _points(series.sort_values(["series", "x_order"], kind="stable"), position)
    marks = _marks(series, markers, position)
    epochs = environment_epochs(series)
    epochs = epochs[epochs["x"].isin(position)]
    datasets = {
        "points": points,
        "marks": marks,
        "epochs": pd.DataFrame(
            {
                "pos": [position[x] - 0.5 for x in epochs["x"]],
                "label": ["env: " + truncate(t, 80) for t in epochs["label"]],
            }
        ),
    }
    x = _x_axis(axis)
    y = {
        "field": "value",
        "type": "quantitative",
        "title": truncate(metric_label, 80),
        "scale": {"type": "log" if log_y else "linear", "zero": False},
        "axis": {"format": ",~r"},
    }
    layers: list[dict] = []
    if highlight is not None and highlight[0] in position and highlight[1] in position:
        datasets["range"] = pd.DataFrame({"start": [position[highlight[0]]], "end": [position[highlight[1]]]})
        layers += _range_layers(x)
    if band and len(names) <= MAX_BANDS and points["p10"].notna().any():
        layers.append(_band_layer(x, y, by_series))
    layers.append(_line_layer(x, y, by_series, dashes))
    if not marks.empty:
        layers.append(_marks_layer(x, y, set(marks["kind"])))
    layers.append(_points_layer(x, y, by_series, metric_label))
    if not datasets["epochs"].empty:
        layers += _epoch_layers(x)
    used = {layer["data"]["name"] for layer in layers}
    return {
        "height": HEIGHT,
        "datasets": {name: frame for name, frame in datasets.items() if name in used},
        "params": [{"name": COMMIT_LABELS, "value": [str(a) for a in axis]}],
        "layer": layers,
        # the series' colours and the marks' colours are two scales, each with its own legend
        "resolve": {"scale": {"color": "independent", "shape": "independent"}, "legend": {"color": "independent"}},
        "usermeta": {"embedOptions": {"renderer": "svg"}},  # each point an element: hover and click reach it
    }


def selected_run(event) -> str | None:
    """The run id of the point a click selected (the PICK parameter), or None."""
    selection = event.get("selection", {}) if event else {}
    for point in selection.get(PICK, []) or []:
        if isinstance(point, dict) and point.get("run_id"):
            return str(point["run_id"])
    return None
