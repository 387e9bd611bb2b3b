"""A GitHub-compatible REST server on loopback for tests: real HTTP, in-memory state.

Implements what attnwatch's client uses: commit -> associated pulls, open pulls, one pull, issue comments
(list with Link pagination, create, update), issues (list by state and label, create, close), GitHub's 65,536-character body limit (422), and
scripted failures (403/429 with Retry-After or x-ratelimit-* headers) queued per request.
Every request is recorded (method, path, Authorization header) so tests can check what was sent.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

BODY_LIMIT = 65536


@dataclass
class StubState:
    repo: str = "octo/kernels"
    page_size: int = 2  # small, so every list paginates
    pulls: list[dict] = field(default_factory=list)  # {"number", "state", "head": {"sha", "repo": {...}}}
    associated: dict[str, list[int]] = field(default_factory=dict)  # sha -> PR numbers (same-repo PRs)
    comments: dict[int, list[dict]] = field(default_factory=dict)  # issue number -> comments
    issues: list[dict] = field(default_factory=list)  # {"number", "title", "body", "state", "labels", "user"}
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)  # next responses to fail
    requests: list[dict] = field(default_factory=list)
    not_found: set[str] = field(default_factory=set)  # paths under /repos/{repo}/ answered 404, e.g. "pulls"
    next_id: int = 1000
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_comment(self, issue: int, body: str, login: str) -> dict:
        with self.lock:
            self.next_id += 1
            comment = {"id": self.next_id, "body": body, "user": {"login": login}}
            self.comments.setdefault(issue, []).append(comment)
            return comment


class _Handler(BaseHTTPRequestHandler):
    server_version = "GitHubStub/1"
    state: StubState

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, payload, headers: dict[str, str] | None = None) -> None:
        raw = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(raw)

    def _page(self, items: list, query: dict) -> None:
        size = min(int(query.get("per_page", ["30"])[0]), self.state.page_size)
        page = int(query.get("page", ["1"])[0])
        chunk = items[(page - 1) * size : page * size]
        headers = {}
        if page * size < len(items):
            base = f"http://{self.headers['Host']}{urlsplit(self.path).path}"
            rest = {k: v[0] for k, v in query.items() if k != "page"}
            rest_q = "&".join(f"{k}={v}" for k, v in rest.items())
            headers["Link"] = f'<{base}?{rest_q}&page={page + 1}>; rel="next", <{base}?page=999>; rel="last"'
        self._send(200, chunk, headers)

    def _handle(self, method: str) -> None:
        state = self.state
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        state.requests.append(
            {
                "method": method,
                "path": parts.path,
                "query": parts.query,
                "authorization": self.headers.get("Authorization"),
            }
        )
        if state.failures:
            status, headers = state.failures.pop(0)
            self._send(status, {"message": "API rate limit exceeded (stub)"}, headers)
            return
        prefix = f"/repos/{state.repo}"
        path = parts.path
        if not path.startswith(prefix):
            self._send(404, {"message": "Not Found"})
            return
        rest = path[len(prefix) :].strip("/").split("/")
        if "/".join(rest) in state.not_found:
            self._send(404, {"message": "Not Found"})
            return
        if method == "GET" and len(rest) == 3 and rest[0] == "commits" and rest[2] == "pulls":
            numbers = state.associated.get(rest[1], [])
            self._page([p for p in state.pulls if p["number"] in numbers], query)
        elif method == "GET" and len(rest) == 2 and rest[0] == "pulls" and rest[1].isdigit():
            found = [p for p in state.pulls if p["number"] == int(rest[1])]
            self._send(200, found[0]) if found else self._send(404, {"message": "Not Found"})
        elif method == "GET" and rest == ["pulls"]:
            wanted = query.get("state", ["open"])[0]
            self._page([p for p in state.pulls if wanted == "all" or p["state"] == wanted], query)
        elif rest == ["issues"] and method == "GET":
            wanted, label = query.get("state", ["open"])[0], query.get("labels", [None])[0]
            self._page(
                [
                    i
                    for i in state.issues
                    if (wanted == "all" or i["state"] == wanted)
                    and (label is None or label in [lb["name"] for lb in i["labels"]])
                ],
                query,
            )
        elif rest == ["issues"] and method == "POST":
            with state.lock:
                state.next_id += 1
                issue = {
                    "number": state.next_id,
                    "title": body["title"],
                    "body": body.get("body", ""),
                    "state": "open",
                    "labels": [{"name": n} for n in body.get("labels", [])],
                    "user": {"login": "github-actions[bot]"},
                }
                state.issues.append(issue)
            self._send(201, issue)
        elif method == "PATCH" and len(rest) == 2 and rest[0] == "issues" and rest[1].isdigit():
            found = [i for i in state.issues if i["number"] == int(rest[1])]
            if not found:
                self._send(404, {"message": "Not Found"})
                return
            found[0].update({k: v for k, v in body.items() if k in ("state", "title", "body")})
            self._send(200, found[0])
        elif len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
            issue = int(rest[1])
            if method == "GET":
                self._page(state.comments.get(issue, []), query)
            elif method == "POST":
                if len(body.get("body", "")) > BODY_LIMIT:
                    self._send(
                        422,
                        {
                            "message": "Validation Failed",
                            "errors": [
                                {
                                    "field": "body",
                                    "code": "custom",
                                    "message": "body is too long (maximum is 65536 characters)",
                                }
                            ],
                        },
                    )
                    return
                self._send(201, state.add_comment(issue, body["body"], "github-actions[bot]"))
            else:
                self._send(405, {"message": "method not allowed"})
        elif method == "PATCH" and len(rest) == 3 and rest[:2] == ["issues", "comments"]:
            if len(body.get("body", "")) > BODY_LIMIT:
                self._send(422, {"message": "Validation Failed", "errors": [{"field": "body", "code": "custom"}]})
                return
            for comments in state.comments.values():
                for c in comments:
                    if c["id"] == int(rest[2]):
                        c["body"] = body["body"]
                        self._send(200, c)
                        return
            self._send(404, {"message": "Not Found"})
        else:
            self._send(404, {"message": "Not Found"})

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PATCH(self):  # noqa: N802
        self._handle("PATCH")


class GitHubStub:
    """Context manager: `with GitHubStub() as gh: gh.url, gh.state`."""

    def __init__(self, state: StubState | None = None) -> None:
        self.state = state or StubState()
        handler = type("Handler", (_Handler,), {"state": self.state})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> "GitHubStub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
