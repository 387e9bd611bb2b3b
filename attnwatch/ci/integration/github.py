"""A small GitHub REST client (standard library only) for the sticky PR comment.

What it does: read one pull request, find the pull requests whose head is a commit (including
fork PRs), find the comment this bot posted earlier (hidden marker AND author login, following
`Link` pagination), and create or update that one comment in place.

What it is careful about: rate limits (403/429 with `Retry-After`, or `x-ratelimit-remaining: 0`
with `x-ratelimit-reset`) are waited out a bounded number of times, each wait capped; 5xx
responses are retried with exponential backoff; pagination links are only followed on the API's
own host, so the token is never sent elsewhere; the token appears in no message, log or
exception (error texts are scrubbed of it).

Docs: https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api and
"best practices for using the REST API" (retry-after, x-ratelimit-reset, pagination via Link).
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from attnwatch.ci.errors import UserError
from attnwatch.history.contract import json_limits
from attnwatch.history.errors import BundleError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_BOT_LOGIN = "github-actions[bot]"
USER_AGENT = "attnwatch-pr-comment"
_LINK_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')
_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


class GitHubError(UserError):
    """A GitHub API call failed for good; `status` is the HTTP status (0: no response)."""

    def __init__(self, message: str, status: int = 0) -> None:
        self.status = status
        super().__init__(message)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    data: Any


@dataclass
class GitHubClient:
    repo: str  # "owner/name"
    token: str = field(repr=False)
    api_url: str = DEFAULT_API_URL
    max_retries: int = 3
    max_wait_s: float = 90.0
    timeout_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    log: Callable[[str], None] = lambda message: None

    def __post_init__(self) -> None:
        if not _REPO.match(self.repo or ""):
            raise GitHubError(f"GITHUB_REPOSITORY: expected owner/name, got {self.repo!r}")
        parts = urllib.parse.urlsplit(self.api_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise GitHubError(f"GITHUB_API_URL: not an http(s) URL: {self.api_url!r}")
        self.api_url = self.api_url.rstrip("/")
        self._origin = (parts.scheme, parts.netloc)

    # ------------------------------------------------------------------ transport

    def _scrub(self, text: str) -> str:
        return text.replace(self.token, "***") if self.token else text

    def _url(self, path_or_url: str, params: dict | None = None) -> str:
        url = path_or_url if path_or_url.startswith(("http://", "https://")) else self.api_url + path_or_url
        parts = urllib.parse.urlsplit(url)
        if (parts.scheme, parts.netloc) != self._origin:
            raise GitHubError(f"refusing to send the token to another host: {parts.netloc!r}")
        if params:
            url += ("&" if parts.query else "?") + urllib.parse.urlencode(params)
        return url

    def _retry_wait(self, status: int, headers: dict[str, str], attempt: int) -> float | None:
        """Seconds to wait before retrying, or None when the response is final."""
        retry_after = headers.get("retry-after")
        if status in (403, 429) and retry_after:
            if retry_after.strip().isdigit():
                return float(retry_after.strip())
            when = email.utils.parsedate_to_datetime(retry_after)
            return max(0.0, when.timestamp() - time.time()) if when else 60.0
        if status in (403, 429) and headers.get("x-ratelimit-remaining") == "0":
            reset = headers.get("x-ratelimit-reset", "")
            return max(0.0, float(reset) - time.time()) + 1.0 if reset.isdigit() else 60.0
        if status == 429:  # secondary limit without headers: at least a minute, say the docs
            return 60.0
        if status >= 500:
            return min(2.0**attempt, 30.0)
        return None

    def request(self, method: str, path: str, body: Any = None, params: dict | None = None) -> Response:
        url = self._url(path, params)
        data = None if body is None else json.dumps(body).encode("utf-8")
        for attempt in range(self.max_retries + 1):
            req = urllib.request.Request(url, data=data, method=method)
            req.add_header("Accept", "application/vnd.github+json")
            req.add_header("X-GitHub-Api-Version", "2022-11-28")
            req.add_header("User-Agent", USER_AGENT)
            if self.token:
                req.add_header("Authorization", f"Bearer {self.token}")
            if data is not None:
                req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    status, headers, raw = resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
            except urllib.error.HTTPError as exc:
                status, headers, raw = exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt < self.max_retries:
                    self.sleep(min(2.0**attempt, 30.0))
                    continue
                raise GitHubError(
                    self._scrub(f"{method} {urllib.parse.urlsplit(url).path}: no response: {exc}")
                ) from None
            if status < 400:
                return Response(status, headers, _payload(raw, method, url))
            wait = self._retry_wait(status, headers, attempt)
            if wait is not None and attempt < self.max_retries:
                if wait > self.max_wait_s:
                    raise GitHubError(
                        f"{method} {urllib.parse.urlsplit(url).path}: HTTP {status}: rate limited for "
                        f"{wait:.0f} s, more than the {self.max_wait_s:.0f} s this job will wait",
                        status,
                    )
                self.log(f"GitHub answered HTTP {status}; retrying in {wait:.1f} s ({attempt + 1}/{self.max_retries})")
                self.sleep(wait)
                continue
            raise GitHubError(
                self._scrub(f"{method} {urllib.parse.urlsplit(url).path}: HTTP {status}: {_message(raw)}"), status
            )
        raise GitHubError(f"{method} {urllib.parse.urlsplit(url).path}: gave up after {self.max_retries} retries")

    def paginate(self, path: str, params: dict | None = None, max_pages: int = 50) -> Iterator[Any]:
        """Items of a list endpoint, following `Link: rel="next"` (same host only)."""
        url: str | None = self._url(path, {"per_page": 100, **(params or {})})
        for _ in range(max_pages):
            if url is None:
                return
            resp = self.request("GET", url)
            if not isinstance(resp.data, list):
                raise GitHubError(f"GET {urllib.parse.urlsplit(url).path}: expected a list")
            yield from resp.data
            match = _LINK_NEXT.search(resp.headers.get("link", ""))
            url = match.group(1) if match else None

    # ------------------------------------------------------------------ operations

    def pulls_for_sha(self, sha: str) -> list[int]:
        """Open PR numbers whose head is `sha`: the commit's associated PRs, then (fork PRs are
        not always associated) a scan of open PRs' head.sha.

        An associated PR counts when its head is `sha` and its `state` is "open" or not given
        (not every server that speaks this API returns it; a PR whose head is still this commit
        is one to comment on). Either list answering 404 (a commit this repository does not
        have, an endpoint the server lacks) means none found there, not a failed job.
        """
        if not _SHA.match(sha or ""):
            raise GitHubError(f"not a commit SHA: {sha!r}")
        found = _heads_at(self._list_or_none(f"/repos/{self.repo}/commits/{sha}/pulls"), sha)
        return found or _heads_at(self._list_or_none(f"/repos/{self.repo}/pulls", {"state": "open"}), sha)

    def _list_or_none(self, path: str, params: dict | None = None) -> list:
        """All items of a list endpoint; [] (said in the log) when it answers 404."""
        try:
            return list(self.paginate(path, params))
        except GitHubError as exc:
            if exc.status != 404:
                raise
            self.log(f"GitHub answered 404 for {path}; taking it as no pull requests there")
            return []

    def pull_request(self, number: int) -> dict:
        """The pull request `number` as the API reports it now (head SHA, head repository, state)."""
        resp = self.request("GET", f"/repos/{self.repo}/pulls/{int(number)}")
        if not isinstance(resp.data, dict):
            raise GitHubError(f"GET /repos/{self.repo}/pulls/{int(number)}: expected an object")
        return resp.data

    def find_comment(self, pr: int, marker: str, author: str) -> dict | None:
        """The earliest comment on `pr` by `author` that carries `marker`, or None."""
        for comment in self.paginate(f"/repos/{self.repo}/issues/{int(pr)}/comments"):
            if (comment.get("user") or {}).get("login") == author and marker in (comment.get("body") or ""):
                return comment
        return None

    def upsert_comment(self, pr: int, body: str, marker: str, author: str) -> tuple[str, int]:
        """Update the sticky comment in place, or create it. Returns ("updated"|"created", id)."""
        existing = self.find_comment(pr, marker, author)
        if existing is not None:
            resp = self.request("PATCH", f"/repos/{self.repo}/issues/comments/{int(existing['id'])}", {"body": body})
            return "updated", int(resp.data["id"])
        resp = self.request("POST", f"/repos/{self.repo}/issues/{int(pr)}/comments", {"body": body})
        return "created", int(resp.data["id"])


def _heads_at(pulls: list, sha: str) -> list[int]:
    """Numbers of the pull requests in `pulls` whose head is `sha` and whose state is open or not given."""
    return sorted(
        {
            p["number"]
            for p in pulls
            if isinstance(p, dict)
            and isinstance(p.get("number"), int)
            and p.get("state", "open") == "open"
            and isinstance(p.get("head"), dict)
            and p["head"].get("sha") == sha
        }
    )


def _payload(raw: bytes, method: str, url: str) -> Any:
    """An answer's JSON, read by the strict reader (history.contract.json_limits); GitHubError if it is none."""
    if not raw.strip():
        return None
    where = f"{method} {urllib.parse.urlsplit(url).path}"
    try:
        return json_limits.loads(raw.decode("utf-8"), where)
    except BundleError as exc:
        raise GitHubError(f"{where}: the answer is not JSON attnwatch reads: {exc.field}: {exc.message}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GitHubError(f"{where}: the answer is not JSON: {exc}") from None


def _message(raw: bytes) -> str:
    try:
        data = json.loads(raw.decode("utf-8"))
        text = str(data.get("message", "")) if isinstance(data, dict) else ""
        errors = data.get("errors") if isinstance(data, dict) else None
        if errors:
            text += f" ({json.dumps(errors)[:300]})"
        return text[:500] or "(no message)"
    except (ValueError, UnicodeDecodeError):
        return raw[:200].decode("utf-8", "replace")


def client_from_env(log: Callable[[str], None], missing_token: str) -> GitHubClient:
    """The client of the job this runs in: $GITHUB_REPOSITORY, $GITHUB_TOKEN and $GITHUB_API_URL
    (a one-line UserError, `missing_token`, when the token is not set)."""
    token = os.environ.get("GITHUB_TOKEN", "")
    if not token:
        raise UserError(missing_token)
    return GitHubClient(
        repo=os.environ.get("GITHUB_REPOSITORY", ""),
        token=token,
        api_url=os.environ.get("GITHUB_API_URL", DEFAULT_API_URL),
        log=log,
    )


def actions_run_url() -> str | None:
    """The link to the Actions run this job belongs to, from the runner's environment (None outside one)."""
    server, repo, run_id = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    return f"{server.rstrip('/')}/{repo}/actions/runs/{run_id}" if server and repo and run_id else None


def append_step_summary(markdown: str) -> None:
    """Append to the job's summary page ($GITHUB_STEP_SUMMARY), when the job has one."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with Path(summary).open("a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")
