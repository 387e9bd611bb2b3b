"""What a notification says about one alert transition, neutralised for where it goes.

An alert's case id, GPU name, note and actor come from bundles, PR authors and people typing on
the dashboard: untrusted. Slack's mrkdwn turns `<...>` into links and mentions (`<!channel>`,
`<@U123>`) and its docs ask for `&`, `<` and `>` to be escaped as entities
(https://api.slack.com/reference/surfaces/formatting#escaping); a zero-width joiner after every
`@` keeps a plain `@channel` or `@user` from pinging anyone on servers that link names. Control
and bidirectional-override characters become spaces, and every field is capped. The generic JSON
format carries the same cleaned fields as data (JSON escaping is the receiver's parser's job).
GitHub issues get ci.integration.comment.escape's markdown escaping.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnwatch.ci.integration.comment.escape import safe_url
from attnwatch.history.analysis.ncu_explain import CAUSE_CHARS
from attnwatch.history.terminal_text import UNSAFE as _CONTROL  # C0, DEL, C1, line separators, bidi controls

ACTIONS = ("opened", "acknowledged", "resolved", "bisected")
FORMATS = ("slack", "json")
_SLACK = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "@\u200d"}
# An opened alert's note is its detail and its whole cause line (history.detection.ncu_cause.with_cause).
NOTE_CHARS = 300 + CAUSE_CHARS
_ICON = {"opened": ":red_circle:", "acknowledged": ":eyes:", "resolved": ":white_check_mark:", "bisected": ":mag:"}


def clean(value: object, limit: int = 300) -> str:
    """One line of plain text, at most `limit` characters."""
    text = " ".join(_CONTROL.sub(" ", "" if value is None else str(value)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slack_text(value: object, limit: int = 300) -> str:
    return "".join(_SLACK.get(ch, ch) for ch in clean(value, limit))


@dataclass(frozen=True)
class Transition:
    """One lifecycle event of one alert, as the notification shows it."""

    action: str
    alert_id: int
    kind: str
    case_id: str
    metric: str
    gpu_name: str | None
    commit_sha: str | None
    change_pct: float | None
    status: str
    note: str
    actor: str
    dedup_key: str
    link: str | None = None  # the alert's trend on the dashboard (history.links), if known
    # What moved across the step, with each change from -> to (history/analysis/attribution.py);
    # None for an alert from before attribution (or a correctness alert).
    attribution: str | None = None

    @classmethod
    def of(cls, alert, action: str, note: str | None = None, actor: str | None = None, link: str | None = None):
        """From a history.detection.alerts.Alert; `note` and `actor` default to the alert's latest."""
        if action not in ACTIONS:
            raise ValueError(f"unknown alert action {action!r} (known: {', '.join(ACTIONS)})")
        return cls(
            action,
            int(alert.alert_id),
            alert.kind,
            alert.case_id,
            alert.metric,
            alert.gpu_name,
            alert.commit_sha,
            alert.change_pct,
            alert.status,
            alert.note if note is None else note,
            alert.actor if actor is None else actor,
            alert.dedup_key,
            link,
            attribution_text(alert),
        )

    def change(self) -> str:
        return "" if self.change_pct is None else f" {self.change_pct:+.1f}%"

    def fields(self) -> dict:
        """The cleaned fields (the generic JSON payload's `alert`)."""
        return {
            "id": self.alert_id,
            "kind": self.kind,
            "status": self.status,
            "case_id": clean(self.case_id, 200),
            "metric": clean(self.metric, 50),
            "gpu": clean(self.gpu_name, 100),
            "commit": clean(self.commit_sha, 64),
            "change_pct": self.change_pct,
            "note": clean(self.note, NOTE_CHARS),
            "actor": clean(self.actor, 100),
            "link": self.link,
            "attribution": clean(self.attribution, 500) if self.attribution else None,
        }


def attribution_text(alert) -> str | None:
    """An alert's attribution and its changes in one line (None where it has none)."""
    label = getattr(alert, "attribution", None)
    if not label:
        return None
    from attnwatch.history.analysis.attribution import stored_changes

    changes = stored_changes(getattr(alert, "attribution_changes", None))
    return label + (": " + "; ".join(c.text() for c in changes) if changes else "")


def payload(t: Transition, fmt: str) -> dict:
    """The webhook body: Slack-compatible (`text`, no link parsing) or generic JSON."""
    if fmt == "json":
        return {"schema": "attnwatch.alert_event", "schema_version": 1, "event": t.action, "alert": t.fields()}
    if fmt != "slack":
        raise ValueError(f"unknown webhook format {fmt!r} (known: {', '.join(FORMATS)})")
    text = (
        f"{_ICON[t.action]} attnwatch alert {t.alert_id} {t.action}: {t.kind}{t.change()} "
        f"`{slack_text(t.case_id, 200)}` {slack_text(t.metric, 50)} on {slack_text(t.gpu_name, 100)} "
        f"at `{slack_text((t.commit_sha or '')[:12], 12)}`"
    )
    if t.attribution:
        text += f"\nwhat moved: {slack_text(t.attribution, 500)}"
    if t.note or t.actor:
        text += f"\n{slack_text(t.actor, 100)}: {slack_text(t.note, NOTE_CHARS)}"
    link = safe_url(t.link)
    if link and "|" not in link:
        text += f"\n<{link}|trend on the dashboard>"
    return {"text": text, "parse": "none", "link_names": False, "unfurl_links": False}
