"""One measured compare: start the two sides' workers, run the rounds, record where time went.

`run_session` builds the plan both workers run (the head's case list, the run's timing config
with the compare's per-round sampling), one `Side` per revision (the base's `kernels` from its
checkout, the head's from its own or this checkout: the same way `attnwatch run` children
import another checkout's kernels, ci/child_env.py), runs ci.compare.measure, stops the
workers, and writes beside compare.json:

* `bundles/<side>-round<k>/`: every round each side measured, as a run bundle
  (ci/compare/bundles.py): the data compare.json's verdicts are computed from, and what the
  PR-comment workflow stores as pull-request runs;
* `session.json`: the design, the rounds each case used, the workers (kernels path and its
  harness API version, restarts, their round bundles, every variant's fingerprint), the
  selection (ci/compare/select.py: which variants were measured and why), the
  crash-attribution notes, and the wall-time breakdown per side;
* `workers/<side>/`: each worker's plan and log.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from attnwatch.ci.child_env import IMPORT_ROOT as REPO_ROOT
from attnwatch.ci.compare.bundles import side_builds, side_environment, write_side_bundles
from attnwatch.ci.compare.measure import Measured, measure_rounds
from attnwatch.ci.compare.out_dir import NCU_DIR, SESSION_FILE, WORKERS_DIR
from attnwatch.ci.compare.revisions import CompareSide, roots_of
from attnwatch.ci.compare.select import Selection, harness_change, head_checks, never_canary, select_variants
from attnwatch.ci.compare.sequential import SequentialDesign
from attnwatch.ci.compare.side import Side, side_spec
from attnwatch.ci.compare.side_group import SideGroup
from attnwatch.ci.workers.client import close_deadline
from attnwatch.ci.environment import GitInfo, capture_git
from attnwatch.ci.fingerprint.sources import harness_closure, rules
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import TimingConfig, case_timeout, compare_workers_per_side, configured
from attnwatch.history.contract.bundle_writer import write_json_atomic


@dataclass
class SessionOptions:
    """How to measure a compare. Settings not given come from ci/run_config.toml, as for
    `attnwatch run` (ci.supervisor.RunOptions): the case timeout and the workers per side by device kind."""

    device_kind: str
    timing: TimingConfig
    sampling: dict
    design: SequentialDesign
    min_effect: float
    shape_set: str = ""
    method: str = configured("method", "compare")
    resamples: int = configured("resamples", "compare")
    correctness: bool = True
    correctness_seeds: list[int] = configured("correctness_seeds")
    timing_seed: int = configured("timing_seed")
    case_timeout_s: float | None = None
    startup_timeout_s: float = configured("startup_timeout_s")
    build_timeout_s: float = configured("build_timeout_s")
    max_restarts: int = configured("max_child_restarts")
    extra_variant_modules: list[str] = field(default_factory=list)
    extra_sys_path: list[str] = field(default_factory=list)
    python: str = ""
    workers_per_side: int | None = None  # ci/compare/side_group.py: k workers per side take the rounds in turn
    # ci/compare/select.py: measure only the variants whose fingerprints differ (plus the reference, the
    # baselines a changed variant needs, and the A/A canary), rotating the canary by `rotation` (the head
    # commit); False measures every variant.
    select: bool = False
    rotation: str = ""
    measure_all: str | None = None  # with `select`: why every variant is measured anyway (--all), recorded as such

    def __post_init__(self) -> None:
        if self.case_timeout_s is None:
            self.case_timeout_s = case_timeout(self.device_kind)
        if self.workers_per_side is None:
            self.workers_per_side = compare_workers_per_side(self.device_kind)


@dataclass
class Session:
    measured: Measured
    sides: dict[str, SideGroup]
    notes: list[str]
    bundles: dict[str, list[Path]]  # side -> its round bundles, round 1 first
    selection: Selection | None = None  # None: every variant measured without selecting (options.select off)
    select_s: float = 0.0  # the parent's part of fingerprinting: the harness of both checkouts, the decision


def run_session(
    cases: list[PlannedCase],
    *,
    sides: tuple[CompareSide, CompareSide],
    out_dir: Path,
    options: SessionOptions,
    log: Callable[[str], None] = print,
) -> Session:
    """Measure `cases` on the base and the head of `sides` (module docstring)."""
    import sys

    assert options.workers_per_side is not None  # SessionOptions.__post_init__ sets it
    plan = RunPlan(
        cases=list(cases),
        timing=options.timing.to_dict(),
        device_kind=options.device_kind,
        correctness=options.correctness,
        correctness_seeds=list(options.correctness_seeds),
        timing_seed=options.timing_seed,
        extra_variant_modules=list(options.extra_variant_modules),
    )
    work = Path(out_dir) / WORKERS_DIR
    env = machine_env()
    assert sorted(side.role for side in sides) == ["base", "head"], sides
    given = sorted(sides, key=lambda side: side.role)  # base, then head
    gits = {side.role: side_git(side.root, side.commit, side.role) for side in given}
    groups: dict[str, SideGroup] = {}
    for side in given:
        spec = side_spec(
            plan,
            side.role,
            side.root,
            work,
            extra_sys_path=options.extra_sys_path,
            extra_env=env,
            startup_timeout_s=options.startup_timeout_s,
            build_timeout_s=options.build_timeout_s,
            case_timeout_s=options.case_timeout_s,
            python=options.python or sys.executable,
        )
        first = Side(side.role, spec, commit_sha=side.commit, max_restarts=options.max_restarts, log=log)
        groups[side.role] = SideGroup.of(first, options.workers_per_side)
    chosen: dict = {}
    # The harness half of the selection reads only the two checkouts: done while the workers start and build.
    pool = ThreadPoolExecutor(1) if options.select and options.measure_all is None else None
    harness = pool.submit(harness_reason, roots_of(sides)) if pool else None

    def choose(planned: list[PlannedCase]) -> list[PlannedCase]:
        started = time.monotonic()
        chosen["selection"] = choose_variants(planned, groups, options, harness.result() if harness else None)
        chosen["seconds"] = time.monotonic() - started
        selection = chosen["selection"]
        checked = set(head_checks(selection, groups["base"].fingerprints, groups["head"].fingerprints))
        groups["base"].check_only(set())
        groups["head"].check_only({c.case_id for c in planned if c.variant in checked})
        why = (
            selection.everything
            or f"{len(selection.skipped)} unchanged, A/A canary: {', '.join(selection.canary) or 'none'}"
        )
        log(
            f"compare: measuring {len(selection.measured)} of {len(selection.measured) + len(selection.skipped)} "
            f"variants ({why})"
        )
        return [c for c in planned if c.variant in selection.measured]

    try:
        measured = measure_rounds(
            cases,
            groups,
            options.design,
            min_effect=options.min_effect,
            sampling=options.sampling,
            method=options.method,
            resamples=options.resamples,
            log=log,
            choose=choose if options.select else None,
        )
    finally:
        if pool:
            pool.shutdown(wait=False, cancel_futures=True)
        for group in groups.values():
            group.stop()
        deadline = close_deadline()  # one grace for every worker, not one after another
        for group in groups.values():
            group.close(deadline)
    notes = [n for name in ("base", "head") for n in groups[name].notes]  # each names its side and worker
    bundles = {
        name: write_side_bundles(
            Path(out_dir),
            name,
            rounds,
            git=gits[name],
            environment=side_environment(groups[name].environment, options.device_kind),
            builds=side_builds(groups[name].builds, groups[name].spec.failed_builds),
            shape_set=options.shape_set,
            total_cases=len(cases),
            fingerprints=groups[name].fingerprints,
        )
        for name, rounds in (("base", measured.base), ("head", measured.head))
    }
    session = Session(measured, groups, notes, bundles, chosen.get("selection"), chosen.get("seconds", 0.0))
    write_json_atomic(Path(out_dir) / SESSION_FILE, session_record(session, options, out_dir))
    return session


def harness_reason(roots: dict[str, Path | None]) -> str | None:
    """Why the shared harness forces measuring everything (ci/compare/select.harness_change), None
    when both checkouts' harness is identical; one that cannot be fingerprinted measures everything
    (never a lost compare)."""
    try:
        harness = {name: harness_closure(Path(root) if root is not None else REPO_ROOT) for name, root in roots.items()}
        return harness_change(
            harness["base"].files, harness["head"].files, harness["base"].unknown, harness["head"].unknown
        )
    except Exception as exc:  # noqa: BLE001 - measuring everything is the safe answer to any fault here
        return f"the shared harness could not be fingerprinted ({type(exc).__name__})"


def choose_variants(
    planned: list[PlannedCase], sides: dict[str, SideGroup], options: SessionOptions, harness: str | None
) -> Selection:
    """The selection (ci/compare/select.py) from the workers' fingerprints and `harness`
    (harness_reason, or None under --all); what cannot be read measures everything."""
    everything, canary = options.measure_all or harness, 0
    not_canary: tuple[str, ...] = ()
    try:
        canary = int(rules()["selection"]["canary_variants"])
        not_canary = never_canary(rules()["selection"])
    except Exception as exc:  # noqa: BLE001 - measuring everything is the safe answer to any fault here
        everything = everything or f"the selection rules could not be read ({type(exc).__name__})"
    plan = sides["head"].spec.plan  # both sides take the gaps against the head's baselines (ci/plan.py)
    return select_variants(
        list(dict.fromkeys(c.variant for c in planned)),
        sides["base"].fingerprints,
        sides["head"].fingerprints,
        reference=plan.reference,
        baselines=plan.baselines,
        rotation=options.rotation,
        canary=canary,
        everything=everything,
        not_canary=not_canary,
    )


def side_git(root: Path | None, sha: str, side: str) -> GitInfo:
    """The commit a side measured, with git's metadata where the checkout is that commit.

    `sha` (the resolved head, or the merge base) wins over what the checkout says; the base is
    not the pull request, so it gets no branch or PR number from the job's environment."""
    git = capture_git(root or REPO_ROOT)
    if sha and sha != git.sha:  # a checkout of another commit (or none): its metadata is not sha's
        git = GitInfo(sha=sha, repo=git.repo, branch=git.branch, pr_number=git.pr_number)
    if side == "base":
        git.branch, git.pr_number = None, None
    return git


def machine_env() -> dict[str, str]:
    """What both workers must see alike although it is not in either revision: the CUTLASS
    headers (ignored by git, so a worktree of the base has no `.cutlass/include`; without this
    the base would skip every CUTLASS variant and the A/B would call them `new`)."""
    if os.environ.get("CUTLASS_INCLUDE_DIR"):
        return {}
    from attnwatch.kernels.cutlass.headers import cutlass_include_dir

    found = cutlass_include_dir()
    return {"CUTLASS_INCLUDE_DIR": str(found)} if found is not None else {}


def session_record(session: Session, options: SessionOptions, out_dir: Path) -> dict:
    """What the round bundles do not say: the design, the schedule, the workers and their cost, the
    selection with every variant's fingerprint on both sides. Each side's builds and measurements
    are in its round bundles, named relative to `out_dir`."""
    measured, sides, notes, bundles, design = (
        session.measured,
        session.sides,
        session.notes,
        session.bundles,
        options.design,
    )
    return {
        "design": {
            "min_rounds": design.min_rounds,
            "max_rounds": design.max_rounds,
            "looks": design.looks,
            "confidence": design.confidence,
            "per_look_confidence": design.per_look_confidence,
            "method": options.method,
            "resamples": options.resamples,
            "sampling": options.sampling,
        },
        "wall_s": measured.wall_s,
        "looks_s": measured.looks_s,
        "rounds_run": len(measured.base),
        "schedule": [list(entry) for entry in measured.schedule],
        "rounds_used": measured.rounds_used,
        "decided": measured.decided,
        "workers_per_side": options.workers_per_side,
        "sides": {
            name: {
                "kernels_path": s.kernels_path,
                "harness_api_version": s.harness_api_version,
                "commit_sha": s.commit_sha,
                "restarts": s.restarts,
                "final": {cid: {"status": r.status, "error": r.error} for cid, r in s.final.items()},
                "bundles": [str(Path(p).relative_to(out_dir)) for p in bundles[name]],
                "rounds_by_worker": s.measured_by,
                "times": asdict(s.times),
                "fingerprints": s.fingerprints,
            }
            for name, s in sides.items()
        },
        "selection": asdict(session.selection) if session.selection else None,
        "select_s": session.select_s,
        "notes": notes,
    }


def add_ncu(
    session: Session,
    cases: list[PlannedCase],
    roots: dict[str, Path | None],
    out_dir: Path,
    log: Callable[[str], None] = print,
    *,
    only: Sequence[str] | None = None,
    budget_s: float | None = None,
) -> None:
    """Profile each side's measured cases once (after the rounds, never during them), with the
    explain list (ci/ncu/metrics.toml: every counter a counter rule reads), and add the
    pass to that side's round-1 bundle (ci.bundle_assembly.add_ncu, as `attnwatch run` does), where
    ci.compare.analysis finds it when the rounds are read back.

    `only`: the case ids to profile, in that order (a compare's decided changes first:
    ci/compare/select.py profiled_cases); None: every measured case. `budget_s` bounds both
    sides together, half each (the base's unused time goes to the head): a case not profiled by
    then carries the deadline as its error.

    A case whose profiled work was profiled before (the same case, the same variant fingerprint
    on the same GPU model, ncu, options, profiled program and harness) is read from the profile
    cache instead, on either side (ci/ncu/profile_cache.py); the log line says how many were.
    """
    import time

    from attnwatch.ci.bundle_assembly import add_ncu as add_ncu_to_bundle
    from attnwatch.ci.bundle_assembly import utc_now
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections
    from attnwatch.ci.ncu.profile_cache import profile_through_cache

    rank = None if only is None else {cid: k for k, cid in enumerate(only)}
    end = None if budget_s is None else time.monotonic() + budget_s
    for name, rounds in (("base", session.measured.base), ("head", session.measured.head)):
        if not rounds or not session.bundles.get(name):
            continue
        ok = {cid for rd in rounds for cid, rec in rd.cases.items() if rec.status == "ok"}
        picked = [c for c in cases if c.case_id in ok and (rank is None or c.case_id in rank)]
        if rank is not None:
            picked.sort(key=lambda c: rank[c.case_id])  # what the deadline may cut comes last
        chosen = [c.to_case() for c in picked]
        if not chosen:
            continue
        deadline = None if end is None else (end if name == "head" else time.monotonic() + (end - time.monotonic()) / 2)
        profile, cache = profile_through_cache(
            chosen,
            Path(out_dir) / NCU_DIR / name,
            fingerprints=session.sides[name].fingerprints,
            kernels_root=roots[name],
            sections=choose_sections(EXPLAIN),
            deadline=deadline,
            gpu_name=session.sides[name].environment.get("gpu_name"),
        )
        log(
            f"compare: ncu {name}: {len(profile.case_metrics)} cases in {profile.seconds:.0f} s"
            + f" ({cache.summary(len(chosen))})"
            + (f", {len(profile.errors)} without metrics" if profile.errors else "")
            + "".join(f"; {note}" for note in profile.notes)
        )
        add_ncu_to_bundle(
            session.bundles[name][0],
            profile,
            finished_at=utc_now(),
            note=f"ncu pass over {len(chosen)} cases after the rounds",
        )
