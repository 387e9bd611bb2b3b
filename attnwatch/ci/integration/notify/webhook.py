"""Post alert transitions to a webhook (Slack-compatible or generic JSON), standard library only.

Retries: a connection error, a stalled server (no answer within `timeout_s`), HTTP 5xx and 429
are retried with exponential backoff (1, 2, 4 ... s, capped), a 429's `Retry-After` honoured up
to `max_wait_s`; any other 4xx is final (the request itself is wrong; sending it again changes
nothing). A webhook URL is a credential (Slack's carries its secret in the path), and so is an
optional bearer token: no message, log line or exception shows more of the URL than its scheme
and host (`where`), and the token is scrubbed from everything a server answers.
"""

from __future__ import annotations

import email.utils
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Iterable

from attnwatch.ci.errors import UserError
from attnwatch.ci.integration.notify.messages import FORMATS, Transition, clean, payload

USER_AGENT = "attnwatch-alerts"


class WebhookError(UserError):
    """A notification could not be delivered after its retries."""


@dataclass
class Webhook:
    url: str = field(repr=False)
    fmt: str = "slack"
    token: str | None = field(default=None, repr=False)  # sent as a bearer token when given
    max_retries: int = 4
    max_wait_s: float = 60.0
    timeout_s: float = 10.0
    sleep: Callable[[float], None] | None = None  # default time.sleep, looked up when waiting
    log: Callable[[str], None] = lambda message: None

    def __post_init__(self) -> None:
        parts = urllib.parse.urlsplit(self.url or "")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise WebhookError(
                "webhook URL: expected an http(s) URL (the URL itself is not shown: it may hold a secret)"
            )
        if self.fmt not in FORMATS:
            raise WebhookError(f"webhook format: expected one of {', '.join(FORMATS)}, got {clean(self.fmt, 40)!r}")
        self.where = f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")

    def _scrub(self, text: str) -> str:
        for secret in (self.url, self.token, urllib.parse.urlsplit(self.url).path):
            if secret and len(secret) > 1:
                text = text.replace(secret, "***")
        return clean(text, 300)

    def _wait(self, status: int, headers: dict[str, str], attempt: int) -> float | None:
        if status == 429:
            value = headers.get("retry-after", "").strip()
            if value.isdigit():
                return float(value)
            when = email.utils.parsedate_to_datetime(value) if value else None
            return max(0.0, when.timestamp() - time.time()) if when else min(2.0**attempt, 30.0)
        if status >= 500:
            return min(2.0**attempt, 30.0)
        return None

    def post(self, transition: Transition) -> int:
        """Deliver one transition; returns the HTTP status. Raises WebhookError when it cannot."""
        data = json.dumps(payload(transition, self.fmt)).encode("utf-8")
        what = f"alert {transition.alert_id} {transition.action} to {self.where}"
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(self.url, data=data, method="POST")
            req.add_header("Content-Type", "application/json")
            req.add_header("User-Agent", USER_AGENT)
            if self.token:
                req.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    resp.read()
                    return resp.status
            except urllib.error.HTTPError as exc:
                status, headers, raw = exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()[:300]
                reason = f"HTTP {status}: {self._scrub(raw.decode('utf-8', 'replace'))}"
                wait = self._wait(status, headers, attempt)
            except (urllib.error.URLError, TimeoutError, ConnectionError, socket.timeout) as exc:
                inner = getattr(exc, "reason", exc)
                reason = (
                    "no answer within the timeout"
                    if isinstance(inner, (TimeoutError, socket.timeout))
                    else f"no response: {self._scrub(str(inner))}"
                )
                wait = min(2.0**attempt, 30.0)
            if wait is None:
                raise WebhookError(f"{what}: {reason}")
            if attempt == self.max_retries:
                raise WebhookError(f"{what}: {reason}; gave up after {self.max_retries} retries")
            if wait > self.max_wait_s:
                raise WebhookError(f"{what}: {reason}; asked to wait {wait:.0f} s, more than {self.max_wait_s:.0f} s")
            self.log(f"{what}: {reason}; retrying in {wait:.1f} s ({attempt + 1}/{self.max_retries})")
            (self.sleep or time.sleep)(wait)
        raise AssertionError("unreachable")

    def post_all(self, transitions: Iterable[Transition]) -> list[str]:
        """Deliver each transition, the rest even when one fails; returns the failures' messages."""
        failures = []
        for t in transitions:
            try:
                self.post(t)
            except WebhookError as exc:
                failures.append(str(exc))
        return failures
