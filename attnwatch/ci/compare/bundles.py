"""Every round a compare measured, per side, as a run bundle: `DIR/bundles/<side>-round<k>/`.

A compare's rounds are its data: compare.json's verdicts are computed from these bundles, read
back through the bundle contract's one reader (ci/compare/rounds.read_round), and the
PR-comment workflow stores the same bundles as pull-request runs (ci/integration/pr_runs.py). A round's
cases become ci.case_records.CaseRecords here and are assembled and written by the one
assembler `attnwatch run` uses too (ci.bundle_assembly.write_run_bundle), so the rules (an ok
case has its record; each record checked as the reader will) are the same.

One bundle holds one side's round k:

* outcomes: every case measured in that round (a sequential compare stops measuring a
  decided case, so such a case is in fewer rounds' bundles; a case lost on the side is in
  the round it was lost in);
* timings: per measured case the worker's CaseTiming; samples: that round's per-call samples (µs);
* benchmark.json: pytest-benchmark's layout with no entries: compare runs no pytest-benchmark
  host timing;
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

from attnwatch.ci.bundle_assembly import RunHead, RunRecords, write_run_bundle
from attnwatch.ci.case_records import CaseRecords
from attnwatch.ci.compare.rounds import RoundData
from attnwatch.ci.environment import GitInfo, capture_environment
from attnwatch.ci.integration.pr_runs import round_dir
from attnwatch.ci.records import failed_build
from attnwatch.history.contract.bundle import CaseOutcome, Environment

COMPARE_TRIGGER = "compare"


def write_side_bundles(
    out_dir: Path,
    side: str,
    rounds: list[RoundData],
    *,
    git: GitInfo,
    environment: Environment,
    builds: list[dict],
    shape_set: str,
    total_cases: int,
    fingerprints: dict[str, dict] | None = None,
) -> list[Path]:
    """Write round k of `rounds` to `out_dir/bundles/<side>-round<k>`; returns the directories.
    `fingerprints`: the side's worker's, per variant (each round bundle records them)."""
    return [
        write_run_bundle(
            round_dir(out_dir, side, k),
            RunRecords(
                RunHead(
                    git,
                    environment,
                    shape_set,
                    COMPARE_TRIGGER,
                    rd.started_at,
                    rd.finished_at,
                    notes=f"attnwatch compare: {side} round {k} of {len(rounds)}, {len(rd.cases)} of "
                    f"{total_cases} cases (a sequential compare stops measuring decided cases)",
                ),
                cases=round_cases(rd),
                builds=builds,
                fingerprints={
                    n: {k: fp.get(k) for k in ("digest", "code", "unknown")} for n, fp in (fingerprints or {}).items()
                },
            ),
        )
        for k, rd in enumerate(rounds, start=1)
    ]


def round_cases(rd: RoundData) -> list[CaseRecords]:
    """A round's cases as the records its side's worker reported."""
    return [
        CaseRecords(
            CaseOutcome(
                cid, rec.variant, rec.shape_id, rec.dtype, rec.causal, rec.status, rec.error, operator=rec.operator
            ),
            timing=rec.timing,
            samples=rec.samples_us,
            checks=rec.checks,
        )
        for cid, rec in rd.cases.items()
    ]


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
