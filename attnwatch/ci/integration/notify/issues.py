"""One GitHub issue per alert: opened with it, commented on as it moves, closed with it.

The issue is found again by a hidden marker in its body (a hash of the alert's dedup_key, which
is the same in every copy of a history) AND its author (the bot login that opens them) AND the
label: an issue anyone else wrote with the same marker is never taken for the alert's. Every
value from the alert (case id, GPU, note, actor) is untrusted and goes through
ci.integration.comment.escape. Transport, retries and rate limits are ci.integration.github's.
"""

from __future__ import annotations

import hashlib

from attnwatch.ci.integration.comment.escape import md_code, md_text, safe_url
from attnwatch.ci.integration.github import DEFAULT_BOT_LOGIN, GitHubClient, GitHubError
from attnwatch.ci.integration.notify.messages import NOTE_CHARS, Transition

LABEL = "attnwatch-alert"


def marker(t: Transition) -> str:
    return f"<!-- attnwatch:alert:{hashlib.sha256(t.dedup_key.encode('utf-8')).hexdigest()[:24]} -->"


def title(t: Transition) -> str:
    change = t.change().strip()
    return (
        f"attnwatch: {t.kind}{' ' + change if change else ''} in {t.case_id[:120]} "
        f"({t.metric[:40]}) on {(t.gpu_name or 'unknown GPU')[:60]}"
    )


def body(t: Transition) -> str:
    lines = [
        marker(t),
        f"**{md_text(t.kind)}**{md_text(t.change())} in {md_code(t.case_id)} "
        f"({md_code(t.metric)}) on {md_text(t.gpu_name or 'unknown GPU')}, step at {md_code((t.commit_sha or '')[:12])}.",
        "",
        f"attnwatch alert {t.alert_id}; this issue follows its lifecycle and is closed when it is resolved.",
    ]
    if t.attribution:
        lines += ["", f"What moved across the step: {md_text(t.attribution, 500)}"]
    if safe_url(t.link):
        lines += ["", f"[trend on the dashboard]({safe_url(t.link)})"]
    if t.note:
        lines += ["", f"> {md_text(t.note, NOTE_CHARS)}"]
    return "\n".join(lines) + "\n"


def comment(t: Transition) -> str:
    return (
        f"**{t.action}** by {md_text(t.actor or 'someone', 100)}"
        + (f": {md_text(t.note, 1000)}" if t.note else "")
        + "\n"
    )


class AlertIssues:
    def __init__(self, client: GitHubClient, bot_login: str = DEFAULT_BOT_LOGIN, dashboard_url: str | None = None):
        self.client = client
        self.bot_login = bot_login
        self.dashboard_url = dashboard_url

    def find(self, t: Transition) -> dict | None:
        """The alert's issue (open or closed), or None."""
        mark = marker(t)
        for issue in self.client.paginate(f"/repos/{self.client.repo}/issues", {"state": "all", "labels": LABEL}):
            if (
                isinstance(issue, dict)
                and (issue.get("user") or {}).get("login") == self.bot_login
                and mark in (issue.get("body") or "")
                and "pull_request" not in issue
            ):
                return issue
        return None

    def apply(self, t: Transition) -> tuple[str, int]:
        """Open, comment on or close the alert's issue for `t`; returns (what was done, issue number)."""
        repo = self.client.repo
        issue = self.find(t)
        if issue is None:
            created = self.client.request(
                "POST", f"/repos/{repo}/issues", {"title": title(t), "body": body(t), "labels": [LABEL]}
            ).data
            number = int(created["number"])
            if t.action == "opened":
                return "opened", number
        else:
            number = int(issue["number"])
            if t.action == "opened":
                return "already open", number
        self.client.request("POST", f"/repos/{repo}/issues/{number}/comments", {"body": comment(t)})
        if t.action == "resolved":
            self.client.request(
                "PATCH", f"/repos/{repo}/issues/{number}", {"state": "closed", "state_reason": "completed"}
            )
            return "closed", number
        return "commented", number

    def apply_all(self, transitions) -> list[str]:
        failures = []
        for t in transitions:
            try:
                self.apply(t)
            except GitHubError as exc:
                failures.append(f"alert {t.alert_id} {t.action} as a GitHub issue: {exc}")
        return failures
