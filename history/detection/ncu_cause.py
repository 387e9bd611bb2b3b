"""The counter rules' cause for stored alerts: the alert's run against the one before it.

An alert names a case and the run where its series stepped (history.alerts). When that run was
profiled (`--ncu` on main and nightly runs: ncu_metrics), its counters are compared with those
of the latest earlier run of the same GPU and branch that profiled the case, and the rules of
ncu_rules.toml rank what moved (history/detection/ncu_explain.py). A regression alert is read
as "slower", an improvement as "faster"; correctness alerts have no counter cause.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from history.db import open_read
from history.detection.ncu_explain import Explanation, combine_kernels, explain

_EARLIER = """
SELECT r.run_id FROM runs r, runs t
WHERE t.run_id = ? AND r.gpu_name IS NOT DISTINCT FROM t.gpu_name AND r.branch IS NOT DISTINCT FROM t.branch
  AND r.started_at < t.started_at AND NOT r.synthetic
  AND EXISTS (SELECT 1 FROM ncu_metrics m WHERE m.run_id = r.run_id AND m.case_id = ?)
ORDER BY r.started_at DESC LIMIT 1
"""
_COUNTERS = "SELECT kernel_index, metric_name, value FROM ncu_metrics WHERE run_id = ? AND case_id = ? AND value IS NOT NULL"


def counters_of(con, run_id: str, case_id: str) -> dict[str, float]:
    """The case's counters in one run, its kernels combined; empty when it was not profiled."""
    kernels: dict[int, dict[str, float]] = {}
    for index, name, value in con.execute(_COUNTERS, [run_id, case_id]).fetchall():
        kernels.setdefault(index, {})[name] = value
    return combine_kernels(kernels.values())


def explain_step(con, kind: str, run_id: str | None, case_id: str) -> Explanation | None:
    """The ranked counter changes behind a step of `kind` into `run_id`, or None (not a speed
    alert, or the case not profiled in that run and an earlier one of the same GPU and branch)."""
    if kind not in ("regression", "improvement") or not run_id:
        return None
    head = counters_of(con, run_id, case_id)
    if not head:
        return None
    row = con.execute(_EARLIER, [run_id, case_id]).fetchone()
    if row is None:
        return None
    base = counters_of(con, row[0], case_id)
    return explain(base, head, slower=kind == "regression")


def cause_of(db_path: str | Path, kind: str, run_id: str | None, case_id: str) -> Explanation | None:
    """explain_step on its own read connection (the dashboard's one alert)."""
    with open_read(db_path) as con:
        return explain_step(con, kind, run_id, case_id)


def alert_causes(db_path: str | Path, alerts: Iterable) -> dict[int, Explanation]:
    """alert_id -> Explanation for the alerts that have one, on one read connection."""
    alerts = list(alerts)
    if not alerts:
        return {}
    out = {}
    with open_read(db_path) as con:
        for alert in alerts:
            found = explain_step(con, alert.kind, alert.run_id, alert.case_id)
            if found is not None:
                out[alert.alert_id] = found
    return out
