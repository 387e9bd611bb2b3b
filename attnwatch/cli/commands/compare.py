"""`attnwatch compare`: same-job A/B of a pull request's merge base against its head.

    attnwatch compare --base origin/main --head HEAD [--shapes pr] [--rounds 8] [--min-rounds 3]
                      [--fail-on regression] [--out DIR]

Checks the merge base out as a git worktree and starts one warm worker per side; once both have
built, each variant's fingerprint is compared across the sides and only the variants that differ
(with the reference and a rotating A/A canary) are measured (ci/compare/select.py; `--all`
measures every variant), in alternating rounds on this GPU (ci.compare.measure); each case is measured
until its verdict is decided (ci.compare.sequential: the interval of head/base, paired t over
rounds by default, beyond 1 with the median ratio beyond the GPU's min_effect, or inside
±min_effect; history/analysis/thresholds.toml) or the round cap is reached. Writes under --out every
round of each side as a run bundle, `bundles/<base|head>-round<k>/` (ci/compare/bundles.py; the PR-comment workflow stores them as
pull-request runs), `compare.json` computed from those bundles as read back by the bundle
reader (schema-versioned; the PR-comment workflow reads it as untrusted data) and
`session.json`, and prints a table.
`--base-bundles/--head-bundles` compare bundles already recorded instead of measuring. Needs
no database.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from attnwatch.ci.compare.analysis import compare_rounds, noise_warnings
from attnwatch.ci.compare.out_dir import BINARIES_DIR, fresh_out
from attnwatch.ci.compare.costs import format_other, format_times, other_split, time_breakdown
from attnwatch.ci.compare.select import selection_record
from attnwatch.ci.compare.report import COMPARE_FILE, CompareReport, write_report
from attnwatch.ci.compare.rounds import RoundData, read_round
from attnwatch.ci.compare.table import format_table
from attnwatch.ci.errors import UserError
from attnwatch.cli.compare_flags import add_arguments, check_mode_flags, resolve_defaults
from attnwatch.ci.run_config import compare_setting
from attnwatch.history.contract.bundle import UNKNOWN_COMMIT
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.contract.validate import SHA_PATTERN
from attnwatch.history.analysis.case_rules import load_case_rules
from attnwatch.history.contract.series_key import series_gpu

if TYPE_CHECKING:
    from attnwatch.ci.compare.revisions import CompareSide


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="A/B the merge base against the head on this GPU; write compare.json",
        description="Check the merge base out next to the head, measure the variants whose build differs (with the reference and "
        "an A/A canary) in alternating rounds on this GPU until each case's interval decides it; write every "
        "round's bundle and compare.json under --out and print a table. Needs no history.",
    )
    add_arguments(p)
    p.set_defaults(func=_run)


def _measure(args, out: Path) -> tuple[list[RoundData], list[RoundData], dict, dict]:
    """(base rounds, head rounds, refs, extra): measure with two warm workers (ci.compare.session)."""
    from attnwatch.ci.compare.revisions import CompareSide, current_head, merge_base, repo_root, resolve, worktree

    if args.base_root:
        return _measure_checkout(args, out)
    if args.baseline:
        args.base = pinned_base(args.baseline, args.base)
    if not args.base:
        raise UserError(
            "--base (or --baseline) is required with --pytest"
            if args.pytest
            else "--base is required unless --base-bundles/--head-bundles or --base-root are given"
        )
    repo = repo_root(Path.cwd())
    head_sha = resolve(repo, args.head)
    base_sha = resolve(repo, args.base)
    mb = merge_base(repo, base_sha, head_sha)
    refs = {
        "base_sha": base_sha,
        "head_sha": head_sha,
        "merge_base_sha": mb,
        "head_ref": args.head,
        "base_ref": f"baseline {args.baseline}" if args.baseline else args.base,
    }
    # The head is measured from this very checkout when it is the one being asked for (the suite's
    # repository with --pytest); any other head revision (or another repository) gets its own worktree.
    here = args.pytest or repo == repo_root(Path(__file__).resolve().parent)
    if here and head_sha == current_head(repo):
        refuse_dirty(args, ["head"] if _dirty(repo) else [])
    if args.pytest:
        return (*_pytest_sides(args, out, repo, mb, head_sha), refs)
    with worktree(repo, mb, "base") as base_root:
        base = CompareSide("base", mb, base_root, args.base)
        if here and head_sha == current_head(repo):
            head = CompareSide("head", head_sha, None, args.head)
            return (*_session(args, out, (base, head), f"merge base {mb[:12]}"), refs)
        with worktree(repo, head_sha, "head") as head_root:
            head = CompareSide("head", head_sha, head_root, args.head)
            return (*_session(args, out, (base, head), f"merge base {mb[:12]}"), refs)


def _pytest_sides(
    args, out: Path, repo: Path, base_sha: str, head_sha: str
) -> tuple[list[RoundData], list[RoundData], dict]:
    """--pytest: the suite in a worktree of the base and in the head (this checkout when it is
    the head asked for), alternating (ci/compare/pytest_suite.py)."""
    import shlex
    from contextlib import ExitStack

    from attnwatch.ci.compare.pytest_suite import measure_suite
    from attnwatch.ci.compare.revisions import current_head, worktree

    rounds = args.rounds if args.rounds is not None else int(compare_setting("min_rounds"))
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    log(f"compare --pytest {args.pytest}: {rounds} round(s) per side, base {base_sha[:12]}, head {head_sha[:12]}")
    fresh_out(out, log)
    with ExitStack() as stack:
        base_root = stack.enter_context(worktree(repo, base_sha, "base"))
        head_root = repo if head_sha == current_head(repo) else stack.enter_context(worktree(repo, head_sha, "head"))
        base, head = measure_suite(
            args.pytest, {"base": base_root, "head": head_root}, out, rounds, shlex.split(args.pytest_args), log
        )
    return base, head, {}


def pinned_base(name: str, base: str | None) -> str:
    """The commit a pinned baseline names (history.analysis.baselines), as compare's --base."""
    from attnwatch.history.analysis.baselines import find_baseline

    if base:
        raise UserError("--baseline and --base name the same thing: give one")
    baseline = find_baseline(name)
    if not baseline.commit:
        raise UserError(
            f"baseline {name}: pins run {baseline.run}; compare measures commits, so pin its commit to use it here"
        )
    return baseline.commit


def _measure_checkout(args, out: Path) -> tuple[list[RoundData], list[RoundData], dict, dict]:
    """--base-root: the base's kernels are already checked out (no git needed on this host);
    the head is this checkout. Each side's commit is recorded where git can tell it."""
    from attnwatch.ci.compare.revisions import CompareSide
    from attnwatch.ci.environment import capture_git
    from attnwatch.ci.supervisor import REPO_ROOT, resolve_kernels_checkout

    try:
        base_root = resolve_kernels_checkout(Path(args.base_root))
    except FileNotFoundError as exc:
        raise UserError(f"--base-root: {exc}") from None
    assert base_root is not None  # a path given resolves to a checkout or raises
    base_sha = _known(capture_git(base_root).sha, args.base)
    head_sha = _known(capture_git(REPO_ROOT).sha, None)
    refuse_dirty(args, [side for side, root in (("base", base_root), ("head", REPO_ROOT)) if _dirty(root)])
    sides = (
        CompareSide("base", _commit_or_unknown(base_sha), base_root, args.base),  # commits: for the round bundles
        CompareSide("head", _commit_or_unknown(head_sha), None, args.head),
    )
    base, head, extra = _session(args, out, sides, f"base kernels from {base_root}")
    refs = {
        "base_sha": base_sha,
        "head_sha": head_sha,
        "merge_base_sha": base_sha,
        "base_ref": args.base or str(args.base_root)[-200:],
        "head_ref": args.head,
    }
    return base, head, extra, refs


def _dirty(root: Path) -> bool:
    """The checkout has uncommitted changes to tracked files (ci.environment.capture_git, as a run records it)."""
    from attnwatch.ci.environment import capture_git

    return capture_git(root).dirty


def refuse_dirty(args, sides: list[str]) -> None:
    """With --fail-on regression, a side that measures uncommitted changes is refused (its verdict
    would be the commit's, which did not run) unless --allow-dirty."""
    if sides and args.fail_on == "regression" and not args.allow_dirty:
        raise UserError(
            f"compare --fail-on regression: the {' and '.join(sides)} {'is a checkout' if len(sides) == 1 else 'are checkouts'} "
            "with uncommitted changes, which no commit holds: commit or stash them, or pass --allow-dirty "
            "to judge them anyway"
        )


def _repo_of(rounds: list[RoundData]) -> str:
    """The repository (OWNER/NAME) the rounds name, else this checkout's (ci.environment.repository_identity)."""
    from attnwatch.ci.environment import repository_identity

    return next((r.repo for r in rounds if "/" in r.repo), "") or repository_identity(Path.cwd())


def _known(sha: str | None, fallback: str | None) -> str:
    return (sha if sha and sha != "unknown" else (fallback or "unknown"))[:64]


def _commit_or_unknown(text: str) -> str:
    """A bundle's commit: a git SHA, or "unknown" (--base names a label where git cannot tell)."""
    return text if SHA_PATTERN.match(text) else UNKNOWN_COMMIT


def _session(
    args, out: Path, sides: tuple[CompareSide, CompareSide], what: str
) -> tuple[list[RoundData], list[RoundData], dict]:
    from attnwatch.ci.compare.revisions import roots_of
    from attnwatch.ci.compare.session import run_session
    from attnwatch.ci.compare.setup import device_kind, plan_for, session_options
    from attnwatch.ci.kernels_api import check_measurable
    from attnwatch.cli.settings import case_choice, measure_settings

    for side in sides:  # root None: this checkout, whose harness API is this harness's own
        if side.root is not None:
            check_measurable(side.root, side.role, side.label())
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    fresh_out(out, log)  # only once both sides can be measured: a refusal writes nothing
    cases = plan_for(case_choice(args))
    kind, gpu = device_kind()
    thresholds = load_thresholds(gpu or "cpu", args.thresholds)
    load_case_rules(args.case_rules)  # a broken rules file fails before any GPU time is spent
    options = session_options(measure_settings(args), kind, thresholds)
    head_commit = next(side.commit for side in sides if side.role == "head")
    options.rotation = head_commit  # the A/A canary rotates with the head commit
    planned_cases = cases
    not_built: dict[str, str] = {}  # variant -> why it was not built (identical sources)
    if options.select and options.measure_all is None:  # identical sources: neither built nor measured
        from attnwatch.ci.compare.affected import build_only_affected
        from attnwatch.ci.compare.session import REPO_ROOT

        cases, not_built = build_only_affected(
            cases, {k: v or REPO_ROOT for k, v in roots_of(sides).items()}, head_commit, log
        )
    log(f"compare: {len(cases)} cases x 2 sides, {options.design.describe()}; {what}")
    session = run_session(cases, sides=sides, out_dir=out, options=options, log=log)
    if session.selection is not None:
        session.selection.skipped.update(not_built)
    started = time.monotonic()
    code = _profile(args, session, cases, roots_of(sides), out, thresholds, options, log)
    profiling_s = time.monotonic() - started
    _print_costs(session)
    # The verdicts come from the round bundles as the reader reads them: what compare.json says
    # is exactly what the bundles (and the pull-request runs stored from them) hold; read again
    # after the ncu step, which added its profiles to the round-1 bundles.
    base, head = _read_rounds(session)
    planned = Counter(c.variant for c in planned_cases)
    selection = session.selection and selection_record(
        session.selection, dict(planned), session.sides["base"].fingerprints, session.sides["head"].fingerprints
    )
    return (
        base,
        head,
        {
            "confidence": options.design.per_look_confidence,
            "resamples": options.resamples,
            "design": options.design,
            "notes": session.notes,
            "measured": session.measured,
            "session": session,
            "profiling_s": profiling_s,
            "selection": selection,
            "code_changes": code,
        },
    )


def _widened(session, cases, decided: list[str]) -> list[str]:
    """The decided changes, then the changed variants' other cases (ci/compare/select.py
    profiled_cases); a compare that measured everything profiles its decided changes alone."""
    from attnwatch.ci.compare.select import head_checks, profiled_cases
    from attnwatch.ci.run_config import compare_setting

    selection = session.selection
    changed = []
    if selection is not None and not selection.everything:
        changed = head_checks(selection, session.sides["base"].fingerprints, session.sides["head"].fingerprints)
    variant_of = {c.case_id: c.variant for c in cases}
    return profiled_cases(decided, variant_of, changed, int(compare_setting("ncu_changed_variants_max_cases")))


def _profile(args, session, cases, roots: dict, out: Path, thresholds, options, log) -> dict:
    """--ncu: profile the cases the rounds judged changed (or all, or none) on both sides, and
    read the profiled variants' binaries (ci/compare/binaries.py): variant -> how its code differs."""
    from attnwatch.ci.compare.analysis import EXPLAINED
    from attnwatch.ci.compare.session import add_ncu
    from attnwatch.history.analysis.tiers import tier
    from attnwatch.ci.ncu.profile import find_ncu
    from attnwatch.ci.run_config import compare_setting

    if args.ncu == "off" or not session.bundles.get("base") or not session.bundles.get("head"):
        return {}
    if find_ncu() is None:
        log("compare: ncu not found (not on PATH; set ATTNWATCH_NCU): changed cases are not profiled")
        return {}
    only = None
    base, head = _read_rounds(session)  # the timed rounds: what decides, and each case's binary digest
    if args.ncu == "changed":
        judged = compare_rounds(
            base,
            head,
            thresholds,
            method=args.method,
            resamples=options.resamples,
            confidence=options.design.per_look_confidence,
        )
        decided = [c.case_id for c in judged if tier(c.verdict, c.low, c.high) in EXPLAINED]  # every decided change
        only = _widened(session, cases, decided)
        if not only:
            return {}
    budget = args.ncu_budget if args.ncu_budget is not None else float(compare_setting("ncu_budget_s"))
    started = time.monotonic()
    add_ncu(session, cases, roots, out, log, only=only, budget_s=budget)
    profiled = time.monotonic()
    from attnwatch.ci.compare.binaries import code_changes
    from attnwatch.kernels.nvcc import sm_arch

    # The workers built for the device's own arch (kernels.cuda.launch.target_arch); naming it
    # spares each build child a torch import and a CUDA start.
    capability = session.sides["head"].environment.get("compute_capability")
    arch = sm_arch(capability) if capability else ""
    chosen = [c for c in cases if only is None or c.case_id in only]
    code = code_changes({c.variant for c in chosen}, roots, out / BINARIES_DIR, log, arch=arch)
    code.update(_runtime_code(base, head, [c.case_id for c in chosen], log))
    log(
        f"compare: ncu step: profiles {profiled - started:.1f} s, both sides' binaries read and diffed "
        f"{time.monotonic() - profiled:.1f} s"
    )
    return code


def _read_rounds(session) -> tuple[list, list]:
    """Both sides' round bundles as the reader reads them (ci/compare/rounds.py)."""
    return [read_round(p) for p in session.bundles["base"]], [read_round(p) for p in session.bundles["head"]]


def _runtime_code(base: list, head: list, case_ids: list[str], log) -> dict:
    """case id -> how the binary its kernel compiled at run time differs between the sides'
    rounds (ci/compare/runtime_binaries.py), from the Triton cache folder the workers shared
    (the one ci/child_env.py gave them: $TRITON_CACHE_DIR, else the cache root's)."""
    from attnwatch.ci.compare.binaries import sass_cache_dir
    from attnwatch.ci.compare.runtime_binaries import runtime_code_changes
    from attnwatch.ci.tool_cache_manifest import triton_folder

    return runtime_code_changes(base, head, case_ids, triton_folder(), log, sass_cache_dir())


def by_variant_text(seconds: dict[str, float], cached: set[str]) -> str:
    """Seconds by variant, the largest first, a build served from the cache marked so."""
    most = sorted(seconds.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{variant} {spent:.2f}" + (" (cached)" if variant in cached else "") for variant, spent in most)


def _print_costs(session) -> None:
    """Where the wall time went, per side (the figures behind docs/benchmarks.md's breakdown)."""
    m = session.measured
    for name, side in session.sides.items():
        t = side.times
        print(
            f"compare: {name}: start-up {t.startup_s:.1f} s, builds {t.build_s:.1f} s, correctness {t.correctness_s:.1f} s, "
            f"inputs+warm-up {t.prepare_s:.1f} s (placement {t.placement_s:.1f}, warm-up {t.warmup_s:.1f}), timing {t.timing_s:.1f} s, re-runs {t.probe_s:.1f} s, "
            f"{t.workers_started} worker(s)",
            file=sys.stderr,
        )
        cached = {b.get("variant") for b in side.builds if b.get("cached")}
        for what, split in (("builds", t.build_by_variant), ("warm-up", t.warmup_by_variant)):
            if split:
                marked = cached if what == "builds" else set()
                print(f"compare: {name}: {what} by variant (s): {by_variant_text(split, marked)}", file=sys.stderr)
    used = sorted(m.rounds_used.values())
    spread = f"{used[0]}-{used[-1]}" if used else "-"
    print(
        f"compare: measured in {m.wall_s:.1f} s ({len(m.base)} rounds run, {spread} per case; "
        f"{m.looks_s:.1f} s judging)",
        file=sys.stderr,
    )


def _same_gpu(base: list[RoundData], head: list[RoundData]) -> str:
    """The GPU of every round, keyed as a series is (history.contract.series_key: the model, else the
    device kind), so the comment's links open the main series of the GPU that measured."""
    names = {series_gpu(rd.gpu_name, rd.environment.get("device_kind", "cpu")) for rd in (*base, *head)}
    if len(names) != 1:
        raise UserError(f"compare needs every round on one GPU model; the bundles name {sorted(map(str, names))}")
    return names.pop()


def _run(args) -> int:
    started = time.monotonic()
    check_mode_flags(args)
    resolve_defaults(args)
    if args.rounds is not None and not 1 <= args.rounds <= 50:
        raise UserError(f"--rounds: expected 1..50, got {args.rounds}")
    args.method = args.method or compare_setting("method")
    if args.pytest:
        args.shapes = "pytest"  # the report's case set: the suite's tests
    out = Path(args.out)
    extra: dict = {}
    if args.base_bundles or args.head_bundles:
        if not (args.base_bundles and args.head_bundles):
            raise UserError("--base-bundles and --head-bundles go together")
        base = [read_round(p) for p in args.base_bundles]
        head = [read_round(p) for p in args.head_bundles]
        refs = None
    else:
        base, head, extra, refs = _measure(args, out)
    gpu = _same_gpu(base, head)
    thresholds = load_thresholds(gpu, args.thresholds)
    if refs is None:
        refs = {
            "base_sha": base[0].commit_sha,
            "head_sha": head[0].commit_sha,
            "merge_base_sha": base[0].commit_sha,
            "base_ref": args.base or "",
            "head_ref": args.head if args.base else "",
        }
    env = head[0].environment
    dirty = [side for side, rounds in (("base", base), ("head", head)) if any(r.dirty for r in rounds)]
    refuse_dirty(args, dirty)
    judging = time.monotonic()
    # The same level, resamples and seed as the looks: each case's interval is the one it stopped at.
    cases = compare_rounds(
        base,
        head,
        thresholds,
        method=args.method,
        confidence=extra.get("confidence"),
        resamples=extra.get("resamples", compare_setting("resamples")),
        rules=load_case_rules(args.case_rules),
        code_changes=extra.get("code_changes"),
    )
    notes = noise_warnings(cases, args.method)
    if len(base) != len(head):
        notes.append(f"unequal rounds (base {len(base)}, head {len(head)}): rounds resampled unpaired")
    if gpu == "cpu":
        notes.append("measured on a CPU (host wall-clock): a pipeline check, not a GPU verdict")
    if "design" in extra:
        notes.append(_design_note(extra["design"], extra["measured"], cases, thresholds.min_effect))
    notes += extra.get("notes", [])
    times = {}
    if "session" in extra:
        times = time_breakdown(
            extra["session"],
            wall_s=time.monotonic() - started,
            profiling_s=extra["profiling_s"],
            judging_s=time.monotonic() - judging,
        )
        print(
            f"compare: time: {format_times(times)}; {format_other(other_split(extra['session'], times))}",
            file=sys.stderr,
        )
    report = CompareReport(
        **refs,
        repo=_repo_of([*head, *base]),
        base_dirty="base" in dirty,
        head_dirty="head" in dirty,
        gpu_name=gpu,
        rounds=min(len(base), len(head)),
        method=args.method,
        confidence=thresholds.confidence,
        min_effect=thresholds.min_effect,
        shape_set=args.shapes,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cases=cases,
        environment={
            k: env.get(k)
            for k in (
                "gpu_name",
                "driver_version",
                "cuda_version",
                "torch_version",
                "triton_version",
                "cupy_version",
                "hostname",
            )
            if k in env
        },
        notes=[n[:1900] for n in notes][:50],
        selection=extra.get("selection"),
        times=times,
    )
    path = write_report(report, out / COMPARE_FILE)
    print(format_table(report))
    print(f"compare: wrote {path}")
    if args.fail_on == "regression" and report.should_fail():
        return 1
    return 0


def _design_note(design, measured, cases, min_effect: float) -> str:
    """The sampling design in one line, with the cases that reached the cap undecided."""
    compared = [c for c in cases if c.ratio is not None]
    undecided = [c.case_id for c in compared if c.case_id not in measured.decided]
    text = f"{design.describe()}; {len(compared) - len(undecided)} of {len(compared)} compared cases decided"
    if undecided and len(design.looks) > 1:
        text += (
            f"; {len(undecided)} undecided at the {design.max_rounds}-round cap (neither inside "
            f"±{min_effect:.1%} nor surely beyond it): {', '.join(undecided[:8])}{' ...' if len(undecided) > 8 else ''}"
        )
    return text
