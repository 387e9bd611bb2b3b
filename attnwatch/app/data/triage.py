"""The Alerts page's triage data: alerts grouped by the commit range that caused them, each
alert with a label a reader can act on, and the series it was found on.

A step alert sits at the first main run after the step (`alerts.run_id`); the commit range that
caused it runs from the commit of the main run before that one on the same GPU and pool (the newest
earlier main run that did not fail outright, as everywhere in the dashboard) to the alert's
commit. All alerts with the same range form one group, across GPUs and metrics: one push that
slowed a kernel everywhere is one thing to triage, not 48. Groups are listed largest open cause
first (`groups`): a step that moved 48 series comes before a one-series drift of 2-4%.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd

from attnwatch.app.data.store import Source, cached_query, read_frame
from attnwatch.app.data.trends import with_commit_axis
from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL
from attnwatch.history.contract.series_key import series_order

METRIC_NAMES = {"median_us": "latency", "gap_to_baseline": "gap to baseline", "correctness": "correctness"}
# The y axis of a step alert's chart: what the stored number is, in its unit (detection's columns).
METRIC_AXES = {"median_us": "median latency (µs)", "gap_to_baseline": "gap to baseline (× the baseline's latency)"}
# Metrics of step alerts that have a series in `case_series` (column names from detection).
SERIES_METRICS = ("median_us", "gap_to_baseline")

_ALERTS = f"""
    WITH main AS (
        SELECT run_id,
               lag(commit_sha) OVER (PARTITION BY series_gpu, series_pool ORDER BY {series_order()}) AS prev_sha
        FROM series_runs WHERE branch = {DEFAULT_BRANCH_SQL} AND status <> 'failed'
    )
    SELECT a.alert_id, a.kind, a.metric, a.case_id, a.series_gpu AS gpu, a.series_pool AS pool,
           a.status, a.change_pct, a.baseline_value, a.new_value, a.run_id, a.commit_sha, m.prev_sha,
           coalesce(m.prev_sha, '') || '..' || coalesce(a.commit_sha, '') AS group_key,
           a.run_started_at, a.commit_message, a.note, a.actor, a.updated_at, a.detail,
           a.attribution, a.attribution_changes
    FROM series_alerts a
    LEFT JOIN main m ON m.run_id = a.run_id
    WHERE list_contains(?, a.status) AND list_contains(?, a.kind)
      AND (? IS NULL OR a.series_gpu = ?)
"""


def label(row) -> str:
    """'#12 · regression · latency (median_us) · NVIDIA H200 · triton_fa2/… · +10.0% · open'."""
    metric = (
        f"{METRIC_NAMES.get(row.metric, row.metric)} ({row.metric})" if row.metric in SERIES_METRICS else row.metric
    )
    change = "" if row.change_pct is None or pd.isna(row.change_pct) else f" · {row.change_pct:+.1f}%"
    return f"#{int(row.alert_id)} · {row.kind} · {metric} · {row.gpu} · {row.case_id}{change} · {row.status}"


@cached_query
def filtered_alerts(source: Source, statuses: tuple[str, ...], kinds: tuple[str, ...], gpu: str | None) -> pd.DataFrame:
    """Every alert matching the filters, with its group key and label, newest step first."""
    frame = read_frame(
        source,
        _ALERTS + " ORDER BY a.run_started_at DESC NULLS LAST, a.alert_id",
        [list(statuses), list(kinds), gpu, gpu],
    )
    frame["label"] = [label(r) for r in frame.itertuples()]
    frame["moved"] = [moved(r) for r in frame.itertuples()]
    return frame


def moved(row) -> str:
    """What moved across the alert's step (history.analysis.attribution), with each change."""
    from attnwatch.history.analysis.attribution import stored_changes

    if row.kind == "correctness":
        return ""
    if not isinstance(row.attribution, str) or not row.attribution:
        return "not attributed (an alert from before attribution)"
    changes = stored_changes(row.attribution_changes if isinstance(row.attribution_changes, str) else None)
    return row.attribution + (": " + "; ".join(c.text() for c in changes) if changes else "")


GROUP_FIELDS = [
    "group_key",
    "commits",
    "alerts",
    "not_resolved",
    "regressions",
    "improvements",
    "correctness",
    "gpus",
    "metrics",
    "statuses",
    "largest_change_pct",
    "commit_message",
    "newest_run",
]


def groups(alerts: pd.DataFrame) -> pd.DataFrame:
    """One row per commit range: counts by kind and status, GPUs, metrics, the largest change.

    Largest open cause first: by the alerts not yet resolved (how many series the step moved
    that still wait for someone), then the largest change in either direction, then the
    newest step; a tie left after that keeps the newest-first order of `alerts`."""
    if alerts.empty:
        return pd.DataFrame(columns=GROUP_FIELDS)
    # One pass over plain records: pandas' per-group operations cost ~15 ms a group, half a
    # second for the 1M-row history's 34 groups on every render of the page.
    members: dict = {}
    for alert in alerts[_GROUPED_COLUMNS].to_dict("records"):
        members.setdefault(alert["group_key"], []).append(alert)
    rows = [_group_row(key, g) for key, g in members.items()]
    table = pd.DataFrame(rows, columns=GROUP_FIELDS)
    effect = pd.to_numeric(table["largest_change_pct"], errors="coerce").abs().fillna(0.0)  # None: correctness only
    order = table.assign(_effect=effect).sort_values(
        ["not_resolved", "_effect", "newest_run"], ascending=False, kind="stable", na_position="last"
    )
    return order.drop(columns="_effect").reset_index(drop=True)


_GROUPED_COLUMNS = [
    "group_key",
    "prev_sha",
    "commit_sha",
    "status",
    "kind",
    "gpu",
    "metric",
    "change_pct",
    "commit_message",
    "run_started_at",
]


def _group_row(key: str, g: list[dict]) -> dict:
    """One commit range's row of `groups` from its alerts (records, in the alerts' order)."""
    kinds = Counter(a["kind"] for a in g)
    changes = [a["change_pct"] for a in g if _present(a["change_pct"])]
    started = [a["run_started_at"] for a in g if _present(a["run_started_at"])]
    return {
        "group_key": key,
        "commits": short_range(g[0]["prev_sha"], g[0]["commit_sha"]),
        "alerts": len(g),
        "not_resolved": sum(a["status"] != "resolved" for a in g),
        "regressions": kinds["regression"],
        "improvements": kinds["improvement"],
        "correctness": kinds["correctness"],
        "gpus": ", ".join(sorted({a["gpu"] for a in g if _present(a["gpu"])})),
        "metrics": ", ".join(METRIC_NAMES.get(m, m) for m in sorted({a["metric"] for a in g})),
        "statuses": ", ".join(f"{n} {s}" for s, n in Counter(a["status"] for a in g).most_common()),
        "largest_change_pct": float(max(changes, key=abs)) if changes else None,  # the first of equal sizes
        "commit_message": g[0]["commit_message"],
        "newest_run": max(started) if started else pd.NaT,
    }


def _present(value) -> bool:
    return value is not None and not pd.isna(value)


def short_range(base: str | None, head: str | None) -> str:
    return f"{(base or '?')[:10]}..{(head or '?')[:10]}"


def group_label(row) -> str:
    kinds = ", ".join(
        f"{n} {k}"
        for k, n in (
            ("regression", row.regressions),
            ("improvement", row.improvements),
            ("correctness", row.correctness),
        )
        if n
    )
    return f"{row.commits} · {row.alerts} alert(s): {kinds} · {row.gpus} · {row.statuses}"


@cached_query
def alert_series(
    source: Source, case_id: str, gpu: str, metric: str, run_id: str, around: int = 30, pool: str | None = None
) -> pd.DataFrame:
    """The series detection scanned for this alert (`case_series`: main, ok results, series
    order) in its pool (every pool's points when None: an alert from before pools), `around`
    points either side of the alert's run, on the commit axis, with the timer of each point."""
    if metric not in SERIES_METRICS:
        raise ValueError(f"no series for metric {metric!r}")
    frame = read_frame(
        source,
        f"""
        WITH s AS (
            SELECT run_id, commit_sha, started_at, series_at, {metric} AS value, timing_mode, series_index
            FROM case_series WHERE case_id = ? AND series_gpu = ? AND (?::VARCHAR IS NULL OR series_pool = ?)
              AND {metric} IS NOT NULL
        ),
        anchor AS (SELECT coalesce(max(series_index) FILTER (WHERE run_id = ?), max(series_index)) AS i FROM s)
        SELECT s.* EXCLUDE (series_index) FROM s, anchor
        WHERE s.series_index BETWEEN anchor.i - ? AND anchor.i + ?
        ORDER BY s.series_index
        """,
        [case_id, gpu, pool, pool, run_id, int(around), int(around)],
    )
    return with_commit_axis(frame)


@cached_query
def correctness_series(
    source: Source, case_id: str, gpu: str, window: int = 20, pool: str | None = None
) -> pd.DataFrame:
    """The case's correctness over the newest `window` main runs on `gpu` in `pool` (every pool's
    when None), checked ones only, newest first in series order."""
    return read_frame(
        source,
        f"""
        SELECT u.run_id, u.commit_sha, u.started_at, s.passed, s.seeds, s.worst_max_abs_err, s.worst_rel_err, s.nonfinite
        FROM correctness_summaries s JOIN series_runs u USING (run_id)
        WHERE s.case_id = ? AND u.series_gpu = ? AND (?::VARCHAR IS NULL OR u.series_pool = ?)
          AND u.branch = {DEFAULT_BRANCH_SQL}
        ORDER BY {series_order("u", descending=True)} LIMIT ?
        """,
        [case_id, gpu, pool, pool, int(window)],
    )
