"""Where a verdict may be posted: the checks the comment job makes before it trusts an artifact.

The compare artifact is written by the pull request's own code on an untrusted GPU runner, so
nothing in it chooses where a verdict goes or which commit it is about. The target comes from the
`workflow_run` event GitHub wrote for the comment job (GITHUB_EVENT_PATH) and from the API, and
each check below refuses with the reason (Refused, exit 2) before anything is posted:

1. the run is of this repository (`workflow_run.repository`, `head_repository`): a fork's run,
   whose copy of gpu-bench.yml the fork wrote, is refused (fork PRs are measured only through a
   maintainer's dispatch, which runs in this repository);
2. the run is of this repository's workflow file (`workflow_run.path`), not of another workflow
   that merely calls itself "gpu-bench";
3. the pull request:
   - `pull_request` runs: the PRs GitHub lists in `workflow_run.pull_requests` (or, when the list
     is empty, the open PRs whose head is the run's head SHA, asked of the API); each must come
     from this repository;
   - `workflow_dispatch` runs (a maintainer measuring one PR): the run must be on the default
     branch, whose gpu-bench.yml names it "gpu-bench compare: PR #N at SHA" from the
     maintainer's inputs (`run-name`), and that title is the only place N and SHA are read from;
4. the PR, asked of the API now, is open and its head is the measured SHA (a PR that moved on
   since gets no stale verdict);
5. the report's own `head_sha` is that SHA (a report about another commit is refused).

Runs that did not finish with success or failure (cancelled, skipped, timed out) have nothing to
post: `resolve_target` returns None.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnwatch.ci.errors import UserError
from attnwatch.ci.integration.github import GitHubClient
from attnwatch.ci.integration.pr_runs import SourceRun
from attnwatch.history.contract.checks import read_json_file
from attnwatch.history.errors import BundleError

WORKFLOW_PATH = ".github/workflows/gpu-bench.yml"
DISPATCH_TITLE = re.compile(r"^gpu-bench compare: PR #([1-9][0-9]{0,9}) at ([0-9a-f]{40})$")
POSTED_CONCLUSIONS = ("success", "failure")  # failure: the compare found a regression (--fail-on)
MAX_EVENT_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
_SHA = re.compile(r"^[0-9a-f]{40}$")


class Refused(UserError):
    """The artifact or event failed a provenance check: nothing is posted."""

    def __init__(self, message: str) -> None:
        super().__init__(f"refused: {message}")


@dataclass(frozen=True)
class Target:
    """Where the verdict goes: the PRs, the measured head SHA, and the run it came from."""

    prs: tuple[int, ...]
    head_sha: str
    source: SourceRun | None  # None when posted by hand (--pr/--sha): no run to link to
    event: str
    run_url: str | None = None


def load_event(path: str | Path) -> dict:
    """The workflow_run event payload the runner wrote (GITHUB_EVENT_PATH)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_EVENT_BYTES:
            raise Refused(f"{path}: larger than a GitHub event can be")
        event, _ = read_json_file(path, MAX_EVENT_BYTES)  # the strict reader (history.contract.json_limits)
    except BundleError as exc:
        raise Refused(f"not a readable event payload: {exc}") from None
    except OSError as exc:
        raise Refused(f"{path}: not a readable event payload ({exc})") from None
    if not isinstance(event, dict) or not isinstance(event.get("workflow_run"), dict):
        raise Refused(f"{path}: not a workflow_run event (no 'workflow_run' object)")
    return event


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _check_origin(event: dict, repo: str, workflow_path: str) -> dict:
    run = event["workflow_run"]
    for where, value in (
        ("repository", _get(event, "repository", "full_name")),
        ("workflow_run.repository", _get(run, "repository", "full_name")),
        ("workflow_run.head_repository", _get(run, "head_repository", "full_name")),
    ):
        if value != repo:
            raise Refused(
                f"{where} is {value!r}, not {repo}: only runs of this repository's own workflow "
                "are trusted (a fork PR is measured through a maintainer's dispatch)"
            )
    if run.get("path") != workflow_path:
        raise Refused(f"workflow_run.path is {run.get('path')!r}, not {workflow_path}: another workflow's artifact")
    if not _SHA.match(str(run.get("head_sha", ""))):
        raise Refused(f"workflow_run.head_sha {run.get('head_sha')!r} is not a commit SHA")
    return run


def _source(run: dict) -> SourceRun:
    for key, value in (("id", run.get("id")), ("run_attempt", run.get("run_attempt", 1))):
        if type(value) is not int or value < 1:  # bool is an int to isinstance: `true` was read as attempt 1
            raise Refused(f"workflow_run.{key} must be a positive integer, got {json.dumps(value)[:40]}")
    return SourceRun(run["id"], run.get("run_attempt", 1))


def _checked_pr(client: GitHubClient, number: int, sha: str, repo: str, same_repo_only: bool) -> int:
    pr = client.pull_request(number)
    if pr.get("state") != "open":
        raise Refused(f"PR #{number} is {pr.get('state')!r}, not open")
    head_sha = _get(pr, "head", "sha")
    if head_sha != sha:
        raise Refused(
            f"PR #{number}'s head is now {str(head_sha)[:12]}, not the measured {sha[:12]}: "
            "the verdict is not about the PR's current head"
        )
    if same_repo_only and _get(pr, "head", "repo", "full_name") != repo:
        raise Refused(
            f"PR #{number} comes from {_get(pr, 'head', 'repo', 'full_name')!r}, not {repo}: "
            "a fork PR gets a verdict only through a maintainer's dispatch"
        )
    return number


def resolve_target(event: dict, repo: str, client: GitHubClient, workflow_path: str = WORKFLOW_PATH) -> Target | None:
    """The checked target of a gpu-bench run's verdict (module docstring), or None: nothing to post."""
    run = _check_origin(event, repo, workflow_path)
    if run.get("conclusion") not in POSTED_CONCLUSIONS:
        return None
    source, kind = _source(run), run.get("event")
    run_url = run.get("html_url") if isinstance(run.get("html_url"), str) else None
    if kind == "pull_request":
        sha = run["head_sha"]
        pulls = run.get("pull_requests") or []
        if not isinstance(pulls, list):
            raise Refused(f"workflow_run.pull_requests must be a list, got {json.dumps(pulls)[:40]}")
        listed = [_get(p, "number") for p in pulls]
        numbers = [n for n in listed if isinstance(n, int) and not isinstance(n, bool)] or client.pulls_for_sha(sha)
        if not numbers:
            raise Refused(f"no open pull request of {repo} has head {sha[:12]}")
        prs = tuple(sorted({_checked_pr(client, n, sha, repo, same_repo_only=True) for n in numbers}))
        return Target(prs, sha, source, kind, run_url)
    if kind == "workflow_dispatch":
        default_branch = _get(event, "repository", "default_branch")
        if not default_branch or run.get("head_branch") != default_branch:
            raise Refused(
                f"a dispatched run counts only on the default branch ({default_branch!r}), "
                f"this one ran on {run.get('head_branch')!r}"
            )
        title = DISPATCH_TITLE.match(str(run.get("display_title", "")))
        if title is None:
            raise Refused(
                f"dispatched run title {str(run.get('display_title'))[:120]!r} does not name a PR and SHA "
                '("gpu-bench compare: PR #N at SHA")'
            )
        number, sha = int(title.group(1)), title.group(2)
        return Target((_checked_pr(client, number, sha, repo, same_repo_only=False),), sha, source, kind, run_url)
    raise Refused(f"workflow_run.event {kind!r}: only pull_request and workflow_dispatch runs get a verdict")


def check_report_head(report_head_sha: str, target: Target, report_path: str | Path) -> None:
    """The report must be about the commit that was measured for this target."""
    if report_head_sha != target.head_sha:
        raise Refused(
            f"{report_path}: head_sha {str(report_head_sha)[:40]!r} is not the measured head "
            f"{target.head_sha} of PR #{', #'.join(map(str, target.prs))}"
        )
