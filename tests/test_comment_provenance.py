"""Forged events and artifacts replayed against the comment job (`attnwatch comment
--workflow-run-event`, ci/integration/comment/provenance.py) and the loopback GitHub server
(tests/github_stub.py): each forgery is refused with its reason and nothing is posted; the
genuine runs are posted where the event (never the report) says."""

from __future__ import annotations

import json

import pytest

from attnwatch.cli.main import main
from attnwatch.ci.compare.report import write_report
from compare_factory import make_report
from github_stub import GitHubStub, StubState

TOKEN = "ghs_provenanceTOKEN0123456789"
REPO = "octo/kernels"
HEAD = "c" * 40  # compare_factory's head SHA: the commit the genuine run measured
OTHER_HEAD = "8" * 40  # the head of another PR
FORK_HEAD = "f" * 40
WORKFLOW = ".github/workflows/gpu-bench.yml"


def _pull(number, sha, repo=REPO, state="open"):
    return {"number": number, "state": state, "head": {"sha": sha, "repo": {"full_name": repo}}}


@pytest.fixture
def gh():
    state = StubState(
        repo=REPO, pulls=[_pull(7, HEAD), _pull(8, OTHER_HEAD), _pull(9, FORK_HEAD, "someone/kernels-fork")]
    )
    with GitHubStub(state) as stub:
        yield stub


def pr_run_event(**changes) -> dict:
    """The workflow_run event GitHub sends when gpu-bench finished on same-repository PR #7."""
    run = {
        "id": 4242,
        "run_attempt": 1,
        "name": "gpu-bench",
        "event": "pull_request",
        "status": "completed",
        "conclusion": "failure",
        "head_sha": HEAD,
        "head_branch": "tune-tiles",
        "path": WORKFLOW,
        "display_title": "Tune tiles",
        "html_url": f"https://github.com/{REPO}/actions/runs/4242",
        "repository": {"full_name": REPO},
        "head_repository": {"full_name": REPO},
        "pull_requests": [{"number": 7, "head": {"sha": HEAD}}],
    }
    run.update(changes)
    return {"action": "completed", "workflow_run": run, "repository": {"full_name": REPO, "default_branch": "main"}}


def dispatch_event(pr=9, sha=FORK_HEAD, **changes) -> dict:
    """A maintainer's dispatch of gpu-bench (mode=compare) on main, for PR `pr` at `sha`."""
    return pr_run_event(
        **{
            "event": "workflow_dispatch",
            "head_branch": "main",
            "head_sha": "a" * 40,
            "display_title": f"gpu-bench compare: PR #{pr} at {sha}",
            "pull_requests": [],
            **changes,
        }
    )


def _comment(gh, tmp_path, monkeypatch, fixtures_dir, event: dict | None, *extra, report_head=HEAD):
    report = make_report(fixtures_dir)
    report.head_sha = report_head
    compare = write_report(report, tmp_path / "compare.json")
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    for key, value in {
        "GITHUB_API_URL": gh.url,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_OUTPUT": str(outputs),
        "ATTNWATCH_DASHBOARD_URL": "https://dash.example.org",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    args = ["comment", "--compare", str(compare)]
    if event is not None:
        (tmp_path / "event.json").write_text(json.dumps(event))
        args += ["--workflow-run-event", str(tmp_path / "event.json")]
    return main([*args, *extra]), outputs.read_text()


def _writes(gh) -> list[dict]:
    return [r for r in gh.state.requests if r["method"] != "GET"]


def assert_refused(gh, capsys, rc, *reasons):
    err = capsys.readouterr().err
    assert rc == 2 and "refused:" in err, err
    for reason in reasons:
        assert reason in err, err
    assert _writes(gh) == [] and gh.state.comments == {}  # nothing posted anywhere
    assert TOKEN not in err


# ---------------------------------------------------------------- what is posted


def test_a_same_repository_pr_run_is_posted_on_that_pr_with_its_runs_linked(
    gh, tmp_path, monkeypatch, fixtures_dir, capsys
):
    rc, outputs = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event())
    assert rc == 0, capsys.readouterr().err
    (comment,) = gh.state.comments[7]
    assert f"https://github.com/{REPO}/actions/runs/4242" in comment["body"]
    assert (
        "https://dash.example.org/compare?base=pr7-run4242.1-base-round1&head=pr7-run4242.1-head-round1"
        in comment["body"]
    )
    assert set(gh.state.comments) == {7}
    assert outputs.splitlines() == ["pr=7", f"head_sha={HEAD}", "source_run=4242.1"]


def test_a_maintainers_dispatch_for_a_fork_pr_is_posted_on_the_pr_it_names(gh, tmp_path, monkeypatch, fixtures_dir):
    rc, outputs = _comment(gh, tmp_path, monkeypatch, fixtures_dir, dispatch_event(), report_head=FORK_HEAD)
    assert rc == 0
    assert set(gh.state.comments) == {9}
    assert outputs.splitlines()[:2] == ["pr=9", f"head_sha={FORK_HEAD}"]


def test_a_cancelled_run_posts_nothing(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event(conclusion="cancelled"))
    assert rc == 0 and "nothing to post" in capsys.readouterr().out
    assert _writes(gh) == []


# ---------------------------------------------------------------- forgeries, each refused


def test_an_artifact_from_a_fork_run_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    """A fork edits gpu-bench.yml to upload a fake compare artifact without touching a GPU."""
    event = pr_run_event(
        head_sha=FORK_HEAD, head_branch="main", head_repository={"full_name": "someone/kernels-fork"}, pull_requests=[]
    )
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, event, report_head=FORK_HEAD)
    assert_refused(gh, capsys, rc, "workflow_run.head_repository", "someone/kernels-fork")


def test_an_artifact_from_a_workflow_at_another_path_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    """A PR adds .github/workflows/x.yml that calls itself gpu-bench and uploads a verdict."""
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event(path=".github/workflows/x.yml"))
    assert_refused(gh, capsys, rc, "workflow_run.path", ".github/workflows/x.yml")


def test_a_report_naming_another_pr_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    """PR #7's code writes a report whose head is PR #8's: the verdict would land on #8."""
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event(), report_head=OTHER_HEAD)
    assert_refused(gh, capsys, rc, "head_sha", "not the measured head")


def test_a_dispatch_report_naming_another_pr_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    """On the dispatch path the PR used to come from the report: now only from the run's title."""
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, dispatch_event(), report_head=OTHER_HEAD)
    assert_refused(gh, capsys, rc, "not the measured head")
    assert 8 not in gh.state.comments


def test_a_head_sha_that_is_no_longer_the_prs_head_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    gh.state.pulls[0]["head"]["sha"] = "e" * 40  # PR #7 was pushed to after the run started
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event())
    assert_refused(gh, capsys, rc, "PR #7's head is now eeeeeeeeeeee")


def test_a_dispatch_whose_sha_is_not_the_prs_head_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    """The fork pushed after the maintainer dispatched: the measured SHA is no longer PR #9's head."""
    gh.state.pulls[2]["head"]["sha"] = "e" * 40
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, dispatch_event(), report_head=FORK_HEAD)
    assert_refused(gh, capsys, rc, "PR #9's head is now")


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"head_branch": "tune-tiles"}, "only on the default branch"),
        ({"display_title": "gpu-bench compare: PR #9 at HEAD"}, "does not name a PR and SHA"),
        ({"display_title": f"gpu-bench compare: PR #9 at {FORK_HEAD} and PR #8"}, "does not name a PR and SHA"),
    ],
)
def test_a_dispatch_not_from_the_default_branchs_workflow_is_refused(
    gh, tmp_path, monkeypatch, fixtures_dir, capsys, changes, reason
):
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, dispatch_event(**changes), report_head=FORK_HEAD)
    assert_refused(gh, capsys, rc, reason)


def test_a_pr_run_listed_for_a_closed_pr_is_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    gh.state.pulls[0]["state"] = "closed"
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event())
    assert_refused(gh, capsys, rc, "PR #7 is 'closed'")


@pytest.mark.parametrize(
    "event, reason",
    [
        (pr_run_event(event="push"), "only pull_request and workflow_dispatch"),
        (pr_run_event(repository={"full_name": "someone/kernels-fork"}), "workflow_run.repository"),
        ({"action": "completed", "repository": {"full_name": REPO}}, "not a workflow_run event"),
    ],
)
def test_other_events_are_refused(gh, tmp_path, monkeypatch, fixtures_dir, capsys, event, reason):
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, event)
    assert_refused(gh, capsys, rc, reason)


@pytest.mark.parametrize("attempt", [True, 0, -1, 1.0, "2", None])
def test_a_run_attempt_that_is_not_a_positive_integer_is_refused(
    gh, tmp_path, monkeypatch, fixtures_dir, capsys, attempt
):
    """`run_attempt: true` was taken as attempt 1 and stored under run ids `...run4242.True-...`."""
    rc, outputs = _comment(gh, tmp_path, monkeypatch, fixtures_dir, pr_run_event(run_attempt=attempt))
    assert_refused(gh, capsys, rc, "workflow_run.run_attempt must be a positive integer")
    assert "source_run" not in outputs


def test_a_source_run_is_made_of_positive_integers_only():
    from attnwatch.ci.errors import UserError
    from attnwatch.ci.integration.pr_runs import SourceRun

    for run_id, attempt in ((4242, True), (True, 1), (4242, 0), (4242, 1.0)):
        with pytest.raises(UserError, match="positive integers"):
            SourceRun(run_id, attempt)


def test_by_hand_the_report_must_be_of_the_prs_current_head(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, None, "--pr", "8")  # PR #8's head is not the report's
    assert_refused(gh, capsys, rc, "not the measured head")


def test_without_a_target_the_report_does_not_choose_one(gh, tmp_path, monkeypatch, fixtures_dir, capsys):
    rc, _ = _comment(gh, tmp_path, monkeypatch, fixtures_dir, None)
    assert rc == 2 and "the report never chooses" in capsys.readouterr().err
    assert _writes(gh) == []
