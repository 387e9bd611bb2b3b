"""Alerts and `attnwatch bisect` (ci/bisect): what an alert asks to bisect, and its outcome.

An alert (history.detection.alerts) names its series (case, GPU model, pool) and the commit of
its step; the step's range starts after the commit of the series' previous run on the default
branch (view `case_series`, ordered as detection orders it). The read and the one write are
here, so the alert-event log can be joined to `record_bisect` in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnwatch.history.detection.alerts import AlertError, bisected_in, get_alert
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.db import exists, open_read, open_write
from attnwatch.history.store.lake_retry import retrying
from attnwatch.history.store.transactions import write_transaction

if TYPE_CHECKING:
    from attnwatch.history.analysis.attribution import Attribution

MAX_RESULT = 2000


@dataclass(frozen=True)
class AlertTarget:
    """What a bisect of an alert measures: its case on its GPU, over (good_sha, bad_sha]."""

    alert_id: int
    case_id: str
    gpu_name: str | None
    metric: str
    good_sha: str
    bad_sha: str
    attribution: str | None = None  # what moved across the step (history/analysis/attribution.py)
    attribution_changes: str | None = None


def alert_target(location: HistoryLocation, alert_id: int) -> AlertTarget:
    """The alert's case and commit range; a one-line AlertError when it has none to bisect."""
    if not exists(location):
        raise AlertError(f"{location}: no history here (check --db / ATTNWATCH_DB)")
    with open_read(location) as con:
        alert = get_alert(con, alert_id)
        if alert.kind != "regression" or not alert.commit_sha:
            raise AlertError(
                f"alert {alert_id}: an alert of kind {alert.kind}; bisect looks for the commit of a slowdown"
            )
        rows = con.execute(
            "SELECT commit_sha FROM case_series WHERE case_id = ? AND series_gpu IS NOT DISTINCT FROM ? "
            "AND series_pool IS NOT DISTINCT FROM ? ORDER BY series_index",
            [alert.case_id, alert.gpu_name, alert.pool],
        ).fetchall()
    commits = [r[0] for r in rows]
    if alert.commit_sha not in commits:
        raise AlertError(
            f"alert {alert_id}: its commit {alert.commit_sha[:12]} is not in the series of {alert.case_id}"
        )
    step = commits.index(alert.commit_sha)
    before = [c for c in commits[:step] if c and c != alert.commit_sha]
    if not before:
        raise AlertError(f"alert {alert_id}: no earlier run of {alert.case_id} to serve as the good revision")
    return AlertTarget(
        alert.alert_id,
        alert.case_id,
        alert.gpu_name,
        alert.metric,
        before[-1],
        alert.commit_sha,
        alert.attribution,
        alert.attribution_changes,
    )


def range_attributions(
    location: HistoryLocation, case_ids: list[str], good_sha: str, bad_sha: str
) -> dict[str, Attribution]:
    """case id -> the attribution (history.analysis.attribution) of its change from its newest
    default-branch run at `good_sha` to its newest at `bad_sha`, for the cases the history has
    both runs of; {} without a history."""
    from attnwatch.history.detection.step_attribution import attribute_step
    from attnwatch.history.store.settings import DEFAULT_BRANCH_SQL

    if not exists(location):
        return {}
    found: dict[str, Attribution] = {}
    with open_read(location) as con:
        for case_id in case_ids:
            runs = dict(
                con.execute(
                    f"""SELECT u.commit_sha, arg_max(u.run_id, u.started_at) FROM results r JOIN series_runs u USING (run_id)
                    WHERE r.case_id = ? AND u.branch = {DEFAULT_BRANCH_SQL} AND u.commit_sha IN (?, ?)
                    GROUP BY u.commit_sha""",
                    [case_id, good_sha, bad_sha],
                ).fetchall()
            )
            if good_sha in runs and bad_sha in runs:
                attribution = attribute_step(con, case_id, runs[good_sha], runs[bad_sha])
                if attribution is not None:
                    found[case_id] = attribution
    return found


def record_bisect(
    location: HistoryLocation, alert_id: int, culprit_sha: str | None, result: str, actor: str = "attnwatch bisect"
) -> bool:
    """Write a bisect's outcome on the alert (migration 011), in one transaction; replaces an
    earlier one. `culprit_sha` is None when the bisect was undecided. A culprit on an alert not
    yet resolved is also the alert's 'bisected' event (history.detection.alerts.bisected_in), the
    transition notifications announce; returns whether that event was recorded."""
    text = " ".join(result.split())[:MAX_RESULT]
    evented: list[bool] = []

    def change(con, claims) -> None:
        evented.clear()
        alert = get_alert(con, alert_id)  # an unknown id: AlertError naming it, nothing written
        con.execute(
            "UPDATE alerts SET culprit_sha = ?, bisect_result = ?, bisected_at = now() AT TIME ZONE 'UTC' "
            "WHERE alert_id = ?",
            [culprit_sha, text, int(alert_id)],
        )
        if culprit_sha and alert.status != "resolved":
            bisected_in(con, claims, alert_id, f"bisected to {culprit_sha}: {text}", actor)
            evented.append(True)

    def attempt() -> None:
        with open_write(location) as con:
            write_transaction(con, change, str(location))

    retrying(location, attempt)
    return bool(evented)
