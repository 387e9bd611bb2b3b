"""Before/after check of the measuring engine: a `main` run and a warm pr-set compare, one call.

Made for a change to the engine (ci/engine): run it once on the tree before the change and
once on the tree after, on the same kind of GPU, then put the two results side by side with
`--against`. Steps, in order:

1. `main`: `scripts/gpu_check.py --shapes main --repeats 1` (exactly `attnwatch run`: builds,
   correctness, every case timed); per case its median, IQR/median and calls;
2. `compare`: an A/A `attnwatch compare` of the pr set against a copy of this tree's kernels
   (`scripts/gpu_compare.py`'s `run_compare`), on the compile caches the `main` run just filled
   (one cache for both steps), so it is the warm PR check; per case the two sides' medians
   (mean of round medians), the spread of the round medians, the ratio, its interval, rounds.

Writes under --out (default $OUT): engine_check.json (every figure), main/ (gpu_check's files,
the bundle in bundles.tar.gz), warm/ (compare.json, session.json, the round bundles, logs);
prints one row per pr-set case and a summary. The script needs only what both trees have
(gpu_check.py, gpu_compare.py, the bundle and compare.json formats), so it can be copied into
the older tree and run there unchanged:

    PYTHONPATH=. python3 scripts/engine_check.py --budget-s 570 --commit <sha> --out $OUT
    (or in two calls: --steps main, then --steps compare, both with --cache-dir /tmp/ec-cache)
    python3 scripts/engine_check.py --against OLD/engine_check.json NEW/engine_check.json
    (a tree measured in two calls: OLD_MAIN/engine_check.json+OLD_COMPARE/engine_check.json)

Run-to-run noise to read the side-by-side against (docs/benchmarks.md, H200): two `main` runs
of one commit agreed to 0.17% in median over 204 cases (90th percentile 0.86%, worst 2.8% at
20 µs); A/A compare ratios lay within about ±1%.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

SMALL_US = 50.0  # the graph-replay threshold: below it a case is launch-bound and noisier


def log(text: str) -> None:
    print(text, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="main,compare", help="comma-separated subset of main, compare")
    p.add_argument("--budget-s", type=float, default=570.0, help="wall-clock budget of the whole call")
    p.add_argument("--main-budget-s", type=float, default=380.0, help="budget of the main run (gpu_check --budget-s)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--variants",
        default=None,
        help="comma-separated variants for both steps (default: all; the same list on both trees)",
    )
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/engine_check)")
    p.add_argument("--commit", default=None, help="commit measured, for a copy without .git")
    p.add_argument(
        "--cache-dir",
        default=None,
        help="compile caches of both steps (default: a new temporary folder); name one to split the "
        "steps over two calls on one machine and keep the compare warm",
    )
    p.add_argument(
        "--against",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="print two engine_check.json side by side; measures nothing",
    )
    return p.parse_args(argv)


# -- the two steps ------------------------------------------------------------------------------


def main_step(args, out: Path, env: dict, kind: str, timeout_s: float) -> dict:
    """gpu_check.py's one run of the main set; per case what its bundle recorded."""
    folder = out / "main"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "gpu_check.py"),
        "--shapes",
        "main" if kind == "cuda" else "cpu",
        "--repeats",
        "1",
        "--budget-s",
        str(args.main_budget_s),
        "--device",
        kind,
        "--out",
        str(folder),
    ]
    if args.variants:
        cmd += ["--variants", args.variants]
    if args.commit:
        cmd += ["--commit", args.commit]
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, text = 124, f"{exc.stdout or ''}{exc.stderr or ''}\n(killed after {timeout_s:.0f} s)"
    (folder / "gpu_check.log").write_text(text if isinstance(text, str) else text.decode(errors="replace"))
    result = {"rc": rc, "wall_s": round(time.monotonic() - started, 1), "cases": {}}
    try:
        with tarfile.open(folder / "bundles.tar.gz") as tar:
            outcomes = json.load(tar.extractfile("run0/outcomes.json"))["cases"]
            timings = _bundle_timings(tar)
    except (OSError, KeyError, tarfile.TarError, ValueError) as exc:
        result["error"] = f"no bundle: {exc}"
        return result
    statuses: dict[str, int] = {}
    for o in outcomes:
        statuses[o["status"]] = statuses.get(o["status"], 0) + 1
    result["statuses"] = statuses
    for t in timings:
        result["cases"][t["case_id"]] = {
            k: t.get(k)
            for k in (
                "median_us",
                "rel_spread",
                "n",
                "p10_us",
                "p90_us",
                "graph_median_us",
                "gap_to_baseline",
                "interleave_group",
                "converged",
                "guard_retimed_blocks",
            )
        }
    return result


def _bundle_timings(tar: tarfile.TarFile) -> list[dict]:
    """Each timed case's CaseTiming: timings.json (bundle format 2) or, in a bundle of format 1
    (the tree before), pytest-benchmark's `extra_info["attnwatch"]`."""
    try:
        return json.load(tar.extractfile("run0/timings.json"))["timings"]
    except KeyError:
        bench = json.load(tar.extractfile("run0/benchmark.json"))
        return [e["extra_info"]["attnwatch"] for e in bench["benchmarks"]]


def _tree_module(name: str):
    """This tree's `attnwatch.<name>`, or `<name>` in a tree from before the one installed name
    (the script is copied into the older tree to measure it); only one of the two is loaded."""
    import importlib

    try:
        return importlib.import_module(f"attnwatch.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != "attnwatch":
            raise
        return importlib.import_module(name)


def _gpu_compare():
    """scripts/gpu_compare.py of this tree, loaded by path (the tree before has no `attnwatch`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_compare", REPO_ROOT / "scripts" / "gpu_compare.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def compare_step(args, out: Path, env: dict, kind: str, work: Path, timeout_s: float) -> dict:
    """gpu_compare.py's A/A compare of the pr set, warm; per case the sides' figures."""
    run_compare = _gpu_compare().run_compare

    base_root = work / "base"
    shutil.copytree(REPO_ROOT / "kernels", base_root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    options = SimpleNamespace(shapes="pr" if kind == "cuda" else "cpu", rounds=None, min_rounds=None)
    result = run_compare("warm", options, out, base_root, env, args.variants, [], timeout_s)
    result.pop("ratios", None)  # per case below, with the sides
    try:
        report = json.loads((out / "warm" / "compare.json").read_text())
    except (OSError, ValueError):
        return result
    result["cases"] = {}
    for c in report["cases"]:
        row = {"verdict": c["verdict"], "ratio": c.get("ratio"), "low": c.get("low"), "high": c.get("high")}
        for side in ("base", "head"):
            s = c.get(side) or {}
            medians = s.get("round_medians_us") or []
            row[f"{side}_median_us"] = s.get("median_us")
            row[f"{side}_rounds"] = len(medians)
            row[f"{side}_round_spread"] = (max(medians) / min(medians) - 1.0) if medians else None
        result["cases"][c["case_id"]] = row
    return result


# -- printing -----------------------------------------------------------------------------------


def fmt(value, spec: str, width: int) -> str:
    return (
        f"{value:{width}{spec}}"
        if isinstance(value, (int, float)) and not isinstance(value, bool)
        else f"{'-':>{width}}"
    )


def print_one(report: dict) -> None:
    main, comp = report.get("main") or {}, report.get("compare") or {}
    mcases, ccases = main.get("cases") or {}, comp.get("cases") or {}
    log("")
    log(
        f"{'case':<40} {'main us':>9} {'IQR/med%':>8} {'n':>5} {'graph us':>8} | {'base us':>9} {'head us':>9} "
        f"{'ratio':>6} {'low':>6} {'high':>6} {'rnds':>4} {'spread%':>7}"
    )
    for cid in sorted(ccases or mcases):
        m, c = mcases.get(cid, {}), ccases.get(cid, {})
        if m.get("median_us") is None and c.get("ratio") is None:
            continue  # skipped or unsupported on this machine (counted in the summary)
        spread = max(
            (v for v in (c.get("base_round_spread"), c.get("head_round_spread")) if v is not None), default=None
        )
        log(
            f"{cid[:40]:<40} {fmt(m.get('median_us'), '.2f', 9)} {fmt(100 * m['rel_spread'] if m.get('rel_spread') is not None else None, '.2f', 8)} "
            f"{fmt(m.get('n'), 'd', 5)} {fmt(m.get('graph_median_us'), '.2f', 8)} | {fmt(c.get('base_median_us'), '.2f', 9)} "
            f"{fmt(c.get('head_median_us'), '.2f', 9)} {fmt(c.get('ratio'), '.4f', 6)} {fmt(c.get('low'), '.4f', 6)} "
            f"{fmt(c.get('high'), '.4f', 6)} {fmt(c.get('base_rounds'), 'd', 4)} {fmt(100 * spread if spread is not None else None, '.2f', 7)}"
        )
    if main:
        spreads = [v["rel_spread"] for v in mcases.values() if v.get("rel_spread") is not None]
        log(
            f"main: rc {main.get('rc')}, {main.get('wall_s')} s, {main.get('statuses')}, {len(mcases)} cases timed, "
            f"IQR/median median {100 * statistics.median(spreads):.2f}%"
            if spreads
            else f"main: {main}"
        )
    if comp:
        ratios = [c["ratio"] for c in ccases.values() if c.get("ratio") is not None]
        log(
            f"compare (warm, A/A): rc {comp.get('rc')}, {comp.get('wall_s')} s, verdicts {comp.get('verdicts')}, "
            f"rounds/case {comp.get('rounds_per_case')} (mean {comp.get('mean_rounds')}), "
            + (f"ratios {min(ratios):.4f}-{max(ratios):.4f}" if ratios else f"no ratios: {comp.get('error', '')[:300]}")
        )
        for side, parts in (comp.get("breakdown_s") or {}).items():
            log(f"  {side}: " + ", ".join(f"{k[:-2]} {v}" for k, v in parts.items()))


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def print_against(before: dict, after: dict) -> None:
    """Per pr-set case the two trees' figures, then how far the main medians moved overall."""
    bm, am = (before.get("main") or {}).get("cases") or {}, (after.get("main") or {}).get("cases") or {}
    bc, ac = (before.get("compare") or {}).get("cases") or {}, (after.get("compare") or {}).get("cases") or {}
    log(
        f"before {before.get('commit', '?')[:10]} on {before.get('gpu_name')}, after {after.get('commit', '?')[:10]} on {after.get('gpu_name')}"
    )
    log(
        f"{'case':<40} {'main before':>11} {'after':>9} {'after/bef':>9} | {'A/A ratio bef':>13} {'after':>7} {'verdicts':>21}"
    )
    for cid in sorted(set(bc) | set(ac)):
        b, a = bm.get(cid, {}), am.get(cid, {})
        if not (
            b.get("median_us") or a.get("median_us") or bc.get(cid, {}).get("ratio") or ac.get(cid, {}).get("ratio")
        ):
            continue
        moved = a["median_us"] / b["median_us"] if b.get("median_us") and a.get("median_us") else None
        verdicts = f"{bc.get(cid, {}).get('verdict', '-')}/{ac.get(cid, {}).get('verdict', '-')}"
        log(
            f"{cid[:40]:<40} {fmt(b.get('median_us'), '.2f', 11)} {fmt(a.get('median_us'), '.2f', 9)} {fmt(moved, '.4f', 9)} | "
            f"{fmt(bc.get(cid, {}).get('ratio'), '.4f', 13)} {fmt(ac.get(cid, {}).get('ratio'), '.4f', 7)} {verdicts:>21}"
        )
    for label, keep in (
        ("all", lambda us: True),
        (f"< {SMALL_US:g} us", lambda us: us < SMALL_US),
        (f">= {SMALL_US:g} us", lambda us: us >= SMALL_US),
    ):
        moves = [
            abs(am[c]["median_us"] / bm[c]["median_us"] - 1.0)
            for c in set(bm) & set(am)
            if bm[c].get("median_us") and am[c].get("median_us") and keep(bm[c]["median_us"])
        ]
        if moves:
            log(
                f"main medians, {label}: {len(moves)} cases, |after/before - 1| median {100 * statistics.median(moves):.2f}%, "
                f"p90 {100 * quantile(moves, 0.9):.2f}%, max {100 * max(moves):.2f}%, beyond 2%: {sum(m > 0.02 for m in moves)}"
            )
    for name, report in (("before", before), ("after", after)):
        main, comp = report.get("main") or {}, report.get("compare") or {}
        ratios = [c["ratio"] for c in (comp.get("cases") or {}).values() if c.get("ratio") is not None]
        log(
            f"{name}: main {main.get('wall_s')} s {main.get('statuses')}; compare {comp.get('wall_s')} s {comp.get('verdicts')}"
            + (f", A/A ratios {min(ratios):.4f}-{max(ratios):.4f}" if ratios else "")
        )


def load_merged(spec: str) -> dict:
    """One tree's result: an engine_check.json, or several joined by '+' (a call per step)."""
    merged: dict = {}
    for part in spec.split("+"):
        report = json.loads(Path(part).read_text())
        merged.update(
            {k: v for k, v in report.items() if v is not None and (k not in merged or k in ("main", "compare"))}
        )
    return merged


# -- the call -----------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.against:
        before, after = (load_merged(spec) for spec in args.against)
        print_against(before, after)
        return 0
    environment, selection = _tree_module("ci.environment"), _tree_module("ci.selection")
    capture_environment, capture_git = environment.capture_environment, environment.capture_git
    detect_device_kind = selection.detect_device_kind

    end = time.monotonic() + args.budget_s
    kind = detect_device_kind() if args.device == "auto" else args.device
    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "engine_check")
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in args.steps.split(",") if s]
    work = Path(tempfile.mkdtemp(prefix="engine-check-"))
    # one cache for both steps: the compare runs on what the main run compiled
    caches = Path(args.cache_dir) if args.cache_dir else work / "caches"
    env = dict(
        os.environ,
        ATTNWATCH_CACHE=str(caches / "attnwatch"),
        TRITON_CACHE_DIR=str(caches / "triton"),
        CUPY_CACHE_DIR=str(caches / "cupy"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    report = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device_kind": kind,
        "commit": args.commit or capture_git(REPO_ROOT).sha,
        "gpu_name": capture_environment(probe_device=False).gpu_name,
    }
    path = out / "engine_check.json"
    if "main" in steps:
        log("main: starting")
        report["main"] = main_step(
            args, out, env, kind, timeout_s=max(60.0, min(args.main_budget_s + 60.0, end - time.monotonic() - 60.0))
        )
        path.write_text(json.dumps(report, indent=1, default=str))
        log(f"main: rc {report['main']['rc']}, {report['main']['wall_s']} s, {report['main'].get('statuses')}")
    if "compare" in steps:
        left = end - time.monotonic()
        log(f"compare: starting (up to {left:.0f} s)")
        report["compare"] = compare_step(args, out, env, kind, work, timeout_s=max(30.0, left))
        path.write_text(json.dumps(report, indent=1, default=str))
    print_one(report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
