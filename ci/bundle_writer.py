"""Write a run bundle (history/bundle.py is the contract) from what the parent collected.

Each file is written to a temporary name and renamed, and `manifest.json` is written last:
a directory with a manifest is a complete bundle. Records are rebuilt through the contract's
dataclasses, so a field the contract does not know fails here, at the producer, and not in
the history's validator.

The optional ncu pass runs after the bundle is written (it can outlast a GPU job's time limit):
`add_ncu` then adds ncu.json / ncu_raw.csv to the finished bundle and rewrites its manifest,
each file through a temporary name, so the bundle is complete and valid at every moment.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from ci.environment import IDENTITY_FIELDS, GitInfo, merge_device_properties
from ci.ncu.files import write_ncu_files
from ci.suite_state import SuiteState
from history.bundle import (
    BENCHMARK_FILE,
    BUILDS_FILE,
    CORRECTNESS_FILE,
    MANIFEST_FILE,
    OUTCOMES_FILE,
    SAMPLES_FILE,
    TRIGGERS,
    BuildRecord,
    CorrectnessRecord,
    Environment,
    Manifest,
    file_envelope,
    to_json_dict,
)
from history.bundle_writer import finite_record, write_bytes_atomic, write_json_atomic


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
    lost = state.lost_cases()
    if not lost:
        return "complete"
    return "partial" if state.ok_ids() else "failed"


def new_run_id(git: GitInfo, started_at: str) -> str:
    stamp = started_at.replace("-", "").replace(":", "")
    return f"{stamp}-{git.sha[:10]}-{secrets.token_hex(3)}"


def _only_fields(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def _put_file(out_dir: Path, name: str, data: Any, raw: bool = False) -> None:
    """Write one bundle file atomically (history.bundle_writer's writers, shared with tests)."""
    if raw:
        write_bytes_atomic(out_dir / name, data.encode("utf-8"))
    else:
        write_json_atomic(out_dir / name, data)


def write_bundle(out_dir: Path, content: BundleContent) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    state = content.state
    env = merge_device_properties(content.environment, _device_fields(state.device_properties()))
    files: dict[str, str] = {}

    def put(role: str, name: str, data: Any, raw: bool = False) -> None:
        _put_file(out_dir, name, data, raw)
        files[role] = name

    ok = set(state.ok_ids())
    put("benchmark", BENCHMARK_FILE, state.benchmark_json())
    put("outcomes", OUTCOMES_FILE, file_envelope(OUTCOMES_FILE, cases=state.ordered_outcomes()))
    records = [CorrectnessRecord(**_only_fields(CorrectnessRecord, r)) for cid in state.order for r in state.correctness.get(cid, [])]
    put("correctness", CORRECTNESS_FILE, file_envelope(CORRECTNESS_FILE, records=[finite_record(asdict(r)) for r in records]))
    builds = [BuildRecord(**_only_fields(BuildRecord, b)) for b in state.builds.values()]
    put("builds", BUILDS_FILE, file_envelope(BUILDS_FILE, builds=builds))
    put("samples", SAMPLES_FILE, file_envelope(SAMPLES_FILE, unit="us", samples={c: state.samples[c] for c in state.order if c in ok}))
    if content.ncu is not None:
        files.update(write_ncu_files(content.ncu, out_dir))
    notes = "; ".join(filter(None, [content.notes, *state.notes]))
    manifest = Manifest(
        run_id=new_run_id(content.git, content.started_at),
        repo=content.git.repo,
        commit_sha=content.git.sha,
        trigger=content.trigger if content.trigger in TRIGGERS else "local",
        started_at=content.started_at,
        finished_at=content.finished_at,
        runner=os.environ.get("RUNNER_NAME") or env.hostname,
        shape_set=content.shape_set,
        status=run_status(state),
        environment=env,
        parent_sha=content.git.parent_sha,
        branch=content.git.branch,
        pr_number=content.git.pr_number,
        commit_message=content.git.message,
        commit_date=content.git.date,
        dirty=content.git.dirty,
        notes=notes[:4000],
        files=dict(files),
    )
    data = {"schema": manifest.schema, "schema_version": manifest.schema_version, **to_json_dict(manifest)}
    put("manifest", MANIFEST_FILE, data)
    return out_dir


def add_ncu(bundle_dir: Path, ncu: Any, finished_at: str, note: str = "") -> Path:
    """Add an ncu pass (ci.ncu.profile.NcuProfile) to a bundle `write_bundle` already wrote.

    ncu.json (and ncu_raw.csv) are renamed into place first, the manifest last: its `files`
    then lists them, `finished_at` becomes the end of the ncu pass and `note` is appended to
    its notes. Killed at any point, the directory is still the valid bundle it was before.
    """
    bundle_dir = Path(bundle_dir)
    manifest_path = bundle_dir / MANIFEST_FILE
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    files = dict(manifest.get("files") or {})
    files.update(write_ncu_files(ncu, bundle_dir))
    manifest["files"] = files
    manifest["finished_at"] = finished_at
    if note:
        manifest["notes"] = "; ".join(filter(None, [manifest.get("notes", ""), note]))[:4000]
    _put_file(bundle_dir, MANIFEST_FILE, manifest)
    return bundle_dir


def _device_fields(child_env: dict[str, Any]) -> dict[str, Any]:
    if child_env.get("device_kind") != "cuda":
        return {}
    fields_ = ("gpu_name", "compute_capability", "sm_count", "l2_bytes", "gpu_count")
    # The child found its GPU by torch's UUID: its identity (and clocks) is the one recorded.
    fields_ += (*IDENTITY_FIELDS, "sm_clock_mhz", "sm_clock_max_mhz")
    return {k: child_env.get(k) for k in fields_}


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
