"""ci.integration.github against a GitHub-compatible server on loopback (tests/github_stub.py): real HTTP."""

from __future__ import annotations

import json
import time

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.compare.report import write_report
from attnwatch.ci.integration.github import GitHubClient, GitHubError
from compare_factory import make_report
from github_stub import GitHubStub, StubState

TOKEN = "ghs_s3cretTOKENvalue0123456789"
HEAD = "c" * 40  # compare_factory's head SHA
MARKER = "<!-- attnwatch:compare -->"


def _pull(number, sha, fork=False):
    repo = "someone/kernels-fork" if fork else "octo/kernels"
    return {"number": number, "state": "open", "head": {"sha": sha, "repo": {"full_name": repo}}}


@pytest.fixture
def stub():
    state = StubState(pulls=[_pull(1, "1" * 40), _pull(2, "2" * 40), _pull(3, "3" * 40)])
    with GitHubStub(state) as gh:
        yield gh


def _client(gh, **kw):
    waits = []
    client = GitHubClient(repo="octo/kernels", token=TOKEN, api_url=gh.url, sleep=waits.append, **kw)
    return client, waits


def test_pagination_follows_link_headers(stub):
    for i in range(7):
        stub.state.add_comment(5, f"comment {i}", "someone")
    client, _ = _client(stub)
    bodies = [c["body"] for c in client.paginate("/repos/octo/kernels/issues/5/comments")]
    assert bodies == [f"comment {i}" for i in range(7)]
    assert sum(r["path"].endswith("/issues/5/comments") for r in stub.state.requests) == 4  # 2 per page


def test_sticky_comment_found_by_marker_and_author_on_a_later_page(stub):
    stub.state.add_comment(2, "first!", "someone")
    stub.state.add_comment(2, MARKER + " quoted by a human", "someone")  # right marker, wrong author
    stub.state.add_comment(2, "unrelated bot comment", "github-actions[bot]")  # right author, no marker
    mine = stub.state.add_comment(2, MARKER + "\nold verdict", "github-actions[bot]")
    client, _ = _client(stub)
    action, comment_id = client.upsert_comment(2, MARKER + "\nnew verdict", MARKER, "github-actions[bot]")
    assert (action, comment_id) == ("updated", mine["id"])
    assert [c["body"] for c in stub.state.comments[2]][-1] == MARKER + "\nnew verdict"
    assert len(stub.state.comments[2]) == 4  # nothing added


def test_first_comment_is_created_then_updated_in_place(stub):
    client, _ = _client(stub)
    assert client.upsert_comment(1, MARKER + "\nv1", MARKER, "github-actions[bot]")[0] == "created"
    assert client.upsert_comment(1, MARKER + "\nv2", MARKER, "github-actions[bot]")[0] == "updated"
    assert [c["body"] for c in stub.state.comments[1]] == [MARKER + "\nv2"]


def test_429_with_retry_after_is_waited_out(stub):
    stub.state.failures = [(429, {"Retry-After": "7"}), (429, {"Retry-After": "3"})]
    client, waits = _client(stub)
    assert client.pulls_for_sha("2" * 40) == [2]
    assert waits[:2] == [7.0, 3.0]


def test_403_rate_limit_waits_until_reset(stub):
    reset = int(time.time()) + 20
    stub.state.failures = [(403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": str(reset)})]
    client, waits = _client(stub)
    client.pulls_for_sha("1" * 40)
    assert 15 <= waits[0] <= 22


def test_retries_are_bounded_and_long_waits_refused(stub):
    stub.state.failures = [(429, {"Retry-After": "1"})] * 10
    client, waits = _client(stub, max_retries=2)
    with pytest.raises(GitHubError, match="HTTP 429"):
        client.pulls_for_sha("1" * 40)
    assert len(waits) == 2
    stub.state.failures = [(429, {"Retry-After": "3600"})]
    client, _ = _client(stub)
    with pytest.raises(GitHubError, match="more than the 90 s"):
        client.pulls_for_sha("1" * 40)


def test_403_without_rate_limit_is_final(stub):
    stub.state.failures = [(403, {})]
    client, waits = _client(stub)
    with pytest.raises(GitHubError, match="HTTP 403") as exc:
        client.pulls_for_sha("1" * 40)
    assert waits == [] and exc.value.status == 403


def test_fork_pr_is_found_by_scanning_open_pulls(stub):
    fork_sha = "f" * 40
    stub.state.pulls.append(_pull(9, fork_sha, fork=True))  # not associated with the commit
    client, _ = _client(stub)
    assert client.pulls_for_sha(fork_sha) == [9]
    stub.state.associated["2" * 40] = [2]
    assert client.pulls_for_sha("2" * 40) == [2]
    assert client.pulls_for_sha("e" * 40) == []


def test_token_goes_only_to_the_api_host(stub):
    stub.state.add_comment(5, "x", "someone")
    client, _ = _client(stub)
    with pytest.raises(GitHubError, match="another host"):
        list(client.paginate("https://evil.example/steal"))
    assert all(r["authorization"] == f"Bearer {TOKEN}" for r in stub.state.requests)


def _cli(gh, tmp_path, report, monkeypatch, *extra):
    path = write_report(report, tmp_path / "compare.json")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_API_URL", gh.url)
    monkeypatch.setenv("GITHUB_REPOSITORY", "octo/kernels")
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    return main(["comment", "--compare", str(path), *extra]), summary


def test_comment_command_end_to_end_never_shows_the_token(stub, tmp_path, fixtures_dir, monkeypatch, capsys, caplog):
    stub.state.pulls.append(_pull(12, HEAD, fork=True))
    report = make_report(fixtures_dir, slowdown={"torch_3op/b4_h16_s1k/fp16/noncausal": 1.05})
    stub.state.failures = [(429, {"Retry-After": "0"})]
    rc, summary = _cli(stub, tmp_path, report, monkeypatch, "--sha", HEAD)
    assert rc == 0
    (comment,) = stub.state.comments[12]
    assert comment["body"].startswith(MARKER) and "1 regression" in comment["body"]
    assert "https://github.com/octo/kernels/actions/runs/4242" in comment["body"]
    assert "1 regression" in summary.read_text() and MARKER not in summary.read_text()
    rc, _ = _cli(stub, tmp_path, report, monkeypatch, "--sha", HEAD)  # a re-run updates the same comment
    assert rc == 0 and len(stub.state.comments[12]) == 1
    out = capsys.readouterr()
    assert "updated comment" in out.out
    for text in (out.out, out.err, caplog.text, summary.read_text(), json.dumps(stub.state.comments)):
        assert TOKEN not in text


def test_body_too_long_falls_back_to_the_short_form(stub, tmp_path, fixtures_dir, monkeypatch, capsys):
    import attnwatch.ci.integration.comment.render as render

    monkeypatch.setattr(render, "BODY_BUDGET", 70000)  # pretend the renderer misjudged the limit
    report = make_report(fixtures_dir)
    report.cases = [
        c.__class__(**{**c.__dict__, "case_id": f"{c.case_id}-{i}"}) for i in range(500) for c in report.cases
    ]
    stub.state.pulls.append(_pull(13, HEAD))  # by hand, the PR's current head must be the report's
    rc, _ = _cli(stub, tmp_path, report, monkeypatch, "--pr", "13")
    assert rc == 0
    assert any(r["method"] == "POST" for r in stub.state.requests)
    (comment,) = stub.state.comments[13]
    assert "refused by GitHub (too long)" in comment["body"]
    assert "HTTP 422" in capsys.readouterr().err


def test_dry_run_and_missing_token(tmp_path, fixtures_dir, monkeypatch, capsys):
    path = write_report(make_report(fixtures_dir), tmp_path / "compare.json")
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    assert main(["comment", "--compare", str(path), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(MARKER)
    assert main(["comment", "--compare", str(path), "--pr", "1"]) == 2
    assert "GITHUB_TOKEN is not set" in capsys.readouterr().err


def test_no_open_pr_for_the_sha_is_not_an_error(stub, tmp_path, fixtures_dir, monkeypatch, capsys):
    rc, _ = _cli(stub, tmp_path, make_report(fixtures_dir), monkeypatch, "--sha", "d" * 40)
    assert rc == 0 and "no open pull request" in capsys.readouterr().out
    assert all(r["method"] == "GET" for r in stub.state.requests)
