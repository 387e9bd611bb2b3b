"""gpu-bench.yml's CPU-only path, run as GitHub would run it: the jobs' `if:` conditions evaluated
(tests/workflow_expr.py) against pull_request, fork and schedule events of GitHub's payload shape,
the `affected` job's own step script run under bash in a real git repository against a loopback
GitHub (tests/github_stub.py), its $GITHUB_OUTPUT becoming the job's output the compare job's
condition reads. A README-only pull request gets the "nothing the GPU runs changed" comment and no
GPU job; a kernel change gets the GPU compare and no such comment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from attnwatch.ci.integration.comment.render import MARKER
from attnwatch.ci.integration.comment.unchanged import TITLE
from github_stub import GitHubStub, StubState
from affected_repos import change, clone, git, origin  # noqa: F401 - the real repositories the step runs in
from workflow_expr import job_runs, substitute

ROOT = Path(__file__).resolve().parent.parent
REPO = "octo/kernels"
PR = 17


# The job installs numpy alone and runs attnwatch from the checkout: any other package it
# imported would fail on the runner, so here every top-level module outside the standard
# library, numpy and attnwatch is refused as it would be missing there.
ONLY_NUMPY = """\
import sys

class _Refuse:
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        if top in sys.stdlib_module_names or top in ("numpy", "attnwatch", "sitecustomize") or top.startswith("_"):
            return None
        raise ModuleNotFoundError(f"{name} is not installed on the CPU job's runner")

sys.meta_path.insert(0, _Refuse())
"""


def _workflow() -> dict:
    return YAML(typ="safe").load((ROOT / ".github" / "workflows" / "gpu-bench.yml").read_text())


def pull_request_event(head_sha: str, *, head_repo: str = REPO, number: int = PR) -> dict:
    """A pull_request (synchronize) event as GitHub delivers it, trimmed to the fields workflows read
    (docs.github.com, "Webhook events and payloads", pull_request)."""
    return {
        "action": "synchronize",
        "number": number,
        "pull_request": {
            "number": number,
            "state": "open",
            "head": {"sha": head_sha, "ref": "pr", "repo": {"full_name": head_repo}},
            "base": {"ref": "main", "sha": "0" * 40, "repo": {"full_name": REPO}},
        },
        "repository": {"full_name": REPO, "default_branch": "main"},
    }


def context(event_name: str, event: dict, needs: dict | None = None) -> dict:
    return {
        "github": {"event_name": event_name, "event": event, "repository": REPO, "token": "ghs_test_token"},
        "needs": needs or {},
        "inputs": {},
        "vars": {},
        "env": {},
        "steps": {},
    }


def run_affected_job(
    repo: Path, tmp_path: Path, event: dict, stub: GitHubStub
) -> tuple[dict, subprocess.CompletedProcess]:
    """The `affected` job's last step under bash as the runner runs it: its env (job's, then step's)
    from the event, $GITHUB_OUTPUT, the API at the stub; `attnwatch` this checkout's command line.
    Returns the job's outputs as GitHub would compute them, and the step's process."""
    job = _workflow()["jobs"]["affected"]
    step = next(s for s in job["steps"] if s.get("id") == "affected")
    ctx = context("pull_request", event)
    env = {k: substitute(v, ctx) for k, v in {**job["env"], **step.get("env", {})}.items()}
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stand_in = bin_dir / "python"  # setup-python's; only numpy installed beside the standard library
    stand_in.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    stand_in.chmod(0o755)
    refuse = tmp_path / "refuse"
    refuse.mkdir(exist_ok=True)
    (refuse / "sitecustomize.py").write_text(ONLY_NUMPY)
    output = tmp_path / "github_output"
    output.write_text("")
    runner_temp = tmp_path / "runner_temp"
    runner_temp.mkdir(exist_ok=True)
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", step["run"]],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            **env,
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            "PYTHONPATH": os.pathsep.join((str(refuse), str(ROOT))),  # attnwatch: this checkout's
            "GITHUB_OUTPUT": str(output),
            "GITHUB_API_URL": stub.url,
            "GITHUB_REPOSITORY": REPO,
            "RUNNER_TEMP": str(runner_temp),
            "GITHUB_SERVER_URL": "https://github.example",
            "GITHUB_RUN_ID": "99",
        },
    )
    step_outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
    job_ctx = {**ctx, "steps": {"affected": {"outputs": step_outputs}}}
    return {k: substitute(v, job_ctx) for k, v in job["outputs"].items()}, done


@pytest.fixture
def stub():
    state = StubState(repo=REPO)
    with GitHubStub(state) as server:
        yield server


def test_a_readme_only_pull_request_is_commented_on_from_a_cpu_and_queues_no_gpu_job(clone, tmp_path, stub):  # noqa: F811
    head = change(clone, "README.md", "\nprose only\n")
    stub.state.pulls = [{"number": PR, "state": "open", "head": {"sha": head, "repo": {"full_name": REPO}}}]
    event = pull_request_event(head)
    jobs = _workflow()["jobs"]
    assert job_runs(jobs["affected"], context("pull_request", event))
    outputs, done = run_affected_job(clone, tmp_path, event, stub)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs == {"gpu": "false"}
    (comment,) = stub.state.comments[PR]
    assert comment["body"].startswith(MARKER) and TITLE in comment["body"]
    assert head[:12] in comment["body"] and git(clone, "rev-parse", "origin/main")[:12] in comment["body"]
    assert "`cuda_wmma`" in comment["body"] and "harness and pipeline files" in comment["body"]
    posted = [r for r in stub.state.requests if r["method"] == "POST"]
    assert posted and all(
        r["authorization"] == "token ghs_test_token" or "ghs_test_token" in r["authorization"] for r in posted
    )
    needs = {"affected": {"result": "success", "outputs": outputs}, "approve-dispatch": {"result": "skipped"}}
    assert not job_runs(jobs["compare"], context("pull_request", event, needs), needs_status="skipped")
    # and the same event with the output the other way round queues it: the condition reads the output
    needs["affected"]["outputs"] = {"gpu": "true"}
    assert job_runs(jobs["compare"], context("pull_request", event, needs), needs_status="skipped")


def test_a_kernel_change_goes_to_the_gpu_compare_and_posts_no_comment(clone, tmp_path, stub):  # noqa: F811
    head = change(clone, "kernels/cuda/wmma_attention.cuh", "// one line\n")
    stub.state.pulls = [{"number": PR, "state": "open", "head": {"sha": head, "repo": {"full_name": REPO}}}]
    event = pull_request_event(head)
    outputs, done = run_affected_job(clone, tmp_path, event, stub)
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs == {"gpu": "true"} and not stub.state.comments
    assert "build cuda_wmma: changed: kernels/cuda/wmma_attention.cuh" in done.stdout
    needs = {"affected": {"result": "success", "outputs": outputs}, "approve-dispatch": {"result": "skipped"}}
    assert job_runs(_workflow()["jobs"]["compare"], context("pull_request", event, needs), needs_status="skipped")


def test_a_head_that_moved_on_gets_no_comment(clone, tmp_path, stub):  # noqa: F811
    head = change(clone, "README.md", "\nprose only\n")
    stub.state.pulls = [{"number": PR, "state": "open", "head": {"sha": "f" * 40, "repo": {"full_name": REPO}}}]
    outputs, done = run_affected_job(clone, tmp_path, pull_request_event(head), stub)
    assert done.returncode == 0 and outputs == {"gpu": "false"} and not stub.state.comments
    assert "nothing posted" in done.stdout


def test_the_cpu_job_installs_numpy_alone_as_the_package_requires_it():
    import tomllib

    (install,) = [
        s for s in _workflow()["jobs"]["affected"]["steps"] if s.get("name") == "install what the check imports"
    ]
    required = [
        d
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
        if d.startswith("numpy")
    ]
    assert install["run"] == f'python -m pip install --quiet "{required[0]}"'


def test_a_fork_pull_request_runs_neither_the_cpu_check_nor_the_compare():
    jobs = _workflow()["jobs"]
    event = pull_request_event("a" * 40, head_repo="someone/kernels-fork")
    assert not job_runs(jobs["affected"], context("pull_request", event))
    needs = {"affected": {"result": "skipped", "outputs": {}}, "approve-dispatch": {"result": "skipped"}}
    assert not job_runs(jobs["compare"], context("pull_request", event, needs), needs_status="skipped")


def test_the_schedule_runs_the_aa_canary_on_the_pr_runner_and_no_pr_job():
    jobs = _workflow()["jobs"]
    ctx = context("schedule", {"schedule": "17 2 * * *", "repository": {"full_name": REPO, "default_branch": "main"}})
    assert job_runs(jobs["canary"], ctx)
    assert not job_runs(jobs["affected"], ctx)
    assert not job_runs(
        jobs["compare"], {**ctx, "needs": {"affected": {"result": "skipped", "outputs": {}}}}, needs_status="skipped"
    )
    canary = jobs["canary"]
    assert (
        canary["runs-on"][:3] == ["self-hosted", "gpu", "untrusted"] and canary["env"]["ATTNWATCH_TRUST"] == "untrusted"
    )
    script = "\n".join(s.get("run", "") for s in canary["steps"])
    assert "attnwatch compare --base HEAD --head HEAD --all" in " ".join(script.split())
    assert "--fail-on regression" in script


def test_a_dispatch_still_reaches_the_compare_without_the_cpu_check():
    jobs = _workflow()["jobs"]
    ctx = context("workflow_dispatch", {"inputs": {"mode": "compare"}})
    ctx["inputs"] = {"mode": "compare", "pr": "17", "sha": "a" * 40}
    assert not job_runs(jobs["affected"], ctx)
    ctx["needs"] = {"affected": {"result": "skipped", "outputs": {}}, "approve-dispatch": {"result": "success"}}
    assert job_runs(jobs["compare"], ctx, needs_status="skipped")


def test_the_expression_evaluator_follows_githubs_rules():
    """The evaluator the tests above rely on: a test of the tests, so a condition cannot pass by accident."""
    from workflow_expr import evaluate

    ctx = {"github": {"event_name": "pull_request", "event": {"n": 3}}, "needs": {}}
    assert evaluate("github.event_name == 'PULL_REQUEST'", ctx) is True  # case-insensitive strings
    assert evaluate("github.event.missing.deeper", ctx) is None
    assert evaluate("github.event.n == 3 && 'yes' || 'no'", ctx) == "yes"
    assert evaluate("!(github.event.n == 3) && 'yes' || 'no'", ctx) == "no"
    assert evaluate("startsWith('ducklake:x', 'ducklake:')", ctx) is True
    assert evaluate("needs.affected.outputs.gpu == 'true'", ctx) is False
    assert not job_runs({"if": "github.event_name == 'pull_request'"}, ctx, needs_status="skipped")  # implied success()
    assert job_runs({"if": "!cancelled() && github.event_name == 'pull_request'"}, ctx, needs_status="skipped")
