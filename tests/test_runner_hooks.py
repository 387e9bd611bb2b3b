"""The trusted runner's job-started hook (ci/integration/runner_hooks/trusted_job_started.sh), run by bash with
the variables the runner gives it: only default-branch jobs of this repository's own workflows
start; a PR's job that asks for the trusted label is failed before its first step."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT

HOOK = Path(__file__).resolve().parent.parent / "ci" / "integration" / "runner_hooks" / "trusted_job_started.sh"
REPO = "octo/kernels"


def _run(**variables) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "ATTNWATCH_TRUSTED_REPO": REPO,
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_EVENT_NAME": "push",
        "GITHUB_REF": "refs/heads/main",
        "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/gpu-bench.yml@refs/heads/main",
    }
    env.update({k: v for k, v in variables.items() if v is not None})
    for key in [k for k, v in variables.items() if v is None]:
        env.pop(key, None)
    return subprocess.run(["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    "event, workflow",
    [
        ("push", "gpu-bench.yml"),
        ("schedule", "gpu-bench.yml"),
        ("workflow_dispatch", "gpu-bench.yml"),
        ("workflow_run", "pr-comment.yml"),
        ("workflow_dispatch", "bisect.yml"),
        ("schedule", "history-maintain.yml"),
        ("workflow_dispatch", "history-maintain.yml"),
    ],
)
def test_default_branch_jobs_of_the_trusted_workflows_start(event, workflow):
    done = _run(GITHUB_EVENT_NAME=event, GITHUB_WORKFLOW_REF=f"{REPO}/.github/workflows/{workflow}@refs/heads/main")
    assert done.returncode == 0, done.stderr
    assert "accepted" in done.stdout


@pytest.mark.parametrize(
    "changes, reason",
    [
        # a same-repository PR whose copy of gpu-bench.yml asks for [self-hosted, trusted]
        (
            {
                "GITHUB_EVENT_NAME": "pull_request",
                "GITHUB_REF": "refs/pull/7/merge",
                "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/gpu-bench.yml@refs/pull/7/merge",
            },
            "event 'pull_request'",
        ),
        ({"GITHUB_EVENT_NAME": "pull_request_target"}, "event 'pull_request_target'"),
        # a pushed branch, or a dispatch on a branch, with an edited workflow
        (
            {
                "GITHUB_REF": "refs/heads/tune-tiles",
                "GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/gpu-bench.yml@refs/heads/tune-tiles",
            },
            "ref 'refs/heads/tune-tiles'",
        ),
        ({"GITHUB_EVENT_NAME": "workflow_dispatch", "GITHUB_REF": "refs/tags/v1"}, "ref 'refs/tags/v1'"),
        # a new workflow on main that is not one of the trusted ones
        ({"GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/anything.yml@refs/heads/main"}, "anything.yml"),
        # main's gpu-bench.yml, but reached from another branch's run of it
        ({"GITHUB_WORKFLOW_REF": f"{REPO}/.github/workflows/gpu-bench.yml@refs/heads/x"}, "is not one of"),
        ({"GITHUB_REPOSITORY": "someone/kernels-fork"}, "repository 'someone/kernels-fork'"),
        ({"GITHUB_EVENT_NAME": None}, "event ''"),
    ],
)
def test_every_other_job_is_refused_before_it_runs(changes, reason):
    done = _run(**changes)
    assert done.returncode == 1
    assert "refused" in done.stderr and reason in done.stderr, done.stderr


def test_the_hook_will_not_run_unconfigured():
    done = _run(ATTNWATCH_TRUSTED_REPO=None)
    assert done.returncode != 0 and "ATTNWATCH_TRUSTED_REPO" in done.stderr


def test_another_default_branch_and_workflow_list_are_configurable():
    done = _run(
        ATTNWATCH_TRUSTED_BRANCH="trunk",
        ATTNWATCH_TRUSTED_WORKFLOWS="gpu-bench.yml",
        GITHUB_REF="refs/heads/trunk",
        GITHUB_WORKFLOW_REF=f"{REPO}/.github/workflows/gpu-bench.yml@refs/heads/trunk",
    )
    assert done.returncode == 0, done.stderr
    done = _run(
        ATTNWATCH_TRUSTED_WORKFLOWS="gpu-bench.yml",
        GITHUB_EVENT_NAME="workflow_run",
        GITHUB_WORKFLOW_REF=f"{REPO}/.github/workflows/pr-comment.yml@refs/heads/main",
    )
    assert done.returncode == 1


def test_every_workflow_that_asks_for_the_trusted_label_is_admitted_by_default():
    """The hook's default list and the workflows must agree: a job of this repository that asks
    for `trusted` and that the default refuses could never run."""
    workflows = REPO_ROOT / ".github" / "workflows"
    asking = sorted(
        p.name
        for p in workflows.glob("*.yml")
        if any("runs-on:" in line and "trusted" in line.replace("untrusted", "") for line in p.read_text().splitlines())
    )
    assert asking == ["bisect.yml", "gpu-bench.yml", "history-maintain.yml", "pr-comment.yml"]
    for name in asking:
        done = _run(
            GITHUB_EVENT_NAME="workflow_dispatch",
            GITHUB_WORKFLOW_REF=f"{REPO}/.github/workflows/{name}@refs/heads/main",
        )
        assert done.returncode == 0, (name, done.stderr)
