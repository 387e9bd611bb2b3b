"""A run's bundle, assembled from its case records and written by the one writer.

The one assembler of `attnwatch run` and `attnwatch compare`: each hands its cases as
ci.case_records.CaseRecords (the run from the suite state, ci.suite_state; compare from its
workers' rounds, ci/compare/bundles.py), and `write_run_bundle` applies the rule that an ok case
comes with its record (ci.case_records.checked_outcome), turns the JSON the measuring processes
reported into the contract's records (history.contract.bundle) strictly, and hands them to
history.contract.bundle_writer, which checks the whole bundle as the reader will before writing a file.
Each result is stored once: the timing in timings.json, the samples in samples.json, the host
timing (the run's only) in benchmark.json, whose entries name their case.

The optional ncu pass runs after the bundle is written (it can outlast a GPU job's time limit):
`add_ncu` then adds ncu.json / ncu_raw.csv to the finished bundle and rewrites its manifest
(history.contract.bundle_writer.add_ncu), so the bundle is complete and valid at every moment.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

from attnwatch.ci.case_records import CaseRecords, outcomes_status
from attnwatch.ci.environment import IDENTITY_FIELDS, GitInfo, merge_device_properties
from attnwatch.ci.suite_state import SuiteState
from attnwatch.history.contract import bundle_writer
from attnwatch.history.contract.bundle import (
    BUILDS_FILE,
    CASE_LINK_KEY,
    CORRECTNESS_FILE,
    TIMINGS_FILE,
    TRIGGERS,
    BuildRecord,
    CaseTiming,
    CorrectnessRecord,
    Environment,
    Manifest,
    VariantFingerprint,
)
from attnwatch.history.contract.bundle_writer import BundleContents
from attnwatch.history.contract.checks import build_dataclass, json_ready


@dataclass
class RunHead:
    """What a producer knows of a run besides its cases: the commit, where, how and when."""

    git: GitInfo
    environment: Environment
    shape_set: str
    trigger: str
    started_at: str
    finished_at: str
    notes: str = ""


@dataclass
class RunRecords:
    """Everything one bundle is assembled from."""

    head: RunHead
    cases: list[CaseRecords]  # one per planned case that has an outcome, in plan order
    builds: list[dict[str, Any]] = field(default_factory=list)  # BuildRecord objects
    benchmark_header: dict[str, Any] = field(
        default_factory=dict
    )  # pytest-benchmark's machine_info, commit_info, version
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> ci/fingerprint/variant.py's


def write_run_bundle(out_dir: Path, run: RunRecords) -> Path:
    """Assemble and write one bundle; returns its directory. A record the reader would refuse
    raises BundleError naming the file and field, before any file is written."""
    out_dir = Path(out_dir)
    cases = [c.checked() for c in run.cases]
    timed = [c for c in cases if c.outcome.status == "ok"]
    timings = [
        build_dataclass(CaseTiming, json_ready(c.timing), out_dir / TIMINGS_FILE, f"timings[{i}]")
        for i, c in enumerate(timed)
    ]
    checks = [r for c in cases for r in c.checks]
    outcomes = [c.outcome for c in cases]
    head = run.head
    manifest = run_manifest(
        head.git,
        head.environment,
        shape_set=head.shape_set,
        trigger=head.trigger,
        started_at=head.started_at,
        finished_at=head.finished_at,
        status=outcomes_status(outcomes),
        notes=head.notes,
        fingerprints=run.fingerprints,
    )
    return bundle_writer.write_bundle(
        out_dir,
        BundleContents(
            manifest=manifest,
            benchmark=benchmark_document(run.benchmark_header, [c for c in timed if c.host_entry is not None]),
            outcomes=outcomes,
            timings=timings,
            correctness=[
                build_dataclass(CorrectnessRecord, json_ready(r), out_dir / CORRECTNESS_FILE, f"records[{i}]")
                for i, r in enumerate(checks)
            ],
            builds=[
                build_dataclass(BuildRecord, json_ready(b), out_dir / BUILDS_FILE, f"builds[{i}]")
                for i, b in enumerate(run.builds)
            ],
            samples={c.outcome.case_id: list(c.samples) for c in timed if c.samples is not None},  # ok: has samples
            sample_clocks={c.outcome.case_id: list(c.clocks) for c in timed if c.clocks},
        ),
    )


def benchmark_document(header: dict[str, Any], cases: list[CaseRecords]) -> dict[str, Any]:
    """pytest-benchmark's layout of these cases' host entries, each naming its case
    (`extra_info["attnwatch_case"]`); with no entries when no host timing ran (compare), which
    pytest-benchmark's own tools read as a run of no benchmarks."""
    entries = [
        {**c.host_entry, "extra_info": {**(c.host_entry.get("extra_info") or {}), CASE_LINK_KEY: c.outcome.case_id}}
        for c in cases
        if c.host_entry is not None
    ]
    return {
        "machine_info": header.get("machine_info") or {},
        "commit_info": header.get("commit_info") or {},
        "benchmarks": entries,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": header.get("version") or version("pytest-benchmark"),
    }


def write_bundle(out_dir: Path, state: SuiteState, head: RunHead) -> Path:
    """`attnwatch run`'s bundle, through the one assembler: the suite's cases, the device its
    measuring child found, and the notes the children journalled."""
    environment = merge_device_properties(head.environment, _device_fields(state.device_properties()))
    return write_run_bundle(
        out_dir,
        RunRecords(
            head=dataclasses.replace(
                head, environment=environment, notes="; ".join(filter(None, [head.notes, *state.notes]))
            ),
            cases=state.case_records(),
            builds=list(state.builds.values()),
            benchmark_header=state.benchmark_header or {"machine_info": {"attnwatch": state.device_properties()}},
            fingerprints=state.fingerprints,
        ),
    )


def run_status(state: SuiteState) -> str:
    """complete: nothing lost; partial: some cases lost, some measured; failed: nothing measured."""
    return outcomes_status(state.ordered_outcomes())


def new_run_id(git: GitInfo, started_at: str) -> str:
    stamp = started_at.replace("-", "").replace(":", "")
    return f"{stamp}-{git.sha[:10]}-{secrets.token_hex(3)}"


def run_manifest(
    git: GitInfo,
    environment: Environment,
    *,
    shape_set: str,
    trigger: str,
    started_at: str,
    finished_at: str,
    status: str,
    notes: str = "",
    fingerprints: dict[str, dict[str, Any]] | None = None,
) -> Manifest:
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
        fingerprints={name: variant_fingerprint(fp) for name, fp in sorted((fingerprints or {}).items())},
    )


def variant_fingerprint(fp: dict[str, Any]) -> VariantFingerprint:
    """A measuring process's fingerprint of one variant as the manifest records it."""
    unknown = fp.get("unknown")
    return VariantFingerprint(
        digest=fp.get("digest"), code=fp.get("code"), unknown=str(unknown)[:1000] if unknown else None
    )


def add_ncu(bundle_dir: Path, ncu: Any, finished_at: str, note: str = "") -> Path:
    """Add an ncu pass (ci.ncu.profile.NcuProfile) to a bundle `write_bundle` already wrote."""
    return bundle_writer.add_ncu(bundle_dir, ncu.files(), finished_at, note)


def _device_fields(child_env: dict[str, Any]) -> dict[str, Any]:
    if child_env.get("device_kind") != "cuda":
        return {}
    fields_: tuple[str, ...] = ("gpu_name", "compute_capability", "sm_count", "l2_bytes", "gpu_count")
    # The child found its GPU by torch's UUID: its identity (and clocks) is the one recorded.
    fields_ += (*IDENTITY_FIELDS, "sm_clock_mhz", "sm_clock_max_mhz")
    return {k: child_env.get(k) for k in fields_}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
