"""Alerts and their lifecycle: open -> acknowledged (note, who, when) -> resolved.

Used by `attnwatch detect` (records new alerts), `attnwatch alerts` and the dashboard's Alerts
page. Writes go through history.store.db.open_write (lock retry, migrations; on a lake each command is
retried while the catalog is unreachable, history.store.lake_retry); every transition is
one transaction that updates `alerts` and appends to `alert_events`, so a crash mid-way
leaves either both or neither. Alerts are deduplicated by `dedup_key` (case, GPU, pool, metric
and the commit of the step): recording the same finding again, or after it was resolved, adds
nothing.

Ids are assigned here, not by a sequence (a DuckLake has none): the next id is one more than the
largest stored, and on a lake each new id and dedup_key is claimed (history.store.transactions), so two
detects recording at once cannot both take an id or a finding; the loser retries.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, Iterable

from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.db import exists, open_read, open_write
from attnwatch.history.errors import HistoryError
from attnwatch.history.store.lake_retry import retrying
from attnwatch.history.store.transactions import Claims, is_lake, write_transaction

KINDS = ("regression", "improvement", "correctness")
STATUSES = ("open", "acknowledged", "resolved")
MAX_NOTE = 2000
MAX_ACTOR = 100

# Allowed transitions: target status -> statuses it may come from.
_TRANSITIONS = {"acknowledged": ("open", "acknowledged"), "resolved": ("open", "acknowledged")}


class AlertError(HistoryError):
    """Unknown alert, a transition the lifecycle does not allow, or a bad note/actor."""


@dataclass(frozen=True)
class NewAlert:
    """A finding to record; `dedup_key` decides whether it is already known."""

    dedup_key: str
    kind: str
    metric: str
    case_id: str
    gpu_name: str | None
    run_id: str | None
    commit_sha: str | None
    baseline_value: float | None
    new_value: float | None
    change_pct: float | None
    detail: str = ""
    pool: str | None = None  # the series' pool (history.contract.series_key); None for alerts from before it
    # "before -> after" when the step coincides with a kernel configuration change (migration 008)
    config_change: str | None = None
    # What moved across the step (history/analysis/attribution.py, migration 015): "code",
    # "configuration", "environment", "machine", several joined by " + ", "none (noise suspect)" or
    # "unknown (no fingerprints recorded)"; and each change as JSON [{"part", "field", "before", "after"}].
    attribution: str | None = None
    attribution_changes: str | None = None


@dataclass(frozen=True, kw_only=True)
class Alert(NewAlert):
    """A stored finding: what NewAlert says, plus its id and where its lifecycle stands."""

    alert_id: int
    status: str
    note: str
    actor: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class AlertEvent:
    alert_id: int
    action: str
    note: str
    actor: str
    happened_at: datetime


@dataclass(frozen=True)
class AlertFilter:
    """Which alerts to list; every field optional. `case_contains` matches part of a case id."""

    statuses: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    gpu_name: str | None = None
    metric: str | None = None
    case_contains: str | None = None
    limit: int = 1000

    def __post_init__(self) -> None:
        for value, allowed, name in ((self.statuses, STATUSES, "statuses"), (self.kinds, KINDS, "kinds")):
            bad = [v for v in value if v not in allowed]
            if bad:
                raise AlertError(f"alert filter {name}: unknown {bad} (known: {', '.join(allowed)})")
        if not isinstance(self.limit, int) or not 1 <= self.limit <= 100000:
            raise AlertError(f"alert filter limit: expected 1..100000, got {self.limit!r}")


ALERT_FIELDS = ("alert_id", *(f.name for f in fields(Alert) if f.name != "alert_id"))
_COLUMNS = ", ".join(ALERT_FIELDS)


def _alert(row: tuple) -> Alert:
    return Alert(**dict(zip(ALERT_FIELDS, row)))


def _where(flt: AlertFilter) -> tuple[str, list[Any]]:
    clauses, params = [], []
    if flt.statuses:
        clauses.append(f"status IN ({', '.join('?' * len(flt.statuses))})")
        params += list(flt.statuses)
    if flt.kinds:
        clauses.append(f"kind IN ({', '.join('?' * len(flt.kinds))})")
        params += list(flt.kinds)
    for column, value in (("gpu_name", flt.gpu_name), ("metric", flt.metric)):
        if value:
            clauses.append(f"{column} = ?")
            params.append(value)
    if flt.case_contains:
        clauses.append("contains(case_id, ?)")
        params.append(flt.case_contains)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def list_alerts(location: HistoryLocation, filters: AlertFilter | dict | None = None) -> list[Alert]:
    """Alerts matching `filters` (an AlertFilter or a dict of its fields), newest first."""
    flt = filters if isinstance(filters, AlertFilter) else AlertFilter(**(filters or {}))
    where, params = _where(flt)
    with open_read(location) as con:
        rows = con.execute(
            f"SELECT {_COLUMNS} FROM alerts{where} ORDER BY created_at DESC, alert_id DESC LIMIT {flt.limit}", params
        ).fetchall()
    return [_alert(row) for row in rows]


def get_alert(con, alert_id: int) -> Alert:
    row = con.execute(f"SELECT {_COLUMNS} FROM alerts WHERE alert_id = ?", [int(alert_id)]).fetchone()
    if row is None:
        raise AlertError(f"alerts.alert_id: no alert {alert_id}")
    return _alert(row)


def alert_events(location: HistoryLocation, alert_id: int) -> list[AlertEvent]:
    """The lifecycle of one alert, oldest first."""
    with open_read(location) as con:
        rows = con.execute(
            "SELECT alert_id, action, note, actor, happened_at FROM alert_events WHERE alert_id = ? ORDER BY happened_at, event_id",
            [int(alert_id)],
        ).fetchall()
    return [AlertEvent(*row) for row in rows]


def get_alerts(location: HistoryLocation, alert_ids: Iterable[int]) -> list[Alert]:
    """The alerts `alert_ids`, in that order (an unknown id is an AlertError)."""
    with open_read(location) as con:
        return [get_alert(con, a) for a in alert_ids]


def events_since(location: HistoryLocation, since: datetime) -> list[tuple[Alert, AlertEvent]]:
    """Every event that happened at or after `since` (naive UTC), oldest first, with its alert."""
    with open_read(location) as con:
        rows = con.execute(
            "SELECT alert_id, action, note, actor, happened_at FROM alert_events WHERE happened_at >= ? "
            "ORDER BY happened_at, event_id",
            [since],
        ).fetchall()
        return [(get_alert(con, row[0]), AlertEvent(*row)) for row in rows]


def _clean(text: Any, name: str, limit: int, required: bool) -> str:
    if not isinstance(text, str):
        raise AlertError(f"{name}: expected text, got {type(text).__name__}")
    text = text.strip()
    if required and not text:
        raise AlertError(f"{name}: must not be empty")
    if len(text) > limit:
        raise AlertError(f"{name}: longer than {limit} characters")
    if any(ord(ch) < 32 and ch not in "\n\t" for ch in text):
        raise AlertError(f"{name}: contains control characters")
    return text


def check_change(action: str, note: Any, actor: Any) -> None:
    """Raise the AlertError `acknowledge_many` / `resolve_many` would raise for this note and
    actor, without opening the history: the dashboard asks for a group's confirmation only for a
    change that can be made."""
    if action not in ("acknowledge", "resolve"):
        raise AlertError(f"action: expected acknowledge or resolve, got {action!r}")
    _clean(note, "note", MAX_NOTE, action == "acknowledge")
    _clean(actor, "actor", MAX_ACTOR, True)


def _transition(
    location: HistoryLocation, alert_ids, target: str, note: str, actor: str, note_required: bool
) -> list[Alert]:
    """Move every alert of `alert_ids` to `target` in one transaction: all of them, or (on an
    unknown id or a transition the lifecycle refuses) none, with the offending alert named."""
    note = _clean(note, "note", MAX_NOTE, note_required)
    actor = _clean(actor, "actor", MAX_ACTOR, True)
    ids = list(dict.fromkeys(int(a) for a in alert_ids))
    if not ids:
        raise AlertError("alert ids: none given")
    broken: list[Exception] = []  # the catalog connection broke on an earlier try (a lake)

    def change(con, claims: Claims) -> None:
        for alert_id in ids:
            current = get_alert(con, alert_id)
            if broken and (current.status, current.note, current.actor) == (target, note, actor):
                continue  # that try's COMMIT landed before the connection broke: not twice
            _move(con, claims, current, target, note, actor)

    def attempt() -> list[Alert]:
        if not exists(location):  # open_write would create an empty history at a mistyped path
            raise AlertError(f"{location}: no history here (check --db / ATTNWATCH_DB)")
        with open_write(location) as con:
            write_transaction(con, change, str(location))
            return [get_alert(con, alert_id) for alert_id in ids]

    return retrying(location, attempt, on_retry=broken.append)


def _move(con, claims: Claims, current: Alert, target: str, note: str, actor: str) -> None:
    if current.status not in _TRANSITIONS[target]:
        raise AlertError(f"alert {current.alert_id}: cannot go from {current.status} to {target}")
    con.execute(
        "UPDATE alerts SET status = ?, note = ?, actor = ?, updated_at = now() AT TIME ZONE 'UTC' WHERE alert_id = ?",
        [target, note, actor, current.alert_id],
    )
    _append_event(con, claims, current.alert_id, target, note, actor)


def resolve_in(con, claims: Claims, alert_id: int, note: str, actor: str) -> bool:
    """Resolve inside the caller's transaction (history.store.transactions.write_transaction), as
    `attnwatch detect` does when a series came back (history.detection.recovery). An alert
    already resolved (a person was quicker, or a retried try's COMMIT landed) is left as it is:
    returns whether this call resolved it."""
    current = get_alert(con, alert_id)
    if current.status == "resolved":
        return False
    _move(
        con, claims, current, "resolved", _clean(note, "note", MAX_NOTE, False), _clean(actor, "actor", MAX_ACTOR, True)
    )
    return True


def record_bisected(location: HistoryLocation, alert_id: int, commit_sha: str, note: str, actor: str) -> Alert:
    """Record that a bisection placed the alert's step at `commit_sha`: a 'bisected' event (note:
    the commit, then `note`); the alert keeps its status. Not for a resolved alert."""
    sha = _clean(commit_sha, "commit", 64, True)
    if not all(ch in "0123456789abcdef" for ch in sha.lower()) or len(sha) < 7:
        raise AlertError(f"commit: expected a commit sha (7 to 64 hex digits), got {sha[:80]!r}")
    text = f"bisected to {sha}" + (f": {_clean(note, 'note', MAX_NOTE - 80, False)}" if note.strip() else "")
    actor = _clean(actor, "actor", MAX_ACTOR, True)
    broken: list[Exception] = []

    def change(con, claims: Claims) -> None:
        current = get_alert(con, alert_id)
        if current.status == "resolved":
            raise AlertError(f"alert {alert_id}: resolved; a bisection is recorded on an open or acknowledged alert")
        if (
            broken
            and con.execute(
                "SELECT count(*) FROM alert_events WHERE alert_id = ? AND action = 'bisected' "
                "AND note = ? AND actor = ?",
                [int(alert_id), text, actor],
            ).fetchone()[0]
        ):
            return  # that try's COMMIT landed before the connection broke: not twice
        bisected_in(con, claims, alert_id, text, actor)

    def attempt() -> Alert:
        if not exists(location):
            raise AlertError(f"{location}: no history here (check --db / ATTNWATCH_DB)")
        with open_write(location) as con:
            write_transaction(con, change, str(location))
            return get_alert(con, alert_id)

    return retrying(location, attempt, on_retry=broken.append)


def bisected_in(con, claims: Claims, alert_id: int, text: str, actor: str) -> None:
    """The 'bisected' event, inside the caller's transaction (`record_bisected`, and
    history.detection.bisects when `attnwatch bisect` names a culprit); the status stays."""
    con.execute("UPDATE alerts SET updated_at = now() AT TIME ZONE 'UTC' WHERE alert_id = ?", [int(alert_id)])
    _append_event(
        con,
        claims,
        int(alert_id),
        "bisected",
        _clean(text, "note", MAX_NOTE, False),
        _clean(actor, "actor", MAX_ACTOR, True),
    )


def acknowledge(location: HistoryLocation, alert_id: int, note: str, actor: str) -> Alert:
    """open (or acknowledged, to amend the note) -> acknowledged. A note is required."""
    return _transition(location, [alert_id], "acknowledged", note, actor, note_required=True)[0]


def resolve(location: HistoryLocation, alert_id: int, note: str, actor: str) -> Alert:
    """open or acknowledged -> resolved. A resolved alert stays resolved (its key stays used)."""
    return _transition(location, [alert_id], "resolved", note, actor, note_required=False)[0]


def acknowledge_many(location: HistoryLocation, alert_ids, note: str, actor: str) -> list[Alert]:
    """Acknowledge a group (e.g. every alert one commit caused) with one note, all or none."""
    return _transition(location, alert_ids, "acknowledged", note, actor, note_required=True)


def resolve_many(location: HistoryLocation, alert_ids, note: str, actor: str) -> list[Alert]:
    """Resolve a group with one note, all or none."""
    return _transition(location, alert_ids, "resolved", note, actor, note_required=False)


def _next_id(con, claims: Claims, table: str, column: str) -> int:
    """One more than the largest stored id, claimed so that no concurrent writer takes it too."""
    next_id = int(con.execute(f"SELECT coalesce(max({column}), 0) + 1 FROM {table}").fetchone()[0])
    claims.take(column, str(next_id))
    return next_id


def _append_event(con, claims: Claims, alert_id: int, action: str, note: str, actor: str) -> None:
    con.execute(
        "INSERT INTO alert_events (event_id, alert_id, action, note, actor) VALUES (?, ?, ?, ?, ?)",
        [_next_id(con, claims, "alert_events", "event_id"), alert_id, action, note, actor],
    )


def record_alerts(
    con, alerts: Iterable[NewAlert], claims: Claims | None = None, actor: str = "attnwatch detect"
) -> tuple[list[int], int]:
    """Insert alerts whose dedup_key is new, inside the caller's transaction. Returns (ids
    inserted, number already known). On a lake the transaction must be history.store.transactions.
    write_transaction's, whose `claims` are passed in; a file needs none."""
    if claims is None:
        if is_lake(con):
            raise AlertError("record_alerts on a lake needs the claims of write_transaction")
        claims = Claims(con, lake=False)
    alerts = list(alerts)
    keys = [a.dedup_key for a in alerts]
    stored = {
        r[0]
        for r in con.execute(
            "SELECT dedup_key FROM alerts WHERE dedup_key IN (SELECT unnest(?::VARCHAR[]))", [keys]
        ).fetchall()
    }
    inserted, known = [], 0
    for a in alerts:
        if a.kind not in KINDS:
            raise AlertError(f"alerts.kind: unknown {a.kind!r}")
        if a.dedup_key in stored:
            known += 1
            continue
        stored.add(a.dedup_key)
        claims.take("dedup_key", a.dedup_key)
        alert_id = _next_id(con, claims, "alerts", "alert_id")
        con.execute(
            "INSERT INTO alerts (alert_id, dedup_key, kind, metric, case_id, gpu_name, pool, run_id, commit_sha, "
            "baseline_value, new_value, change_pct, detail, config_change, attribution, attribution_changes) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                alert_id,
                a.dedup_key,
                a.kind,
                a.metric,
                a.case_id,
                a.gpu_name,
                a.pool,
                a.run_id,
                a.commit_sha,
                a.baseline_value,
                a.new_value,
                a.change_pct,
                a.detail[:MAX_NOTE],
                a.config_change,
                a.attribution,
                a.attribution_changes,
            ],
        )
        _append_event(con, claims, alert_id, "opened", a.detail[:MAX_NOTE], actor)
        inserted.append(alert_id)
    return inserted, known
