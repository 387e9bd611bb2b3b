"""The GitHub workflows: valid against the GitHub-workflow JSON schema (check-jsonschema's vendored
copy, offline), clean under zizmor (offline, every ignore justified in place), plus the trust
boundary the design depends on (docs/design.md, "Threat model"): PR code only on untrusted
runners, the history and its credentials only on trusted ones, the runner matrix, partial runs
still ingested, and the comment's target taken from the event."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from attnwatch.ci.integration.comment.provenance import DISPATCH_TITLE, WORKFLOW_PATH

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
FILES = ("ci.yml", "gpu-bench.yml", "pr-comment.yml", "history-maintain.yml", "bisect.yml")
PINNED = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[0-9a-f]{40}$")


def _load(name: str) -> dict:
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())  # YAML 1.2: `on` stays a string


def _steps(workflow: dict):
    for job in workflow["jobs"].values():
        yield from job.get("steps", [])


def _tool(name: str) -> list[str]:
    exe = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if exe is None:
        pytest.fail(f"{name} is not installed (it is in the dev extra)")
    return [exe]


def _labels(job: dict) -> list[str]:
    runs_on = job["runs-on"]
    return [runs_on] if isinstance(runs_on, str) else list(runs_on)


def _script(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job.get("steps", []))


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


# ---------------------------------------------------------------- schema and static analysis


@pytest.mark.parametrize("name", FILES)
def test_valid_against_the_github_workflow_schema(name):
    done = subprocess.run(
        [*_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(WORKFLOWS / name)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: 3\n        run: also\n"
    )
    done = subprocess.run(
        [*_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0


def _zizmor(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_tool("zizmor"), "--offline", "--persona=pedantic", "--no-progress", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_zizmor_finds_nothing_unjustified(tmp_path):
    """zizmor (pinned in the dev extra) over every workflow, offline, at its pedantic persona: no
    finding, and each inline ignore says why. First, that the check can fail at all: an action
    pinned by tag (as every workflow here was) is flagged."""
    control = tmp_path / ".github" / "workflows"
    control.mkdir(parents=True)
    (control / "x.yml").write_text(
        "name: x\non: push\npermissions: {}\njobs:\n  a:\n    name: a\n    runs-on: ubuntu-24.04\n    steps:\n"
        "      - uses: actions/checkout@v4\n        with:\n          persist-credentials: false\n"
    )
    flagged = _zizmor(control)
    assert flagged.returncode != 0 and "unpinned-uses" in flagged.stdout, flagged.stdout + flagged.stderr
    done = _zizmor(WORKFLOWS)
    assert done.returncode == 0 and "No findings to report" in done.stdout, done.stdout + done.stderr
    ignores = [
        (name, line.strip())
        for name in FILES
        for line in (WORKFLOWS / name).read_text().splitlines()
        if "zizmor: ignore[" in line
    ]
    assert ignores, "pr-comment.yml's workflow_run trigger is an accepted, justified finding"
    for name, line in ignores:
        assert len(line.split("]", 1)[1].strip()) >= 40, f"{name}: an ignore without its reason: {line}"


@pytest.mark.parametrize("name", FILES)
def test_every_action_is_pinned_by_commit_sha_with_its_version(name):
    text = (WORKFLOWS / name).read_text()
    uses = re.findall(r"uses:\s*(\S+)(.*)", text)
    assert uses
    for ref, rest in uses:
        assert PINNED.match(ref), f"{name}: {ref} is not pinned to a commit SHA"
        assert re.search(r"#\s*v\d+\.\d+\.\d+", rest), f"{name}: {ref} carries no `# vX.Y.Z` comment"


# ---------------------------------------------------------------- general hygiene


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


def test_gpu_runners_make_the_venv_with_their_system_torch_and_hosted_runners_isolated():
    """`make` makes an isolated venv (the tests run on what pyproject.toml asks for); a GPU
    runner reuses its system CUDA torch, triton and cupy only through SYSTEM_TORCH=1."""
    seen = {"gpu": 0, "hosted": 0}
    for name, job_id, job in _all_jobs():
        gpu = "gpu" in _labels(job)
        for step in job.get("steps", []):
            for line in step.get("run", "").splitlines():
                words = line.split("#", 1)[0].split()
                if words[:1] != ["make"]:
                    continue
                seen["gpu" if gpu else "hosted"] += 1
                assert ("SYSTEM_TORCH=1" in words) == gpu, f"{name}:{job_id}: {line.strip()}"
    assert seen["gpu"] >= 2 and seen["hosted"] >= 1, seen


# ---------------------------------------------------------------- the trust boundary


def _all_jobs():
    for name in FILES:
        for job_id, job in _load(name)["jobs"].items():
            yield name, job_id, job


def test_pr_code_runs_only_on_untrusted_runners_and_never_with_the_history():
    """A job that checks out anything but the default branch is a PR job: untrusted label (or a
    GitHub-hosted runner, ephemeral, as ci.yml's) and trust level, no environment, no secrets."""
    pr_jobs = []
    for name, job_id, job in _all_jobs():
        for step in job.get("steps", []):
            ref = (
                (step.get("with") or {}).get("ref")
                if str(step.get("uses", "")).startswith("actions/checkout")
                else None
            )
            if ref and ref != "${{ github.event.repository.default_branch }}":
                pr_jobs.append((name, job_id))
                hosted = "self-hosted" not in _labels(job)
                assert hosted or ("untrusted" in _labels(job) and "trusted" not in _labels(job)), (name, job_id)
                assert job["env"]["ATTNWATCH_TRUST"] == "untrusted"
                assert "environment" not in job and "secrets." not in str(job), (name, job_id)
    assert pr_jobs == [("gpu-bench.yml", "affected"), ("gpu-bench.yml", "compare")]


def test_trusted_runners_run_only_default_branch_code_and_hold_the_history():
    trusted = [(name, job_id, job) for name, job_id, job in _all_jobs() if "trusted" in _labels(job)]
    assert {(n, j) for n, j, _ in trusted} == {
        ("gpu-bench.yml", "measure"),
        ("gpu-bench.yml", "collect"),
        ("pr-comment.yml", "ingest"),
        ("history-maintain.yml", "maintain"),
        ("bisect.yml", "bisect"),
    }
    for name, job_id, job in trusted:
        assert _labels(job)[0] == "self-hosted" and "untrusted" not in _labels(job)
        assert job["environment"] == "attnwatch-history", (name, job_id)  # main-only branch rule
        assert job["env"]["ATTNWATCH_TRUST"] == "trusted"
        assert "pull_request" not in str(job.get("if", "")), (name, job_id)
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout"):
                assert (
                    step["with"].get("ref", "${{ github.event.repository.default_branch }}")
                    == "${{ github.event.repository.default_branch }}"
                )
    # The history's credentials, and the alert webhook's URL (a credential too), appear nowhere else.
    for name, job_id, job in _all_jobs():
        if "secrets." in str(job):
            assert "trusted" in _labels(job), (name, job_id)
            named = set(re.findall(r"secrets\.(\w+)", str(job)))
            assert named and named <= {"ATTNWATCH_CATALOG_PASSWORD", "ATTNWATCH_WEBHOOK_URL"}, (name, job_id, named)


def test_the_pr_event_never_reaches_a_trusted_job():
    wf = _load("gpu-bench.yml")
    measure_if = _flat(wf["jobs"]["measure"]["if"])
    assert "pull_request" not in measure_if
    assert wf["jobs"]["collect"]["needs"] == "measure"  # so it never runs without a trusted measure job
    assert "needs.measure.result != 'skipped'" in _flat(wf["jobs"]["collect"]["if"])


def test_gpu_bench_runs_a_matrix_over_gpu_labels():
    wf = _load("gpu-bench.yml")
    assert set(wf["on"]) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    assert wf["on"]["push"]["branches"] == ["main"]
    assert wf["permissions"] == {"contents": "read"}
    measure = wf["jobs"]["measure"]
    assert measure["strategy"]["fail-fast"] is False
    assert "fromJSON(vars.ATTNWATCH_GPU_LABELS" in measure["strategy"]["matrix"]["gpu"]
    assert _labels(measure) == ["self-hosted", "gpu", "trusted", "${{ matrix.gpu }}"]
    assert (
        "${{ matrix.gpu }}"
        in next(s for s in measure["steps"] if "upload-artifact" in str(s.get("uses")))["with"]["name"]
    )
    for job in wf["jobs"].values():
        assert job["timeout-minutes"] <= 180
    assert "nightly" in measure["env"]["SHAPES"] and "--ncu" in measure["env"]["NCU"]


def test_each_matrix_job_ingests_into_the_lake_or_one_collector_ingests_the_file():
    wf = _load("gpu-bench.yml")
    measure, collect = wf["jobs"]["measure"], wf["jobs"]["collect"]
    lake_steps = [s for s in measure["steps"] if s.get("if") == "env.SHARED_LAKE == 'true'"]
    assert [("attnwatch ingest" in s["run"], "attnwatch detect" in s["run"]) for s in lake_steps] == [
        (True, False),
        (False, True),
    ]
    assert measure["env"]["SHARED_LAKE"] == "${{ startsWith(vars.ATTNWATCH_DB, 'ducklake:') }}"
    assert "!startsWith(vars.ATTNWATCH_DB, 'ducklake:')" in _flat(collect["if"])
    assert "attnwatch-history" in _labels(collect)
    download = next(s for s in collect["steps"] if "download-artifact" in str(s.get("uses")))
    assert download["with"]["pattern"] == "attnwatch-bundle-*-${{ github.run_id }}-${{ github.run_attempt }}"
    script = _script(collect)
    assert script.index("attnwatch ingest") < script.index("attnwatch detect")
    assert 'for bundle in "${bundles[@]}"' in script  # one at a time: a refused bundle costs only itself
    # No concurrency group on writers: GitHub would cancel a pending ingest when a newer one queues.
    assert "concurrency" not in collect and "concurrency" not in _load("pr-comment.yml")["jobs"]["ingest"]


def test_a_partial_run_is_ingested_and_scanned_then_the_job_fails():
    """`attnwatch run` exits 1 when cases crashed (its bundle says `partial`): the steps after it
    must still run, and the job must still end red."""
    wf = _load("gpu-bench.yml")
    steps = wf["jobs"]["measure"]["steps"]
    names = [s.get("name") or s.get("uses", "").split("@")[0] for s in steps]
    measure = steps[names.index("measure")]
    assert measure["id"] == "measure" and measure["continue-on-error"] is True
    for step in steps[names.index("measure") + 1 :]:
        condition = str(step.get("if", ""))
        assert "success()" not in condition and "steps.measure.outcome == 'success'" not in condition
    assert steps[-1]["if"] == "steps.measure.outcome == 'failure'" and "exit 1" in steps[-1]["run"]
    upload = steps[names.index("actions/upload-artifact")]
    assert upload["if"] == "always()"
    # The file collector runs after failed matrix jobs too, and detection after a refused bundle.
    collect = wf["jobs"]["collect"]
    assert "!cancelled()" in collect["if"] and "needs.measure.result != 'skipped'" in _flat(collect["if"])
    assert next(s for s in collect["steps"] if "attnwatch detect" in s.get("run", ""))["if"] == "${{ !cancelled() }}"


def test_bisect_is_dispatched_by_hand_and_measures_only_default_branch_code():
    """The bisect job (issue 28): a dispatch only, on the trusted GPU runner of the chosen model,
    every measured revision reachable from the checked-out default branch, the outcome shown."""
    wf = _load("bisect.yml")
    assert set(wf["on"]) == {"workflow_dispatch"}
    assert set(wf["on"]["workflow_dispatch"]["inputs"]) == {"alert", "good", "bad", "cases", "gpu"}
    assert wf["permissions"] == {"contents": "read"} and wf["concurrency"]["cancel-in-progress"] is False
    (job,) = wf["jobs"].values()
    assert _labels(job) == ["self-hosted", "gpu", "trusted", "${{ inputs.gpu }}"]
    checkout = job["steps"][0]
    assert checkout["with"]["fetch-depth"] == 0 and "ref" not in checkout["with"]
    script = _flat(_script(job))
    assert '.venv/bin/attnwatch bisect "${args[@]}" --within HEAD' in script
    assert "GITHUB_STEP_SUMMARY" in script and "::error::not a case id" in script


def test_history_maintain_runs_weekly_on_the_historys_trusted_runner():
    wf = _load("history-maintain.yml")
    assert set(wf["on"]) == {"schedule", "workflow_dispatch"}
    minute, hour, day, month, weekday = wf["on"]["schedule"][0]["cron"].split()
    assert (day, month) == ("*", "*") and weekday.isdigit() and minute.isdigit() and hour.isdigit()  # once a week
    assert wf["permissions"] == {} and wf["concurrency"]["cancel-in-progress"] is False
    (job,) = wf["jobs"].values()
    assert "attnwatch-history" in _labels(job) and job["environment"] == "attnwatch-history"
    assert job["env"]["ATTNWATCH_DB"].startswith("${{ vars.ATTNWATCH_DB")
    assert job["steps"][-1]["run"].strip() == ".venv/bin/attnwatch history maintain"
    assert job["steps"][-1]["env"]["PGPASSWORD"] == "${{ secrets.ATTNWATCH_CATALOG_PASSWORD }}"


def test_same_repository_prs_are_compared_on_the_untrusted_runner():
    wf = _load("gpu-bench.yml")
    compare = wf["jobs"]["compare"]
    guard = _flat(compare["if"])
    assert "github.event.pull_request.head.repo.full_name == github.repository" in guard
    assert "needs.approve-dispatch.result == 'success'" in guard
    script = _script(compare)
    assert "attnwatch compare" in script and "--fail-on regression" in script and '--head "$HEAD_SHA"' in script
    uploads = [s for s in compare["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")]
    assert uploads and uploads[0]["with"]["name"] == "attnwatch-compare" and uploads[0]["if"] == "always()"


def test_a_dispatch_measures_the_sha_the_maintainer_named_after_approval():
    wf = _load("gpu-bench.yml")
    inputs = wf["on"]["workflow_dispatch"]["inputs"]
    assert {"pr", "sha"} <= set(inputs)
    approve = wf["jobs"]["approve-dispatch"]
    assert approve["environment"] == "gpu-pr-dispatch"  # required reviewers
    assert not str(approve["runs-on"]).startswith("self-hosted")
    step = approve["steps"][0]
    assert step["env"]["SHA"] == "${{ inputs.sha }}" and step["env"]["PR"] == "${{ inputs.pr }}"
    assert "pulls/$PR" in step["run"] and '"$head" != "$SHA"' in step["run"]
    compare = wf["jobs"]["compare"]
    assert compare["needs"] == ["approve-dispatch", "affected"]  # a PR first passes the CPU check (affected)
    checkout = next(s for s in compare["steps"] if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["ref"].endswith("|| inputs.sha }}")
    assert "refs/pull" not in (WORKFLOWS / "gpu-bench.yml").read_text()  # never a PR ref that moves after review


def test_the_dispatch_run_title_is_what_the_comment_job_parses():
    wf = _load("gpu-bench.yml")
    template = re.search(r"format\('([^']*)', inputs\.pr, inputs\.sha\)", wf["run-name"]).group(1)
    title = template.replace("{0}", "12").replace("{1}", "a" * 40)
    assert DISPATCH_TITLE.match(title).groups() == ("12", "a" * 40)
    assert "inputs.mode == 'compare'" in wf["run-name"]


# ---------------------------------------------------------------- the comment workflow


def test_pr_comment_accepts_only_this_repositorys_gpu_bench_and_never_runs_pr_code():
    wf = _load("pr-comment.yml")
    assert wf["on"] == {"workflow_run": {"workflows": [_load("gpu-bench.yml")["name"]], "types": ["completed"]}}
    assert (WORKFLOWS / Path(WORKFLOW_PATH).name).is_file() and WORKFLOW_PATH.startswith(".github/workflows/")
    assert wf["permissions"] == {}
    assert "head_sha" in wf["concurrency"]["group"]
    comment = wf["jobs"]["comment"]
    guard = _flat(comment["if"])
    assert "github.event.workflow_run.head_repository.full_name == github.repository" in guard
    assert f"github.event.workflow_run.path == '{WORKFLOW_PATH}'" in guard
    assert comment["permissions"] == {"contents": "read", "pull-requests": "write", "actions": "read"}
    assert not str(comment["runs-on"]).startswith("self-hosted")
    text = (WORKFLOWS / "pr-comment.yml").read_text()
    for step in _steps(wf):
        uses = str(step.get("uses", ""))
        if uses.startswith("actions/checkout"):
            assert step["with"]["ref"] == "${{ github.event.repository.default_branch }}"
        if uses.startswith("actions/download-artifact"):
            assert step["with"]["path"].startswith("${{ runner.temp }}")
            assert step["with"]["run-id"] == "${{ github.event.workflow_run.id }}"
    assert "head_branch" not in text and "pull_request.head" not in text  # nothing from the PR selects code
    step = next(s for s in comment["steps"] if "attnwatch comment" in s.get("run", ""))
    assert '--workflow-run-event "$GITHUB_EVENT_PATH"' in step["run"] and "--sha" not in step["run"]
    assert "untrusted-compare/compare.json" in step["run"]


def test_pr_comment_stores_the_rounds_as_runs_of_the_checked_pr():
    wf = _load("pr-comment.yml")
    comment, ingest = wf["jobs"]["comment"], wf["jobs"]["ingest"]
    assert set(comment["outputs"]) == {"pr", "head_sha", "source_run"}
    assert all(v.startswith("${{ steps.comment.outputs.") for v in comment["outputs"].values())
    assert ingest["needs"] == "comment" and ingest["if"] == "${{ !cancelled() && needs.comment.outputs.pr != '' }}"
    step = next(s for s in ingest["steps"] if "attnwatch ingest" in s.get("run", ""))
    assert step["env"]["PR"] == "${{ needs.comment.outputs.pr }}"
    assert step["env"]["HEAD_SHA"] == "${{ needs.comment.outputs.head_sha }}"
    assert '--pull-request "$PR" --head-sha "$HEAD_SHA" --source-run "$SOURCE_RUN"' in _flat(step["run"])


def test_every_history_ingest_records_the_repositorys_default_branch():
    """A repository whose default branch is `master` gets its series: the ingest tells the
    history which branch is its mainline (history.store.settings), from the event, never a literal."""
    jobs = _load("gpu-bench.yml")["jobs"]
    ingests = [
        s for job in ("measure", "collect") for s in jobs[job]["steps"] if "attnwatch ingest" in s.get("run", "")
    ]
    assert len(ingests) == 2
    for step in ingests:
        assert step["env"]["DEFAULT_BRANCH"] == "${{ github.event.repository.default_branch }}"
        assert '--default-branch "$DEFAULT_BRANCH"' in step["run"]


# ---------------------------------------------------------------- the adoption action and example

ACTION = ROOT / ".github" / "actions" / "attnwatch-bench" / "action.yml"
EXAMPLE_WORKFLOW = ROOT / "examples" / "adopt" / ".github" / "workflows" / "bench.yml"


def test_the_adoption_action_and_the_examples_workflow_are_valid_and_clean():
    """The composite action a kernel repository uses and examples/adopt's workflow: schema-valid,
    no zizmor finding, pinned actions, and inputs reach scripts only through env."""
    for path, schema in ((ACTION, "vendor.github-actions"), (EXAMPLE_WORKFLOW, "vendor.github-workflows")):
        done = subprocess.run(
            [*_tool("check-jsonschema"), "--builtin-schema", schema, str(path)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [*_tool("zizmor"), "--offline", "--persona=pedantic", "--no-progress", str(ACTION), str(EXAMPLE_WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "No findings to report" in done.stdout, done.stdout + done.stderr
    action = YAML(typ="safe").load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    for step in action["runs"]["steps"]:
        assert "${{" not in step.get("run", ""), step
    for ref, rest in re.findall(r"^\s*(?:- )?uses:\s*(\S+)(.*)", EXAMPLE_WORKFLOW.read_text(), re.MULTILINE):
        assert PINNED.match(ref) and re.search(r"#\s*v\d+\.\d+\.\d+", rest), ref


# ---------------------------------------------------------------- optional extras (the fa4 reference)


def _extras_step(steps: list[dict]) -> tuple[int, dict]:
    (found,) = [(i, s) for i, s in enumerate(steps) if "install-extras" in s.get("run", "")]
    return found


def _run_extras_step(script: str, tmp_path: Path, extras: str, wheels: str) -> subprocess.CompletedProcess:
    """The step's own script under bash, its `attnwatch` (the venv's, or the action's on PATH)
    this checkout's CLI with --dry-run: what pip would be asked to do."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    stand_in = bin_dir / "attnwatch"
    stand_in.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m attnwatch "$@" --dry-run\n')
    stand_in.chmod(0o755)
    env = {
        **os.environ,
        "EXTRAS": extras,
        "WHEELS": wheels,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
    }
    return subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )


def test_gpu_jobs_install_the_optional_extras_after_attnwatch_offline_from_the_wheel_folder(tmp_path):
    """gpu-bench's measure and compare jobs install the extras a dispatch names (else the
    ATTNWATCH_EXTRAS variable) right after attnwatch, from the ATTNWATCH_WHEELS folder alone when
    the runner has one (pip --no-index --find-links, each pin --no-deps); none named, no step runs."""
    wf = _load("gpu-bench.yml")
    assert wf["on"]["workflow_dispatch"]["inputs"]["extras"]["default"] == ""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for job_id in ("measure", "compare"):
        job = wf["jobs"][job_id]
        assert job["env"]["EXTRAS"] == "${{ inputs.extras || vars.ATTNWATCH_EXTRAS }}"
        assert job["env"]["WHEELS"] == "${{ vars.ATTNWATCH_WHEELS }}"
        index, step = _extras_step(job["steps"])
        assert job["steps"][index - 1]["run"].startswith("make install") and step["if"] == "env.EXTRAS != ''"
        assert index < next(
            i
            for i, s in enumerate(job["steps"])
            if "attnwatch run" in s.get("run", "") or "attnwatch compare" in s.get("run", "")
        )
        offline = _run_extras_step(step["run"], tmp_path, "fa4", str(wheels))
        assert offline.returncode == 0, offline.stderr
        assert f"--no-index --find-links {wheels} --no-deps flash-attn-4==" in offline.stdout
        online = _run_extras_step(step["run"], tmp_path, "fa4", "")
        assert online.returncode == 0 and "--no-index" not in online.stdout and "flash-attn-4==" in online.stdout
        unknown = _run_extras_step(step["run"], tmp_path, "fa4 no_such_extra", "")
        assert unknown.returncode == 2 and "unknown extra no_such_extra" in unknown.stderr


def test_the_adoption_action_installs_the_extras_it_is_given(tmp_path):
    action = YAML(typ="safe").load(ACTION.read_text())
    assert action["inputs"]["extras"]["default"] == "" and action["inputs"]["wheels"]["default"] == ""
    index, step = _extras_step(action["runs"]["steps"])
    assert "pip install" in action["runs"]["steps"][index - 1]["run"] and step["if"] == "inputs.extras != ''"
    assert step["env"] == {"EXTRAS": "${{ inputs.extras }}", "WHEELS": "${{ inputs.wheels }}"}
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    done = _run_extras_step(step["run"], tmp_path, "fa4", str(wheels))
    assert done.returncode == 0 and f"--no-index --find-links {wheels} --no-deps" in done.stdout, done.stderr


def test_install_extras_from_a_wheel_folder_never_reaches_an_index(tmp_path):
    """For real, without --dry-run: a folder that lacks the pins fails the install (pip's own
    message, non-zero) instead of fetching them, and installs nothing."""
    from attnwatch.ci.extras import extra_pins

    empty = tmp_path / "wheels"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "install-extras", "fa4", "--wheels", str(empty)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode != 0 and "flash-attn-4" in done.stderr, done.stdout + done.stderr
    assert extra_pins(["fa4"])[0].startswith("flash-attn-4==")
    missing = subprocess.run(
        [sys.executable, "-m", "attnwatch", "install-extras", "fa4", "--wheels", str(tmp_path / "absent")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert missing.returncode == 2 and "--wheels: the wheel folder does not exist" in missing.stderr
