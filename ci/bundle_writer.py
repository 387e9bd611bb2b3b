"""A run's bundle, assembled from what the parent collected and written by the one writer.

The suite state (ci.suite_state) holds what the measuring children journalled: outcomes,
timings, samples, and the correctness and build records ci.records converted from kernels'
results. `write_bundle` turns them into the contract's records (history.contract.bundle) and hands
them to history.contract.bundle_writer, the writer every producer uses: there each record is checked as
the reader will check it, so an unknown or missing field fails here, at the producer, naming
the file and the field, and nothing is dropped on the way.

The optional ncu pass runs after the bundle is written (it can outlast a GPU job's time limit):
`add_ncu` then adds ncu.json / ncu_raw.csv to the finished bundle and rewrites its manifest
(history.contract.bundle_writer.add_ncu), so the bundle is complete and valid at every moment.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnwatch.ci.environment import IDENTITY_FIELDS, GitInfo, merge_device_properties
from attnwatch.ci.suite_state import LOST_STATUSES, SuiteState
from attnwatch.history.contract import bundle_writer
from attnwatch.history.contract.bundle import (
    BUILDS_FILE,
    CORRECTNESS_FILE,
    TRIGGERS,
    BuildRecord,
    CaseOutcome,
    CorrectnessRecord,
    Environment,
    Manifest,
)
from attnwatch.history.contract.bundle_writer import BundleContents
from attnwatch.history.contract.checks import build_dataclass, json_ready


@dataclass
class BundleContent:
    state: SuiteState
    git: GitInfo
    environment: Environment
    shape_set: str
    trigger: str
    started_at: str
    finished_at: str
    notes: str = ""
    ncu: Any = None  # ci.ncu.profile.NcuProfile when --ncu was given


def run_status(state: SuiteState) -> str:
    """complete: nothing lost; partial: some cases lost, some measured; failed: nothing measured."""
    return outcomes_status(state.ordered_outcomes())


def outcomes_status(outcomes: list[CaseOutcome]) -> str:
    """A run's status from its case outcomes (the rule of `run_status`, for any producer)."""
    if not any(o.status in LOST_STATUSES for o in outcomes):
        return "complete"
    return "partial" if any(o.status == "ok" for o in outcomes) else "failed"


def new_run_id(git: GitInfo, started_at: str) -> str:
    stamp = started_at.replace("-", "").replace(":", "")
    return f"{stamp}-{git.sha[:10]}-{secrets.token_hex(3)}"


def write_bundle(out_dir: Path, content: BundleContent) -> Path:
    out_dir = Path(out_dir)
    state = content.state
    env = merge_device_properties(content.environment, _device_fields(state.device_properties()))
    ok = set(state.ok_ids())
    # The children journalled the contract's records as JSON objects (ci.records); rebuilt strictly.
    correctness = [r for cid in state.order for r in state.correctness.get(cid, [])]
    notes = "; ".join(filter(None, [content.notes, *state.notes]))
    manifest = run_manifest(content.git, env, shape_set=content.shape_set, trigger=content.trigger,
                            started_at=content.started_at, finished_at=content.finished_at, status=run_status(state),
                            notes=notes)
    return bundle_writer.write_bundle(out_dir, BundleContents(
        manifest=manifest,
        benchmark=state.benchmark_json(),
        outcomes=state.ordered_outcomes(),
        correctness=[build_dataclass(CorrectnessRecord, json_ready(r), out_dir / CORRECTNESS_FILE, f"records[{i}]")
                     for i, r in enumerate(correctness)],
        builds=[build_dataclass(BuildRecord, json_ready(b), out_dir / BUILDS_FILE, f"builds[{i}]")
                for i, b in enumerate(state.builds.values())],
        samples={c: state.samples[c] for c in state.order if c in ok},
        ncu=content.ncu.files() if content.ncu is not None else None,
    ))


def run_manifest(git: GitInfo, environment: Environment, *, shape_set: str, trigger: str, started_at: str,
                 finished_at: str, status: str, notes: str = "") -> Manifest:
    """The manifest of a run measured at `git` in `environment`: the one place a producer in ci
    turns what it knows into a Manifest (`attnwatch run`'s bundle and compare's round bundles)."""
    return Manifest(
        run_id=new_run_id(git, started_at),
        repo=git.repo,
        commit_sha=git.sha,
        trigger=trigger if trigger in TRIGGERS else "local",
        started_at=started_at,
        finished_at=finished_at,
        runner=os.environ.get("RUNNER_NAME") or environment.hostname,
        shape_set=shape_set,
        status=status,
        environment=environment,
        parent_sha=git.parent_sha,
        branch=git.branch,
        pr_number=git.pr_number,
        commit_message=git.message,
        commit_date=git.date,
        dirty=git.dirty,
        notes=notes[: bundle_writer.NOTES_LIMIT],
    )


def add_ncu(bundle_dir: Path, ncu: Any, finished_at: str, note: str = "") -> Path:
    """Add an ncu pass (ci.ncu.profile.NcuProfile) to a bundle `write_bundle` already wrote."""
    return bundle_writer.add_ncu(bundle_dir, ncu.files(), finished_at, note)


def _device_fields(child_env: dict[str, Any]) -> dict[str, Any]:
    if child_env.get("device_kind") != "cuda":
        return {}
    fields_ = ("gpu_name", "compute_capability", "sm_count", "l2_bytes", "gpu_count")
    # The child found its GPU by torch's UUID: its identity (and clocks) is the one recorded.
    fields_ += (*IDENTITY_FIELDS, "sm_clock_mhz", "sm_clock_max_mhz")
    return {k: child_env.get(k) for k in fields_}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
