"""Alerts that resolve themselves: a step alert whose series came back.

An open (or acknowledged) regression or improvement alert on a series (case x GPU x pool,
metric `median_us` or `gap_to_sdpa`) is resolved when the last `resolve_after` main runs of
that series, all after the step's run, are each within min_effect of the level before the step
(the alert's `baseline_value`): |value / baseline - 1| < min_effect. min_effect is the case's
own where config/case_rules.toml gives one, else the GPU's; `resolve_after` comes from
config/thresholds.toml, where its reason derives it from the measured per-run noise.

The resolution is an ordinary lifecycle transition (history.alerts.resolve_in): the alert's
status, note and actor change and a 'resolved' event is appended, with a note that names the
runs and the largest deviation, in the caller's transaction. Correctness alerts are not resolved
here: a passing run after a failing one is a fix someone should confirm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from history.detection.case_rules import CaseRules
from history.detection.thresholds import Thresholds

ACTOR = "attnwatch detect"


@dataclass(frozen=True)
class Recovery:
    alert_id: int
    case_id: str
    metric: str
    runs: int  # runs back within min_effect (resolve_after)
    worst_pct: float  # the largest |change| among them, percent of the baseline
    min_effect: float
    note: str


def _open_step_alerts(con, gpu: str | None) -> list[tuple]:
    return con.execute(
        "SELECT alert_id, case_id, gpu_name, pool, metric, run_id, baseline_value FROM alerts "
        "WHERE status IN ('open', 'acknowledged') AND kind IN ('regression', 'improvement') "
        "AND metric IN ('median_us', 'gap_to_sdpa') AND baseline_value > 0 AND run_id IS NOT NULL "
        "AND (? IS NULL OR gpu_name = ?) ORDER BY alert_id", [gpu, gpu]
    ).fetchall()


def _runs_after(con, case_id: str, gpu: str | None, pool: str | None, metric: str, run_id: str,
                limit: int) -> list[tuple[str, float | None]] | None:
    """The last `limit` (run_id, value) of the series after the alert's run, oldest first; None
    when the alert's run is no longer in the series (then nothing is decided)."""
    column = {"median_us": "median_us", "gap_to_sdpa": "gap_to_sdpa"}[metric]
    rows = con.execute(
        f"""
        WITH s AS (SELECT run_id, series_index, {column} AS value FROM case_series
                   WHERE case_id = ? AND series_gpu IS NOT DISTINCT FROM ? AND series_pool IS NOT DISTINCT FROM ?),
             step AS (SELECT min(series_index) AS step_index FROM s WHERE run_id = ?)
        SELECT run_id, value FROM s
        WHERE series_index > coalesce((SELECT step_index FROM step), 9223372036854775807)
        ORDER BY series_index DESC LIMIT {int(limit)}
        """,
        [case_id, gpu, pool, run_id],
    ).fetchall()
    if not rows:
        return None
    return [(r[0], r[1]) for r in reversed(rows)]


def find_recoveries(con, thresholds_for: Callable[[str | None], Thresholds], rules: CaseRules = CaseRules(),
                    only_gpu: str | None = None) -> list[Recovery]:
    """Every open step alert (on `only_gpu`, if given) whose series has been back within
    min_effect for resolve_after runs (read-only on `con`)."""
    out = []
    for alert_id, case_id, gpu, pool, metric, run_id, baseline in _open_step_alerts(con, only_gpu):
        th = thresholds_for(gpu)
        effect = rules.min_effect(case_id, gpu, th.min_effect)
        runs = _runs_after(con, case_id, gpu, pool, metric, run_id, th.resolve_after)
        if runs is None or len(runs) < th.resolve_after:
            continue
        values = [v for _, v in runs]
        if any(v is None or not math.isfinite(v) or v <= 0 for v in values):
            continue
        changes = [v / baseline - 1.0 for v in values]
        if max(abs(c) for c in changes) >= effect:
            continue
        worst = max(changes, key=abs) * 100.0
        note = (f"resolved automatically: the last {len(runs)} main runs ({runs[0][0]} .. {runs[-1][0]}) are within "
                f"±{effect:.1%} of the level before the step ({baseline:.4g}); largest deviation {worst:+.2f}%")
        out.append(Recovery(alert_id, case_id, metric, len(runs), worst, effect, note))
    return out
