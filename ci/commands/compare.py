"""`attnwatch compare`: same-job A/B of a pull request's merge base against its head.

    attnwatch compare --base origin/main --head HEAD [--shapes pr] [--rounds 3]
                      [--fail-on regression] [--out DIR]

Checks the merge base out as a git worktree, measures both sides' kernels in alternating
rounds on this GPU (ci.compare.measure), and judges each case with a bootstrap interval of
head/base against the GPU's thresholds (config/thresholds.toml). Writes `compare.json`
(schema-versioned; the PR-comment workflow reads it as untrusted data) and every round's
bundle under --out, and prints a table. `--base-bundles/--head-bundles` compare bundles
already recorded instead of measuring. Needs no database.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path

from ci.compare.analysis import compare_rounds
from ci.compare.report import COMPARE_FILE, CompareReport, write_report
from ci.compare.rounds import RoundData, read_round
from ci.compare.table import format_table
from ci.errors import UserError
from history.detection.ab import METHODS
from history.detection.thresholds import load_thresholds


def register(subparsers) -> None:
    p = subparsers.add_parser("compare", help="A/B the merge base against the head on this GPU; write compare.json")
    p.add_argument("--base", help="base revision (the merge base with --head is what gets measured)")
    p.add_argument("--head", default="HEAD", help="head revision (default HEAD)")
    p.add_argument("--shapes", default="pr", help="shape set (default pr)")
    p.add_argument("--variants", help="comma-separated variants (default: every registered variant)")
    p.add_argument("--dtypes", help="comma-separated dtypes (default: the shape set's)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--rounds", type=int, default=5,
                   help="alternating rounds per side (default 5: reaches 80%% power at a 3%% slowdown in docs/benchmarks.md; 3 does not)")
    p.add_argument("--method", choices=METHODS, default="hierarchical", help="bootstrap interval (default hierarchical)")
    p.add_argument("--thresholds", help="thresholds TOML (default config/thresholds.toml)")
    p.add_argument("--fail-on", choices=("regression", "never"), default="never",
                   help="'regression': exit 1 on a regression, a correctness failure or an unmeasured head case")
    p.add_argument("--out", default="compare-out", help="output directory (default ./compare-out)")
    p.add_argument("--ncu", action="store_true", help="also profile with ncu, for deltas in the PR comment")
    p.add_argument("--case-timeout", type=float, default=None, help="seconds of silence before a case is killed")
    p.add_argument("--base-root", type=Path,
                   help="a checkout of the base (holding kernels/) to measure instead of a git worktree of the merge "
                        "base: for hosts without the repository's history")
    p.add_argument("--base-bundles", nargs="+", type=Path, help="compare these recorded base bundles (no measuring)")
    p.add_argument("--head-bundles", nargs="+", type=Path, help="...against these head bundles")
    p.set_defaults(func=_run)


def _measure(args, out: Path) -> tuple[list[Path], list[Path], dict]:
    # The measuring machinery (and its torch/kernels imports) is only needed when measuring.
    from ci.compare.measure import measure_rounds
    from ci.compare.revisions import current_head, merge_base, repo_root, resolve, worktree
    from ci.compare.setup import plan_for, run_options
    from ci.runner import run_suite

    if args.base_root:
        return _measure_checkout(args, out)
    if not args.base:
        raise UserError("--base is required unless --base-bundles/--head-bundles or --base-root are given")
    repo = repo_root(Path.cwd())
    head_sha = resolve(repo, args.head)
    base_sha = resolve(repo, args.base)
    mb = merge_base(repo, base_sha, head_sha)
    cases = plan_for(args)
    options = run_options(args)
    print(f"compare: {len(cases)} cases x {args.rounds} rounds x 2 sides; merge base {mb[:12]}, head {head_sha[:12]}",
          file=sys.stderr)
    # The head is measured from this very checkout when it is the one being asked for; any other
    # head revision (or another repository) gets its own worktree too.
    here = repo == repo_root(Path(__file__).resolve().parent)
    with worktree(repo, mb, "base") as base_root:
        if here and head_sha == current_head(repo):
            measured = measure_rounds(cases, rounds=args.rounds, base_root=base_root, head_root=None, out_dir=out,
                                      options=options, run_suite=run_suite, log=lambda m: print(m, file=sys.stderr))
        else:
            with worktree(repo, head_sha, "head") as head_root:
                measured = measure_rounds(cases, rounds=args.rounds, base_root=base_root, head_root=head_root,
                                          out_dir=out, options=options, run_suite=run_suite,
                                          log=lambda m: print(m, file=sys.stderr))
    refs = {"base_sha": base_sha, "head_sha": head_sha, "merge_base_sha": mb, "base_ref": args.base, "head_ref": args.head}
    return measured.base_bundles, measured.head_bundles, refs


def _measure_checkout(args, out: Path) -> tuple[list[Path], list[Path], dict]:
    """--base-root: the base's kernels are already checked out (no git needed on this host);
    the head is this checkout. The bundles record each side's commit where git can tell it."""
    from ci.compare.measure import measure_rounds
    from ci.compare.setup import plan_for, run_options
    from ci.runner import resolve_kernels_checkout, run_suite

    try:
        base_root = resolve_kernels_checkout(Path(args.base_root))
    except FileNotFoundError as exc:
        raise UserError(f"--base-root: {exc}") from None
    cases = plan_for(args)
    print(f"compare: {len(cases)} cases x {args.rounds} rounds x 2 sides; base kernels from {base_root}", file=sys.stderr)
    measured = measure_rounds(cases, rounds=args.rounds, base_root=base_root, head_root=None, out_dir=out,
                              options=run_options(args), run_suite=run_suite, log=lambda m: print(m, file=sys.stderr))
    base_sha = _recorded_commit(measured.base_bundles, args.base)
    head_sha = _recorded_commit(measured.head_bundles, None)
    refs = {"base_sha": base_sha, "head_sha": head_sha, "merge_base_sha": base_sha,
            "base_ref": args.base or str(args.base_root)[-200:], "head_ref": args.head}
    return measured.base_bundles, measured.head_bundles, refs


def _recorded_commit(bundles: list[Path], fallback: str | None) -> str:
    sha = read_round(bundles[0]).commit_sha if bundles else ""
    return (sha if sha and sha != "unknown" else (fallback or "unknown"))[:64]


def _same_gpu(base: list[RoundData], head: list[RoundData]) -> str:
    names = {rd.gpu_name for rd in (*base, *head)}
    if len(names) != 1:
        raise UserError(f"compare needs every round on one GPU model; the bundles name {sorted(map(str, names))}")
    name = names.pop()
    return name or "cpu"


def _run(args) -> int:
    if args.rounds < 1 or args.rounds > 50:
        raise UserError(f"--rounds: expected 1..50, got {args.rounds}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.base_bundles or args.head_bundles:
        if not (args.base_bundles and args.head_bundles):
            raise UserError("--base-bundles and --head-bundles go together")
        base_paths, head_paths = args.base_bundles, args.head_bundles
        refs = None
    else:
        base_paths, head_paths, refs = _measure(args, out)
    base = [read_round(p) for p in base_paths]
    head = [read_round(p) for p in head_paths]
    gpu = _same_gpu(base, head)
    thresholds = load_thresholds(gpu, args.thresholds)
    if refs is None:
        refs = {"base_sha": base[0].commit_sha, "head_sha": head[0].commit_sha, "merge_base_sha": base[0].commit_sha,
                "base_ref": args.base or "", "head_ref": args.head if args.base else ""}
    env = head[0].environment
    notes = []
    if len(base) != len(head):
        notes.append(f"unequal rounds (base {len(base)}, head {len(head)}): rounds resampled unpaired")
    if gpu == "cpu":
        notes.append("measured on a CPU (host wall-clock): a pipeline check, not a GPU verdict")
    report = CompareReport(
        **refs,
        gpu_name=gpu,
        rounds=min(len(base), len(head)),
        method=args.method,
        confidence=thresholds.confidence,
        min_effect=thresholds.min_effect,
        shape_set=args.shapes,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        cases=compare_rounds(base, head, thresholds, method=args.method),
        environment={k: env.get(k) for k in ("gpu_name", "driver_version", "cuda_version", "torch_version",
                                              "triton_version", "cupy_version", "hostname") if k in env},
        notes=notes,
    )
    path = write_report(report, out / COMPARE_FILE)
    print(format_table(report))
    print(f"compare: wrote {path}")
    if args.fail_on == "regression" and report.should_fail():
        return 1
    return 0
