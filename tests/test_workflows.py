"""The GitHub workflows: valid against the GitHub-workflow JSON schema (check-jsonschema's vendored
copy, offline), plus the security properties the design depends on."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"
FILES = ("ci.yml", "gpu-bench.yml", "pr-comment.yml")


def _load(name: str) -> dict:
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())  # YAML 1.2: `on` stays a string


def _steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def _check_jsonschema() -> list[str]:
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if exe is None:
        pytest.fail("check-jsonschema is not installed (it is in the dev extra)")
    return [exe]


@pytest.mark.parametrize("name", FILES)
def test_valid_against_the_github_workflow_schema(name):
    done = subprocess.run([*_check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(WORKFLOWS / name)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: 3\n        run: also\n")
    done = subprocess.run([*_check_jsonschema(), "--builtin-schema", "vendor.github-workflows", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0


@pytest.mark.parametrize("name", FILES)
def test_no_expression_is_interpolated_into_a_shell_script(name):
    """Untrusted values reach scripts only through env (GitHub's script-injection guidance)."""
    for step in _steps(_load(name)):
        assert "${{" not in step.get("run", ""), step


@pytest.mark.parametrize("name", FILES)
def test_checkouts_keep_no_credentials_and_permissions_are_explicit(name):
    wf = _load(name)
    assert "permissions" in wf and "concurrency" in wf
    for step in _steps(wf):
        if str(step.get("uses", "")).startswith("actions/checkout"):
            assert step["with"]["persist-credentials"] is False


def test_ci_runs_make_test_on_hosted_runners():
    wf = _load("ci.yml")
    (job,) = wf["jobs"].values()
    assert not str(job["runs-on"]).startswith("self-hosted")
    assert any(step.get("run") == "make test" for step in job["steps"])
    assert wf["permissions"] == {"contents": "read"}


def test_gpu_bench_triggers_runner_and_fork_guard():
    wf = _load("gpu-bench.yml")
    assert set(wf["on"]) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["permissions"] == {"contents": "read"}
    for job in wf["jobs"].values():
        assert job["runs-on"] == ["self-hosted", "gpu"]
        assert job["timeout-minutes"] <= 180
    compare = wf["jobs"]["compare"]
    guard = re.sub(r"\s+", " ", compare["if"])
    assert "github.event.pull_request.head.repo.full_name == github.repository" in guard
    assert "workflow_dispatch" in guard  # the deliberate maintainer path
    script = " ".join(s.get("run", "") for s in compare["steps"])
    assert "attnwatch compare" in script and "--fail-on regression" in script
    uploads = [s for s in compare["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "attnwatch-compare" and uploads[0]["if"] == "always()"
    history = wf["jobs"]["history"]
    assert history["concurrency"] == {"group": "attnwatch-history", "cancel-in-progress": False}
    steps = " ".join(s.get("run", "") for s in history["steps"])
    assert steps.index("attnwatch run") < steps.index("attnwatch ingest") < steps.index("attnwatch detect")
    assert "ATTNWATCH_DB" in history["env"]
    assert "nightly" in history["env"]["SHAPES"] and "--ncu" in history["env"]["NCU"]


def test_pr_comment_never_runs_pr_code():
    wf = _load("pr-comment.yml")
    assert wf["on"] == {"workflow_run": {"workflows": ["gpu-bench"], "types": ["completed"]}}
    assert wf["permissions"] == {"pull-requests": "write", "actions": "read"}
    assert "head_sha" in wf["concurrency"]["group"]
    (job,) = wf["jobs"].values()
    assert not str(job["runs-on"]).startswith("self-hosted")
    text = (WORKFLOWS / "pr-comment.yml").read_text()
    for step in job["steps"]:
        uses = str(step.get("uses", ""))
        if uses.startswith("actions/checkout"):
            assert step["with"]["ref"] == "${{ github.event.repository.default_branch }}"
        if uses.startswith("actions/download-artifact"):
            assert step["with"]["path"].startswith("${{ runner.temp }}")
            assert step["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert "head_branch" not in text and "pull_request.head" not in text  # nothing from the PR selects code
    comment = next(s for s in job["steps"] if "attnwatch comment" in s.get("run", ""))
    assert comment["env"]["HEAD_SHA"] == "${{ github.event.workflow_run.head_sha }}"
    assert "untrusted-compare/compare.json" in comment["run"]
    assert '--sha "$HEAD_SHA"' in comment["run"] and comment["env"]["EVENT"] == "${{ github.event.workflow_run.event }}"
