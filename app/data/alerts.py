"""The Alerts page's data: listing through history.alerts (read-only), and the two lifecycle
actions, which history.alerts performs in one write transaction with lock retry."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd

from app.data.store import Source, cached_query
from history import alerts as history_alerts

STATUSES = history_alerts.STATUSES
KINDS = history_alerts.KINDS


@cached_query
def alert_table(
    source: Source, statuses: tuple[str, ...], kinds: tuple[str, ...], gpu: str | None, case_contains: str | None,
    limit: int = 1000,
) -> pd.DataFrame:
    """Alerts matching the filters, newest first, as a frame (one row per alert)."""
    flt = history_alerts.AlertFilter(
        statuses=statuses, kinds=kinds, gpu_name=gpu or None, case_contains=case_contains or None, limit=limit,
    )
    rows = [asdict(a) for a in history_alerts.list_alerts(source.path, flt)]
    return pd.DataFrame(rows, columns=list(history_alerts.ALERT_FIELDS))


@cached_query
def alert_gpus(source: Source) -> list[str]:
    return sorted({a.gpu_name for a in history_alerts.list_alerts(source.path, {"limit": 100000}) if a.gpu_name})


def events_of(source: Source, alert_id: int) -> pd.DataFrame:
    """The lifecycle of one alert (not cached: it is read right after a change)."""
    return pd.DataFrame([asdict(e) for e in history_alerts.alert_events(source.path, alert_id)],
                        columns=["alert_id", "action", "note", "actor", "happened_at"])


def change_status(source: Source, alert_id: int, action: str, note: str, actor: str):
    """Acknowledge or resolve; raises history's AlertError / LockTimeoutError with a readable message."""
    if action == "acknowledge":
        return history_alerts.acknowledge(source.path, alert_id, note, actor)
    if action == "resolve":
        return history_alerts.resolve(source.path, alert_id, note, actor)
    raise ValueError(f"unknown alert action {action!r}")
