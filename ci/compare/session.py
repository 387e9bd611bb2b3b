"""One measured compare: start the two sides' workers, run the rounds, record where time went.

`run_session` builds the plan both workers run (the head's case list, the run's timing config
with the compare's per-round sampling), one `Side` per revision (the base's `kernels` from its
checkout, the head's from its own or this checkout: the same way `attnwatch run` children
import another checkout's kernels, ci/child_env.py), runs ci.compare.measure, stops the
workers, and writes beside compare.json:

* `rounds.json`: every round's per-case samples, status and gap-to-SDPA, per side (the raw
  data the verdicts come from; schema attnwatch.compare_rounds, version 1);
* `session.json`: the design, the rounds each case used, the workers (kernels path, builds,
  restarts), the crash-attribution notes, and the wall-time breakdown per side;
* `workers/<side>/`: each worker's plan and log.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from ci.compare.measure import Measured, measure_rounds
from ci.compare.sequential import SequentialDesign
from ci.compare.side import Side, side_spec
from ci.plan import PlannedCase, RunPlan
from ci.run_config import TimingConfig
from history.bundle_writer import write_json_atomic

ROUNDS_SCHEMA = "attnwatch.compare_rounds"
ROUNDS_FILE = "rounds.json"
SESSION_FILE = "session.json"


@dataclass
class SessionOptions:
    device_kind: str
    timing: TimingConfig
    sampling: dict
    design: SequentialDesign
    min_effect: float
    method: str = "hierarchical"
    resamples: int = 2000
    correctness: bool = True
    correctness_seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    timing_seed: int = 1234
    case_timeout_s: float = 120.0
    startup_timeout_s: float = 300.0
    build_timeout_s: float = 900.0
    max_restarts: int = 50
    extra_variant_modules: list[str] = field(default_factory=list)
    extra_sys_path: list[str] = field(default_factory=list)
    python: str = ""


@dataclass
class Session:
    measured: Measured
    sides: dict[str, Side]
    notes: list[str]


def run_session(cases: list[PlannedCase], *, roots: dict[str, Path | None], commits: dict[str, str], out_dir: Path,
                options: SessionOptions, log: Callable[[str], None] = print) -> Session:
    import sys

    plan = RunPlan(cases=list(cases), timing=options.timing.to_dict(), device_kind=options.device_kind,
                   correctness=options.correctness, correctness_seeds=list(options.correctness_seeds),
                   timing_seed=options.timing_seed, extra_variant_modules=list(options.extra_variant_modules))
    work = Path(out_dir) / "workers"
    env = machine_env()
    sides = {
        name: Side(name, side_spec(plan, name, roots[name], work, extra_sys_path=options.extra_sys_path, extra_env=env,
                                   startup_timeout_s=options.startup_timeout_s, build_timeout_s=options.build_timeout_s,
                                   case_timeout_s=options.case_timeout_s, python=options.python or sys.executable),
                   commit_sha=commits.get(name, ""), max_restarts=options.max_restarts, log=log)
        for name in ("base", "head")
    }
    try:
        measured = measure_rounds(cases, sides, options.design, min_effect=options.min_effect, sampling=options.sampling,
                                  method=options.method, resamples=options.resamples, log=log)
    finally:
        for side in sides.values():
            side.stop()
        for side in sides.values():
            side.close()
    notes = [n for name in ("base", "head") for n in sides[name].attribution.notes]  # each names its side
    write_rounds(Path(out_dir) / ROUNDS_FILE, measured)
    write_json_atomic(Path(out_dir) / SESSION_FILE, session_record(measured, sides, options, notes))
    return Session(measured, sides, notes)


def machine_env() -> dict[str, str]:
    """What both workers must see alike although it is not in either revision: the CUTLASS
    headers (ignored by git, so a worktree of the base has no `.cutlass/include`; without this
    the base would skip every CUTLASS variant and the A/B would call them `new`)."""
    if os.environ.get("CUTLASS_INCLUDE_DIR"):
        return {}
    from kernels.cutlass.headers import cutlass_include_dir

    found = cutlass_include_dir()
    return {"CUTLASS_INCLUDE_DIR": str(found)} if found is not None else {}


def write_rounds(path: Path, measured: Measured) -> Path:
    """Every round's per-case records, per side (samples in microseconds)."""
    data = {"schema": ROUNDS_SCHEMA, "schema_version": 1, "unit": "us",
            "sides": {name: [{"round": i + 1, "cases": {cid: asdict(rec) for cid, rec in rd.cases.items()}}
                             for i, rd in enumerate(rounds)]
                      for name, rounds in (("base", measured.base), ("head", measured.head))}}
    path.write_text(json.dumps(data, allow_nan=False), encoding="utf-8")
    return path


def session_record(measured: Measured, sides: dict[str, Side], options: SessionOptions, notes: list[str]) -> dict:
    design = options.design
    return {
        "design": {"min_rounds": design.min_rounds, "max_rounds": design.max_rounds, "looks": design.looks,
                   "confidence": design.confidence, "per_look_confidence": design.per_look_confidence,
                   "method": options.method, "resamples": options.resamples, "sampling": options.sampling},
        "wall_s": measured.wall_s,
        "looks_s": measured.looks_s,
        "rounds_run": len(measured.base),
        "schedule": [list(entry) for entry in measured.schedule],
        "rounds_used": measured.rounds_used,
        "decided": measured.decided,
        "sides": {name: {"kernels_path": s.kernels_path, "commit_sha": s.commit_sha, "restarts": s.restarts,
                         "final": {cid: {"status": r.status, "error": r.error} for cid, r in s.final.items()},
                         "builds": s.builds, "times": asdict(s.times)} for name, s in sides.items()},
        "notes": notes,
    }


def add_ncu(session: Session, cases: list[PlannedCase], roots: dict[str, Path | None], out_dir: Path,
            log: Callable[[str], None] = print) -> None:
    """`--ncu`: profile each side's measured cases once (after the rounds, never during them) and
    attach the metrics to that side's first round, where ci.compare.analysis looks for them."""
    import math

    from ci.compare.rounds import NCU_FIELDS
    from ci.ncu.profile import profile_cases

    for name, rounds in (("base", session.measured.base), ("head", session.measured.head)):
        if not rounds:
            continue
        ok = {cid for rd in rounds for cid, rec in rd.cases.items() if rec.status == "ok"}
        chosen = [c.to_case() for c in cases if c.case_id in ok]
        if not chosen:
            continue
        profile = profile_cases(chosen, Path(out_dir) / "ncu" / name, kernels_root=roots[name],
                                gpu_name=session.sides[name].environment.get("gpu_name"))
        log(f"compare: ncu {name}: {len(profile.case_metrics)} cases in {profile.seconds:.0f} s")
        for metrics in profile.case_metrics:
            record = rounds[0].cases.get(metrics.case_id)
            if record is not None:
                values = {k: getattr(metrics, k, None) for k in NCU_FIELDS}
                record.ncu = {k: float(v) for k, v in values.items()
                              if isinstance(v, (int, float)) and math.isfinite(v)}
