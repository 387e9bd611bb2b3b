"""Send the alert transitions a command just made to where the environment says.

`ATTNWATCH_WEBHOOK_URL` (+ `ATTNWATCH_WEBHOOK_FORMAT`: slack, the default, or json; and
`ATTNWATCH_WEBHOOK_TOKEN`, sent as a bearer token) posts each transition to a webhook
(ci.integration.notify.webhook). `ATTNWATCH_ALERT_ISSUES=1` with `GITHUB_REPOSITORY` and `GITHUB_TOKEN`
keeps one GitHub issue per alert (ci.integration.notify.issues). Neither set: nothing is sent.

A transition is recorded in the history before it is announced; a delivery that fails after its
retries is said on stderr in one line and returned, and the command that made the transition
still succeeds (the record is what counts; `attnwatch alerts notify --since` sends again).
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Sequence

from attnwatch.ci.integration.notify.messages import Transition


def webhook_from_env(log: Callable[[str], None]):
    from attnwatch.ci.integration.notify.webhook import Webhook

    url = os.environ.get("ATTNWATCH_WEBHOOK_URL", "").strip()
    if not url:
        return None
    return Webhook(
        url,
        os.environ.get("ATTNWATCH_WEBHOOK_FORMAT", "slack").strip() or "slack",
        token=os.environ.get("ATTNWATCH_WEBHOOK_TOKEN") or None,
        log=log,
    )


def issues_from_env(log: Callable[[str], None]):
    if os.environ.get("ATTNWATCH_ALERT_ISSUES", "").strip() not in ("1", "true", "yes"):
        return None
    from attnwatch.ci.integration.github import DEFAULT_API_URL, GitHubClient
    from attnwatch.ci.integration.notify.issues import AlertIssues

    client = GitHubClient(
        os.environ.get("GITHUB_REPOSITORY", ""),
        os.environ.get("GITHUB_TOKEN", ""),
        api_url=os.environ.get("GITHUB_API_URL", DEFAULT_API_URL),
        log=log,
    )
    return AlertIssues(client, dashboard_url=os.environ.get("ATTNWATCH_DASHBOARD_URL"))


def announce(transitions: Sequence[Transition], log: Callable[[str], None] | None = None) -> list[str]:
    """Deliver `transitions` to every configured destination; returns the failures (also logged)."""
    log = log or (lambda m: print(f"attnwatch: {m}", file=sys.stderr))
    if not transitions:
        return []
    failures: list[str] = []
    webhook = webhook_from_env(log)
    if webhook is not None:
        failures += webhook.post_all(transitions)
    issues = issues_from_env(log)
    if issues is not None:
        failures += issues.apply_all(transitions)
    for f in failures:
        log(f"notification not delivered: {f}")
    return failures
