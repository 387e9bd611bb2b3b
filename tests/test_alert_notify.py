"""Alert transitions reach people: a webhook (Slack-compatible and generic JSON) with retries
and backoff, and one GitHub issue per alert. Real HTTP on loopback, including a server that
fails, stalls and answers 429; a real DuckDB history; the real CLI."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.integration.github import GitHubClient
from attnwatch.ci.integration.notify.issues import LABEL, AlertIssues, marker
from attnwatch.ci.integration.notify.messages import Transition, payload
from attnwatch.ci.integration.notify.webhook import Webhook, WebhookError
from github_stub import GitHubStub
from attnwatch.history.detection.alerts import NewAlert, alert_events, get_alerts, record_alerts
from attnwatch.history.store.db import open_write
from attnwatch.history.store.transactions import write_transaction
from attnwatch.history.store.location import parse_location

SECRET_PATH = "/services/T0000/B0000/s3cr3tHookPart"
TOKEN = "tok_very_secret_value"
HOSTILE_CASE = "evil/<!channel>/@here/<https://x.example|click>"


class Hook:
    """A webhook receiver on loopback; `script` is the answers to give, in order, then 200s.
    An answer is a status, or ("stall", seconds) to say nothing for that long."""

    def __init__(self, script=()):
        self.script = list(script)
        self.received: list[dict] = []
        self.headers: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                answer = hook.script.pop(0) if hook.script else 200
                if isinstance(answer, tuple):
                    time.sleep(answer[1])
                    answer = 200
                hook.headers.append(dict(self.headers))
                if answer == 200:
                    hook.received.append(json.loads(raw))
                extra = {"Retry-After": "1"} if answer == 429 else {}
                text = f"bad request, your token was {self.headers.get('Authorization')} at {self.path}".encode()
                try:
                    self.send_response(answer)
                    for k, v in extra.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # a slow answer's client gave up waiting: what the timeout tests want

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{SECRET_PATH}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _history(db_path, case_id="triton_fa2/b4_h16_s1k/fp16/causal"):
    finding = NewAlert(
        dedup_key=f"step|{case_id}|NVIDIA H200|median_us|{'a' * 40}|pool",
        kind="regression",
        metric="median_us",
        case_id=case_id,
        gpu_name="NVIDIA H200",
        run_id="run-10",
        commit_sha="a" * 40,
        baseline_value=10.0,
        new_value=10.6,
        change_pct=6.0,
        detail="latency +6.0%",
        pool="pool",
    )
    with open_write(parse_location(db_path)) as con:
        ids, _ = write_transaction(con, lambda c, claims: record_alerts(c, [finding], claims), str(db_path))
    return get_alerts(parse_location(db_path), ids)[0]


def test_fails_stalls_and_429_are_retried_with_backoff_until_delivered(tmp_path, db_path):
    alert = _history(db_path)
    waits = []
    with Hook([500, ("stall", 1.5), 429]) as hook:
        status = Webhook(hook.url, "json", timeout_s=0.5, sleep=waits.append).post(Transition.of(alert, "opened"))
    assert status == 200 and len(hook.received) == 1
    assert waits == [1.0, 2.0, 1.0]  # backoff 1 s, 2 s; then the 429's Retry-After
    body = hook.received[0]
    assert (
        body["event"] == "opened" and body["alert"]["case_id"] == alert.case_id and body["alert"]["change_pct"] == 6.0
    )


def test_a_server_that_never_recovers_is_a_one_line_error_without_the_secret(tmp_path, db_path):
    alert = _history(db_path)
    with Hook([503] * 10) as hook:
        with pytest.raises(WebhookError) as err:
            Webhook(hook.url, token=TOKEN, max_retries=2, sleep=lambda s: None).post(Transition.of(alert, "opened"))
    message = str(err.value)
    assert "gave up after 2 retries" in message and "\n" not in message
    assert "s3cr3tHookPart" not in message and TOKEN not in message and "T0000" not in message
    with Hook([400]) as hook:
        with pytest.raises(WebhookError) as err:  # final at once: a 4xx other than 429 is not retried
            Webhook(hook.url, token=TOKEN, sleep=lambda s: pytest.fail("retried a 400")).post(
                Transition.of(alert, "opened")
            )
        assert len(hook.headers) == 1 and hook.headers[0]["Authorization"] == f"Bearer {TOKEN}"
    assert "HTTP 400" in str(err.value) and TOKEN not in str(err.value) and "s3cr3t" not in str(err.value)


def test_untrusted_text_cannot_mention_link_or_break_lines(db_path):
    alert = _history(db_path, case_id=HOSTILE_CASE)
    t = Transition.of(alert, "acknowledged", note="looking\n<!here> @channel \u202eevil", actor="<@U123>")
    text = payload(t, "slack")["text"]
    assert "<!channel>" not in text and "<!here>" not in text and "<@U123>" not in text and "<https://x" not in text
    assert "&lt;!channel&gt;" in text and "@\u200dhere" in text and "@\u200dchannel" in text and "\u202e" not in text
    assert text.count("\n") == 1  # the header line and the note line, no injected lines
    assert payload(t, "slack")["parse"] == "none" and payload(t, "slack")["link_names"] is False
    generic = payload(t, "json")["alert"]
    assert "\n" not in generic["note"] and "\u202e" not in generic["note"]


def test_cli_transitions_are_posted_and_can_be_sent_again(tmp_path, db_path, monkeypatch, capsys):
    alert = _history(db_path)
    with Hook() as hook:
        monkeypatch.setenv("ATTNWATCH_WEBHOOK_URL", hook.url)
        monkeypatch.setenv("ATTNWATCH_WEBHOOK_FORMAT", "json")
        assert (
            main(["--db", str(db_path), "alerts", "ack", str(alert.alert_id), "--note", "looking", "--by", "ana"]) == 0
        )
        assert (
            main(
                [
                    "--db",
                    str(db_path),
                    "alerts",
                    "bisected",
                    str(alert.alert_id),
                    "--commit",
                    "b" * 40,
                    "--by",
                    "bisect-bot",
                ]
            )
            == 0
        )
        assert main(["--db", str(db_path), "alerts", "resolve", str(alert.alert_id), "--by", "ben"]) == 0
        assert [b["event"] for b in hook.received] == ["acknowledged", "bisected", "resolved"]
        assert hook.received[1]["alert"]["note"] == f"bisected to {'b' * 40}"
        hook.received.clear()
        assert main(["--db", str(db_path), "alerts", "notify", "--since", "2000-01-01"]) == 0
        assert [b["event"] for b in hook.received] == ["opened", "acknowledged", "bisected", "resolved"]
    assert [e.action for e in alert_events(parse_location(db_path), alert.alert_id)] == [
        "opened",
        "acknowledged",
        "bisected",
        "resolved",
    ]
    capsys.readouterr()
    with Hook([500] * 10) as hook:  # the transition is recorded; the failed delivery is said, in one line
        monkeypatch.setenv("ATTNWATCH_WEBHOOK_URL", hook.url)
        import attnwatch.ci.integration.notify.webhook as webhook

        monkeypatch.setattr(webhook.time, "sleep", lambda s: None)
        assert main(["--db", str(db_path), "alerts", "notify", "--since", "2000-01-01"]) == 1
    err = capsys.readouterr().err
    assert "notification not delivered" in err and "s3cr3t" not in err


def test_one_github_issue_per_alert_opened_commented_and_closed(db_path):
    alert = _history(db_path, case_id=HOSTILE_CASE)
    with GitHubStub() as gh:
        issues = AlertIssues(GitHubClient("octo/kernels", "tok", api_url=gh.url, sleep=lambda s: None))
        spoof = {
            "number": 1,
            "title": "x",
            "body": marker(Transition.of(alert, "opened")),
            "state": "open",
            "labels": [{"name": LABEL}],
            "user": {"login": "mallory"},
        }
        gh.state.issues.append(spoof)
        assert issues.apply(Transition.of(alert, "opened"))[0] == "opened"
        assert issues.apply(Transition.of(alert, "opened"))[0] == "already open"  # a rerun adds nothing
        did, number = issues.apply(Transition.of(alert, "acknowledged", note="@team look <b>here</b>", actor="ana"))
        assert did == "commented" and number != 1
        gh.state.failures.append((429, {"Retry-After": "0"}))  # a rate limit on the way is waited out
        assert issues.apply(Transition.of(alert, "resolved", note="fixed", actor="ben")) == ("closed", number)
        ours = next(i for i in gh.state.issues if i["number"] == number)
        assert ours["state"] == "closed" and spoof["state"] == "open"
        assert len([i for i in gh.state.issues if i["user"]["login"] == "github-actions[bot]"]) == 1
        notes = [c["body"] for c in gh.state.comments[number]]
        assert notes[0].startswith("**acknowledged** by ana") and "@team" not in notes[0] and "<b>" not in notes[0]
        outside = re.sub(r"`[^`\n]*`", "", ours["body"])  # code spans show their text literally
        assert "@here" not in outside and "<!channel>" not in outside and "<https" not in outside
