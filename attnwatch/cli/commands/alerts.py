"""`attnwatch alerts list|ack|resolve`: the alert lifecycle from the command line."""

from __future__ import annotations

import getpass
import os

# history.detection.alerts needs duckdb; the lifecycle functions are imported when a subcommand runs so the
# CLI still starts where duckdb is absent (a GPU runner running `attnwatch compare`).
KINDS = ("regression", "improvement", "correctness")
STATUSES = ("open", "acknowledged", "resolved")


def _default_actor() -> str:
    return os.environ.get("GITHUB_ACTOR") or getpass.getuser()


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "alerts",
        help="list, acknowledge or resolve regression alerts",
        description="The alert lifecycle: list the alerts detection recorded, acknowledge or "
        "resolve one, record where a bisection placed its step, send the events since a time "
        "to the configured webhook or GitHub issues.",
    )
    sub = p.add_subparsers(dest="alerts_command", metavar="ACTION")
    sub.required = True
    ls = sub.add_parser(
        "list",
        help="list alerts (default: open and acknowledged)",
        description="List alerts with their case, change, commit and what moved; by default the "
        "open and acknowledged ones.",
    )
    ls.add_argument("--status", action="append", choices=STATUSES, help="repeatable; default open + acknowledged")
    ls.add_argument("--all", action="store_true", help="every status")
    ls.add_argument("--kind", action="append", choices=KINDS)
    ls.add_argument("--gpu")
    ls.add_argument("--metric")
    ls.add_argument("--case", help="part of a case id")
    ls.add_argument("--limit", type=int, default=200)
    ls.add_argument("--history", action="store_true", help="show each alert's lifecycle events")
    ls.add_argument(
        "--dashboard-url",
        default=os.environ.get("ATTNWATCH_DASHBOARD_URL"),
        help="print each alert's trend on this dashboard (default $ATTNWATCH_DASHBOARD_URL)",
    )
    ls.set_defaults(func=_list)
    for name, helptext, about, fn in (
        (
            "ack",
            "acknowledge an alert (a note is required)",
            "Mark alert ID acknowledged, with a note saying why; it stays listed until resolved.",
            _ack,
        ),
        ("resolve", "resolve an alert", "Mark alert ID resolved; it leaves the default list.", _resolve),
        (
            "bisected",
            "record the commit a bisection placed the alert's step at",
            "Record on alert ID the commit a bisection found its step at.",
            _bisected,
        ),
    ):
        q = sub.add_parser(name, help=helptext, description=about)
        q.add_argument("alert_id", type=int, metavar="ID")
        if name == "bisected":
            q.add_argument("--commit", required=True, help="the commit the bisection found")
        q.add_argument("--note", required=(name == "ack"), default="")
        q.add_argument("--by", default=None, help="who (default: $GITHUB_ACTOR or the login name)")
        q.set_defaults(func=fn)
    n = sub.add_parser(
        "notify",
        help="send every alert event since a time to the configured webhook / GitHub issues "
        "($ATTNWATCH_WEBHOOK_URL, $ATTNWATCH_ALERT_ISSUES)",
        description="Send every alert event recorded since --since to the webhook in "
        "$ATTNWATCH_WEBHOOK_URL and, with $ATTNWATCH_ALERT_ISSUES, to GitHub issues.",
    )
    n.add_argument("--since", required=True, help="UTC date or date-time (ISO 8601), e.g. 2026-11-26T06:00")
    n.set_defaults(func=_notify)


def _list(args) -> int:
    from attnwatch.ci.integration.notify.messages import attribution_text
    from attnwatch.history.detection.alerts import AlertFilter, alert_events, list_alerts
    from attnwatch.history.detection.ncu_cause import alert_causes
    from attnwatch.history.store.lake_retry import retrying

    statuses = () if args.all else tuple(args.status or ("open", "acknowledged"))
    wanted = AlertFilter(
        statuses=statuses,
        kinds=tuple(args.kind or ()),
        gpu_name=args.gpu,
        metric=args.metric,
        case_contains=args.case,
        limit=args.limit,
    )
    alerts = retrying(args.db, lambda: list_alerts(args.db, wanted))  # a lake: waits out a catalog restart
    if not alerts:
        print("no alerts")
        return 0
    causes = retrying(args.db, lambda: alert_causes(args.db, alerts))
    print(f"{'id':>5}  {'status':<12} {'kind':<11} {'change':>8}  {'commit':<12} {'gpu':<20} case / metric")
    for a in alerts:
        change = f"{a.change_pct:+.1f}%" if a.change_pct is not None else "—"
        print(
            f"{a.alert_id:>5}  {a.status:<12} {a.kind:<11} {change:>8}  {(a.commit_sha or '')[:12]:<12} "
            f"{(a.gpu_name or '')[:20]:<20} {a.case_id} / {a.metric}"
        )
        if a.kind != "correctness":
            print(f"{'':>7}moved: {attribution_text(a) or 'not attributed (an alert from before attribution)'}")
        if a.note:
            print(f"{'':>7}note ({a.actor}): {a.note}")
        if a.alert_id in causes:
            for line in cause_lines(causes[a.alert_id]):
                print(f"{'':>7}{line}")
        link = _trend_link(args.dashboard_url, a)
        if link:
            print(f"{'':>7}plot: {link}")
        if args.history:
            for e in alert_events(args.db, a.alert_id):
                print(f"{'':>7}{e.happened_at:%Y-%m-%d %H:%M} {e.action:<12} {e.actor}: {e.note}")
    return 0


RULES_SHOWN = 3  # ranked counter rules printed under an alert's cause


def cause_lines(explanation) -> list[str]:
    """The counter rules' cause as one line, then the ranked rules that fired (the strongest first)."""
    from attnwatch.history.analysis.ncu_explain import format_value

    lines = [f"ncu cause: {explanation.cause}"]
    ranked = [
        f"{c.rule} {format_value(c.base)} → {format_value(c.head)} ({c.change:+.0%})"
        for c in explanation.changes[:RULES_SHOWN]
    ]
    if ranked:
        lines.append("ncu ranked: " + "; ".join(ranked))
    return lines


def _trend_link(dashboard_url: str | None, alert) -> str | None:
    """The alert's case on its series (GPU and pool) and metric, the step into its commit marked
    (history.links)."""
    from attnwatch.history.links import case_trend_query, commit_range, url

    if not dashboard_url or not alert.gpu_name:
        return None
    metric = alert.metric if alert.metric in ("median_us", "gap_to_baseline") else "median_us"
    query = case_trend_query(
        alert.gpu_name, alert.case_id, metric=metric, commits=commit_range(None, alert.commit_sha), host=alert.pool
    )
    return url(dashboard_url, "trends", query) if query else None


def transition(alert, action: str, note: str | None = None, actor: str | None = None):
    """The notification of one transition, with the alert's trend link ($ATTNWATCH_DASHBOARD_URL)."""
    from attnwatch.ci.integration.notify.messages import Transition

    return Transition.of(alert, action, note, actor, link=_trend_link(os.environ.get("ATTNWATCH_DASHBOARD_URL"), alert))


def announce(pairs) -> list[str]:
    """Send (alert, action[, note, actor]) transitions where the environment says (ci.integration.notify.dispatch)."""
    from attnwatch.ci.integration.notify.dispatch import announce as send

    return send([transition(*p) for p in pairs])


def _ack(args) -> int:
    from attnwatch.history.detection.alerts import acknowledge

    a = acknowledge(args.db, args.alert_id, args.note, args.by or _default_actor())
    print(f"alert {a.alert_id} acknowledged by {a.actor}: {a.note}")
    announce([(a, "acknowledged")])
    return 0


def _resolve(args) -> int:
    from attnwatch.history.detection.alerts import resolve

    a = resolve(args.db, args.alert_id, args.note, args.by or _default_actor())
    print(f"alert {a.alert_id} resolved by {a.actor}" + (f": {a.note}" if a.note else ""))
    announce([(a, "resolved")])
    return 0


def _bisected(args) -> int:
    from attnwatch.history.detection.alerts import alert_events, record_bisected

    a = record_bisected(args.db, args.alert_id, args.commit, args.note, args.by or _default_actor())
    event = alert_events(args.db, a.alert_id)[-1]
    print(f"alert {a.alert_id}: {event.note} (recorded by {event.actor})")
    announce([(a, "bisected", event.note, event.actor)])
    return 0


def _notify(args) -> int:
    from datetime import datetime, timezone

    from attnwatch.ci.errors import UserError
    from attnwatch.history.detection.alerts import events_since

    try:
        since = datetime.fromisoformat(args.since)
    except ValueError:
        raise UserError(f"--since: expected an ISO 8601 date or date-time, got {args.since[:40]!r}") from None
    if since.tzinfo is not None:
        since = since.astimezone(timezone.utc).replace(tzinfo=None)
    events = events_since(args.db, since)
    failures = announce([(a, e.action, e.note, e.actor) for a, e in events])
    print(f"alerts notify: {len(events)} events since {since:%Y-%m-%d %H:%M} UTC, {len(failures)} not delivered")
    return 1 if failures else 0
