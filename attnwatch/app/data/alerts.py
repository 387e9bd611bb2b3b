"""The Alerts page's lifecycle side: the GPUs with alerts, one alert's events, and the two
actions on one alert or a group, which history.detection.alerts performs in one write transaction with lock retry.
Listing and grouping for triage is app.data.triage."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from attnwatch.app.data.store import Source, cached_query
from attnwatch.history.detection import alerts as history_alerts, ncu_cause

STATUSES = history_alerts.STATUSES
KINDS = history_alerts.KINDS


@cached_query
def alert_gpus(source: Source) -> list[str]:
    return sorted({a.gpu_name for a in history_alerts.list_alerts(source.location, {"limit": 100000}) if a.gpu_name})


@cached_query
def counter_cause(source: Source, kind: str, run_id: str | None, case_id: str):
    """The counter rules' explanation of a speed alert's step (history.detection.ncu_cause), or
    None when its run and an earlier one of the same GPU and branch were not both profiled."""
    return ncu_cause.cause_of(source.location, kind, run_id, case_id)


def counter_table(explanation) -> pd.DataFrame:
    """The ranked rules that fired, biggest contributor first, for the page's table: the move, how
    far outside its noise band (`thresholds`: the band, or the fixed threshold where no noise was
    measured), the band in % (empty: none measured) and the µs of the change it accounts for."""
    return pd.DataFrame(
        [
            {
                "rule": c.title,
                "base": c.base,
                "head": c.head,
                "change": 100.0 * c.change,
                "thresholds": c.score,
                "noise band %": None if c.band is None else 100.0 * c.band,
                "accounts for µs": c.accounts_us,
            }
            for c in explanation.changes
        ],
        columns=["rule", "base", "head", "change", "thresholds", "noise band %", "accounts for µs"],
    )


def events_of(source: Source, alert_id: int) -> pd.DataFrame:
    """The lifecycle of one alert (not cached: it is read right after a change)."""
    return pd.DataFrame(
        [asdict(e) for e in history_alerts.alert_events(source.location, alert_id)],
        columns=["alert_id", "action", "note", "actor", "happened_at"],
    )


def check_change(action: str, note: str, actor: str) -> None:
    """Raises the AlertError `change_status` would raise for this note and actor, before anything
    is asked or written."""
    history_alerts.check_change(action, note, actor)


def change_status(source: Source, alert_ids, action: str, note: str, actor: str):
    """Acknowledge or resolve one alert or a group with one note, all or none (one transaction);
    raises history's AlertError / LockTimeoutError with a readable message."""
    if action == "acknowledge":
        return history_alerts.acknowledge_many(source.location, alert_ids, note, actor)
    if action == "resolve":
        return history_alerts.resolve_many(source.location, alert_ids, note, actor)
    raise ValueError(f"unknown alert action {action!r}")
