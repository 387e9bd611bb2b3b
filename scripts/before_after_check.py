"""A tree before a restructure and this checkout, measured alike and compared directly, in one
GPU call: for a change meant to leave every kernel as it was (issue 40's package layout).

The same kernels are run from a git worktree of --before and from this checkout, then compared
through `attnwatch compare --base-root`. A case's medians from the two trees must agree within
the fresh-process spread (docs/benchmarks/kernels.md, "Fresh-process spread": within 1%), and a
compare of the two trees must flag nothing. (`engine_check.py` runs in each tree on its own and
sets the results side by side; this one needs no copy of itself in the older tree.)

Steps, each a real subprocess, started only when what is left of --budget-s covers NEED:

    run_before    `attnwatch run` in a git worktree of --before (default 811018f, the last commit
                  of the old layout), with that tree first on PYTHONPATH
    run_after     the same `attnwatch run` in this checkout
    compare_cold  `attnwatch compare --base-root <that worktree> --all` (head: this checkout)
    compare_warm  the same compare again, its caches now filled

Each step's caches live in one folder under a scratch directory, so the first run and the
cold compare start empty. Writes before_after_check.json (per case: both medians and their
spread; each compare's verdict counts and wall) under --out and prints a table last.

    PYTHONPATH=. python3 scripts/before_after_check.py --budget-s 300 --commit <sha> --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_compare import Budget, run_logged  # noqa: E402
from run_spread import run_medians, spread_rows  # noqa: E402
from verdict_check import step_env  # noqa: E402

STEPS = ("run_before", "run_after", "compare_cold", "compare_warm")
NEED = {"run_before": 40.0, "run_after": 40.0, "compare_cold": 90.0, "compare_warm": 60.0}
SPREAD_LIMIT = 0.01  # the fresh-process spread measured on the H200


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", default="811018f", help="the old layout's commit (default 811018f)")
    p.add_argument("--variants", default="sdpa,triton_fa2,cuda_wmma,cuda_wmma_cpasync,torch_3op")
    p.add_argument("--shapes", default="pr")
    p.add_argument("--dtypes", default="fp16")
    p.add_argument("--causal", default="both")
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}")
    p.add_argument("--budget-s", type=float, default=300.0, help="wall-clock budget of the whole call")
    p.add_argument("--out", default=os.environ.get("OUT") or "out/before_after_check")
    p.add_argument("--commit", default=None, help="commit measured, recorded in before_after_check.json")
    return p.parse_args(argv)


def worktree(at: str, where: Path) -> Path:
    """A detached git worktree of `at` (removed with the scratch folder; `git worktree prune`)."""
    done = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", "--quiet", str(where), at],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"before_after_check: git worktree add {at}: {done.stderr.strip()[:300]}")
    return where


def selection(args) -> list[str]:
    return ["--shapes", args.shapes, "--variants", args.variants, "--dtypes", args.dtypes, "--causal", args.causal]


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget_s)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in STEPS if s in args.steps.split(",")]
    report: dict = {"commit": args.commit, "before": args.before, "variants": args.variants, "steps": {}}
    scratch = Path(tempfile.mkdtemp(prefix="before-after-"))
    before = worktree(args.before, scratch / "before")
    cache = scratch / "cache"
    try:
        for step in steps:
            if budget.left() < NEED[step]:
                report["steps"][step] = {"skipped": f"{budget.left():.0f} s left, needs {NEED[step]:.0f}"}
                continue
            if step.startswith("run_"):
                root = before if step == "run_before" else REPO_ROOT
                bundle = out / step
                cmd = [sys.executable, "-m", "attnwatch", "run", *selection(args), "--no-correctness"]
                cmd += ["--out", str(bundle), "--no-progress"]
            else:
                root, bundle = REPO_ROOT, out / step
                cmd = [sys.executable, "-m", "attnwatch", "compare", "--base-root", str(before), "--all"]
                cmd += [*selection(args), "--allow-dirty", "--out", str(bundle)]
            bundle.mkdir(parents=True, exist_ok=True)
            rc, wall = run_logged(
                cmd, step_env(cache, cache / "cuda-jit", code=root), budget.left(), bundle / "step.log", cwd=root
            )
            result: dict = {"rc": rc, "wall_s": round(wall, 1)}
            if step.startswith("compare_") and (bundle / "compare.json").is_file():
                cases = json.loads((bundle / "compare.json").read_text())["cases"]
                counts: dict[str, int] = {}
                for case in cases:
                    counts[case["verdict"]] = counts.get(case["verdict"], 0) + 1
                result["verdicts"] = counts
                result["flagged"] = {
                    c["case_id"]: [c["verdict"], c["ratio"]]
                    for c in cases
                    if c["verdict"] in ("regression", "improvement")
                }
            report["steps"][step] = result
        bundles = [out / "run_before", out / "run_after"]
        if all((b / "timings.json").is_file() for b in bundles):
            report["cases"] = spread_rows([run_medians(b) for b in bundles])
    finally:
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(before)], capture_output=True)
        (out / "before_after_check.json").write_text(json.dumps(report, indent=1))
    return print_table(report)


def print_table(report: dict) -> int:
    bad = 0
    for row in report.get("cases", []):
        spread = row["spread"]
        mark = "" if spread is not None and spread <= SPREAD_LIMIT else "  <- over 1% or missing"
        bad += bool(mark)
        cells = " ".join(f"{m:9.2f}" if m is not None else f"{'-':>9s}" for m in row["medians_us"])
        shown = f"{spread * 100:6.2f}%" if spread is not None else "   -  "
        print(f"{row['case']:48s} {cells} {shown}{mark}")
    print(f"{'step':14s} {'rc':>4s} {'wall s':>7s}  verdicts")
    for step, result in report["steps"].items():
        if "skipped" in result:
            print(f"{step:14s} skipped: {result['skipped']}")
            continue
        flagged = result.get("flagged") or {}
        bad += bool(flagged) + (result["rc"] not in (0,))
        print(f"{step:14s} {result['rc']:4d} {result['wall_s']:7.1f}  {result.get('verdicts', '-')}")
    spreads = [r["spread"] for r in report.get("cases", []) if r["spread"] is not None]
    if spreads:
        print(f"{len(spreads)} cases before/after; largest spread {max(spreads) * 100:.2f}%")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
