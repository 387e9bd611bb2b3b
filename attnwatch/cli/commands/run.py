"""`attnwatch run`: build, check and time every case on this machine and write a run bundle.

    attnwatch run --shapes pr|main|nightly|cpu|auto|<shape,ids> [--variants a,b] [--dtypes fp16,bf16]
                  [--causal both|yes|no] [--out DIR] [--ingest] [--ncu] [--ncu-full]
                  [--case-timeout S] [--no-correctness] [--diagnose]
                  [--variant-module SPEC ...] [--variant-path DIR ...]

`auto` is `pr` on a GPU machine and `cpu` elsewhere. The measuring happens in supervised child
processes (ci/supervisor.py), so a crashing or hanging kernel costs only its cases. Exit status:
0 when every case finished (measured, skipped or unsupported), 1 when cases were lost (the
bundle is still written, status `partial`), 2 for a usage error.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.ci.variant_modules import add_arguments as add_variant_arguments


DIAGNOSE_NOTE = "diagnostic run: CUDA_LAUNCH_BLOCKING=1, timings not comparable"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run",
        help="build, check and time the kernels; write a run bundle",
        description="Build, check and time every case (variant x shape x dtype x causality) on this machine, each in a "
        "supervised child process, and write a run bundle. `--shapes auto` is `pr` on a GPU and `cpu` elsewhere. "
        "Exit 1 when cases were lost (the bundle is still written, status partial).",
    )
    p.add_argument(
        "--shapes", default="auto", help="shape set (pr, main, nightly, cpu, auto) or comma-separated shape ids"
    )
    p.add_argument("--variants", default=None, help="comma-separated variant names (default: all registered)")
    p.add_argument("--dtypes", default=None, help="comma-separated dtypes (default: per shape set, ci/run_config.toml)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--out", default=None, help="bundle directory (default: out/runs/<UTC time>)")
    p.add_argument("--ingest", action="store_true", help="ingest the bundle into the history (--db) afterwards")
    p.add_argument("--ncu", action="store_true", help="also profile the measured cases with Nsight Compute")
    p.add_argument("--ncu-full", action="store_true", help="with --ncu: the full section set (slow)")
    p.add_argument(
        "--ncu-cases",
        default="",
        help="with --ncu: comma-separated fnmatch patterns of case ids to profile, e.g. '*/fp16/noncausal' (default: every case timed)",
    )
    p.add_argument(
        "--case-timeout",
        type=float,
        default=None,
        help="seconds without progress before a case counts as hung (default: ci/run_config.toml, by device)",
    )
    p.add_argument("--no-correctness", action="store_true", help="skip the correctness checks")
    p.add_argument(
        "--trigger",
        default=None,
        help="push, pull_request, schedule, workflow_dispatch or local (default: from GITHUB_EVENT_NAME)",
    )
    p.add_argument(
        "--time-cap", type=float, default=None, help="per-case timing cap in seconds (default: ci/run_config.toml)"
    )
    p.add_argument("--max-samples", type=int, default=None, help="per-case sample cap (default: ci/run_config.toml)")
    p.add_argument(
        "--target-spread",
        type=float,
        default=None,
        help="stop when IQR/median is below this (default: ci/run_config.toml)",
    )
    p.add_argument(
        "--recipe",
        default=None,
        help="timing recipe: plain, or a [timing.recipes] entry of ci/run_config.toml (clock record, pacing, "
        "clock band; default: per shape set, [defaults.recipe])",
    )
    p.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="where to measure (default: a GPU when present)",
    )
    p.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="stop after this long: unfinished cases are recorded as not run (status partial)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--notes", default="", help="free text stored in the manifest")
    p.add_argument(
        "--diagnose",
        action="store_true",
        help="run the children with CUDA_LAUNCH_BLOCKING=1, so a faulting kernel is named by its own launch; "
        "timings are then not comparable (noted in the bundle; not with --ingest)",
    )
    p.add_argument(
        "--commit",
        default=None,
        help="commit SHA measured, for a checkout without .git (default: git, else $GITHUB_SHA)",
    )
    p.add_argument(
        "--retune-triton",
        action="store_true",
        help="tune again every Triton problem the recorded table lacks and replace its entry in the shared "
        "choice cache (kernels/triton/choice_cache.py; the results say 'tuned': a configuration change)",
    )
    add_variant_arguments(p)
    p.set_defaults(func=_run)


def default_trigger() -> str:
    from attnwatch.history.contract.bundle import TRIGGERS

    event = os.environ.get("GITHUB_EVENT_NAME", "local")
    return event if event in TRIGGERS else "local"


def check_commit(explicit: str | None, ingest: bool) -> str | None:
    """The commit to record; refuse early when the history would refuse the bundle anyway."""
    from attnwatch.ci.environment import capture_git
    from attnwatch.ci.supervisor import REPO_ROOT

    if explicit is not None:
        if not re.fullmatch(r"[0-9a-f]{7,64}", explicit):
            raise UserError(f"--commit: {explicit!r} is not a lowercase hex git SHA")
        return explicit
    if capture_git(REPO_ROOT).sha == "unknown":
        message = "this checkout has no git history and no --commit was given: the bundle will say commit 'unknown'"
        if ingest:
            raise UserError(message + ", which the history refuses; pass --commit SHA")
        print(f"attnwatch run: warning: {message}", file=sys.stderr)
    return None


def _run(args) -> int:
    from attnwatch.ci.run_config import default_recipe, timing_config, with_recipe
    from attnwatch.ci.supervisor import RunOptions, execute_suite
    from attnwatch.ci.selection import detect_device_kind, select_cases
    from attnwatch.ci.summary import format_ncu_line, format_summary
    from attnwatch.ci.variant_modules import load_requested
    from attnwatch.cli.settings import variant_sources

    if args.diagnose and args.ingest:
        raise UserError("--diagnose: timings with CUDA_LAUNCH_BLOCKING=1 are not for the history; drop --ingest")
    commit = check_commit(args.commit, args.ingest)
    if args.retune_triton:  # read by the measuring children (kernels/triton/choice_cache.py)
        os.environ["ATTNWATCH_TRITON_RETUNE"] = "1"
    device_kind = detect_device_kind() if args.device == "auto" else args.device
    variant_specs = load_requested(variant_sources(args))
    selection = select_cases(args.shapes, args.variants, args.dtypes, args.causal, device_kind)
    cases = selection.cases
    try:
        base = with_recipe(
            timing_config(device_kind),
            args.recipe or (default_recipe(selection.set_name) if device_kind == "cuda" else "plain"),
        )
    except ValueError as exc:
        raise UserError(f"--recipe: {exc}") from None
    timing = base.with_overrides(
        time_cap_s=args.time_cap, max_samples=args.max_samples, target_rel_spread=args.target_spread
    )
    if timing.max_samples < timing.min_samples:
        timing = timing.with_overrides(min_samples=timing.max_samples)
    out = Path(args.out) if args.out else Path("out") / "runs" / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    options = RunOptions(
        shape_set=selection.set_name,
        device_kind=device_kind,
        timing=timing,
        correctness=not args.no_correctness,
        case_timeout_s=args.case_timeout or None,  # None: the device kind's, ci/run_config.toml
        trigger=args.trigger or default_trigger(),
        ncu=args.ncu or args.ncu_full,
        ncu_full=args.ncu_full,
        ncu_cases=[p for p in args.ncu_cases.split(",") if p],
        progress=not args.no_progress,
        plain_progress=not sys.stderr.isatty(),  # CI logs get one line per case, not bar redraws
        notes="; ".join(filter(None, [args.notes, DIAGNOSE_NOTE if args.diagnose else ""])),
        diagnose=args.diagnose,
        deadline=time.monotonic() + 60.0 * args.max_minutes if args.max_minutes else None,
        commit_sha=commit,
        extra_variant_modules=variant_specs,
        extra_sys_path=[str(Path(p).resolve()) for p in args.variant_path or []],
    )
    # Each variant runs on its own operator's shapes and modes (ci.plan.plan_cases): counted per operator.
    per_operator = ", ".join(f"{op} {n}" for op, n in Counter(c.operator for c in cases).items())
    print(
        f"attnwatch run: {len(cases)} cases ({per_operator or 'none'}; {len(selection.variants)} variants,"
        f" {len(selection.shapes)} shapes, {len(selection.dtypes)} dtypes, {len(selection.causal)} attention modes)"
        f" on {device_kind}",
        file=sys.stderr,
    )
    result = execute_suite(cases, kernels_root=None, out_dir=out, options=options)
    print(format_summary(result.state, timing_mode="cuda_events" if device_kind == "cuda" else "cpu_wall"))
    if result.ncu is not None:
        print(format_ncu_line(result.ncu))
    print(f"bundle: {result.bundle} (status {result.status})")
    if result.work_dir is not None:
        print(f"child logs and journals: {result.work_dir}", file=sys.stderr)
    if args.ingest:
        from attnwatch.history.ingest.write import ingest_paths
        from attnwatch.history.contract.repository import repo_setting

        ingest_paths(args.db, [result.bundle], repo=repo_setting(args.repo))
        print(f"ingested into {args.db}")
    return 0 if result.status == "complete" else 1
