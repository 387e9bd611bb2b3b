"""Every round a compare measured, per side, as a run bundle: `DIR/bundles/<side>-round<k>/`.

A compare's rounds are its data: compare.json's verdicts are computed from these bundles, read
back through the bundle contract's one reader (ci/compare/rounds.read_round), and the
PR-comment workflow stores the same bundles as pull-request runs (ci/pr_runs.py). They are
written by the one bundle writer (history.contract.bundle_writer; the manifest assembled as
`attnwatch run` assembles it, ci.bundle_writer.run_manifest), so a record the reader would
refuse fails here, at the producer, naming the file and field.

One bundle holds one side's round k:

* outcomes: every case measured in that round (a sequential compare stops measuring a
  decided case, so such a case is in fewer rounds' bundles; a case lost on the side is in
  the round it was lost in);
* benchmark.json: per measured case the worker's CaseTiming under `extra_info["attnwatch"]`;
  compare runs no pytest-benchmark host timing, so `stats` is empty and
  `extra_info["attnwatch_stats_are"]` says so;
* samples: that round's per-call samples (µs);
* correctness: the records checked in that round (a worker checks a case once, normally in
  round 1; a restarted worker checks the cases it is asked for again);
* builds: the side's build records, in every round's bundle (every round timed those builds);
* the manifest: the side's commit (the measured head SHA, or the merge base), the GPU as the
  side's worker saw it (ci.environment.capture_environment in the worker, with the device
  identity through torch's UUID, as `attnwatch run`'s child records it), trigger `compare`.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from attnwatch.ci.bundle_writer import outcomes_status, run_manifest
from attnwatch.ci.compare.rounds import RoundData
from attnwatch.ci.environment import GitInfo, capture_environment
from attnwatch.ci.pr_runs import round_dir
from attnwatch.ci.records import failed_build
from attnwatch.history.contract import bundle_writer
from attnwatch.history.contract.bundle import (
    BENCHMARK_FILE,
    BUILDS_FILE,
    CORRECTNESS_FILE,
    EXTRA_INFO_KEY,
    BuildRecord,
    CaseOutcome,
    CaseTiming,
    CorrectnessRecord,
    Environment,
)
from attnwatch.history.contract.bundle_writer import BundleContents
from attnwatch.history.contract.checks import build_dataclass, json_ready

COMPARE_TRIGGER = "compare"
STATS_LABEL_KEY = "attnwatch_stats_are"  # as ci/suites/test_bench.py labels a run's host stats
NO_HOST_STATS = "none: compare times device samples only (extra_info.attnwatch); no pytest-benchmark host timing ran"
NO_RECORD = "reported ok but no timing or samples were recorded"


def write_side_bundles(out_dir: Path, side: str, rounds: list[RoundData], *, git: GitInfo, environment: Environment,
                       builds: list[dict], groups: dict[str, str], shape_set: str, total_cases: int) -> list[Path]:
    """Write round k of `rounds` to `out_dir/bundles/<side>-round<k>`; returns the directories."""
    return [write_round_bundle(round_dir(out_dir, side, k), rd, git=git, environment=environment, builds=builds,
                               groups=groups, shape_set=shape_set,
                               notes=f"attnwatch compare: {side} round {k} of {len(rounds)}, {len(rd.cases)} of "
                                     f"{total_cases} cases (a sequential compare stops measuring decided cases)")
            for k, rd in enumerate(rounds, start=1)]


def write_round_bundle(path: Path, rd: RoundData, *, git: GitInfo, environment: Environment, builds: list[dict],
                       groups: dict[str, str], shape_set: str, notes: str) -> Path:
    outcomes, entries, samples, checks = [], [], {}, []
    for cid, rec in rd.cases.items():
        status, error = rec.status, rec.error
        if status == "ok" and not (rec.timing and rec.samples_us):
            status, error = "failed", NO_RECORD  # an "ok" must come with its record, as in `attnwatch run`
        outcomes.append(CaseOutcome(cid, rec.variant, rec.shape_id, rec.dtype, rec.causal, status, error))
        if status == "ok":
            where = f"benchmarks[{len(entries)}].extra_info.{EXTRA_INFO_KEY}"
            timing = build_dataclass(CaseTiming, json_ready(rec.timing), path / BENCHMARK_FILE, where)
            entries.append(benchmark_entry(timing, groups.get(cid)))
            samples[cid] = list(rec.samples_us)
        checks.extend(rec.checks)
    manifest = run_manifest(git, environment, shape_set=shape_set, trigger=COMPARE_TRIGGER,
                            started_at=rd.started_at, finished_at=rd.finished_at, status=outcomes_status(outcomes),
                            notes=notes)
    return bundle_writer.write_bundle(path, BundleContents(
        manifest=manifest,
        benchmark={"machine_info": {}, "commit_info": {}, "benchmarks": entries, "datetime": rd.finished_at},
        outcomes=outcomes,
        correctness=[build_dataclass(CorrectnessRecord, json_ready(r), path / CORRECTNESS_FILE, f"records[{i}]")
                     for i, r in enumerate(checks)],
        builds=[build_dataclass(BuildRecord, json_ready(b), path / BUILDS_FILE, f"builds[{i}]")
                for i, b in enumerate(builds)],
        samples=samples,
    ))


def benchmark_entry(timing: CaseTiming, group: str | None) -> dict:
    """A benchmark.json entry in pytest-benchmark's layout for a case compare timed itself."""
    return {
        "name": f"compare[{timing.case_id}]",
        "fullname": f"attnwatch compare::{timing.case_id}",
        "group": group,
        "params": {"case": timing.case_id},
        "stats": {},
        "extra_info": {EXTRA_INFO_KEY: asdict(timing), STATS_LABEL_KEY: NO_HOST_STATS},
    }


def side_environment(reported: dict, device_kind: str) -> Environment:
    """The side's environment as its worker captured it; the parent's reading when no worker
    started (then only the device kind of the plan is known for sure)."""
    env = Environment(**reported) if reported else capture_environment(probe_device=False)
    env.device_kind = device_kind
    return env


def side_builds(reported: list[dict], failed: dict[str, str]) -> list[dict]:
    """The worker's build records, plus a failed record for each build that crashed a worker
    (it was not tried again: ci/compare/side.py)."""
    known = {b.get("variant") for b in reported}
    return [*reported, *(asdict(failed_build(v, error)) for v, error in failed.items() if v not in known)]
