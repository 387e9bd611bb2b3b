"""The PR check on the GPU in one call: compare cold and warm, a planted 3% slowdown, and the
crash diagnostics of issue 11.

Steps, in order (each skipped, and said so, when the rest of `--budget-s` cannot hold it):

1. `cold`: `attnwatch compare` (as `python -m attnwatch compare`, which needs no duckdb) of this
   checkout against a copy of its own kernels (an A/A, so the verdicts must all be 'no change'),
   every variant on the pr set, with empty compile caches (nvcc, Triton, CuPy): the PR check's
   cold wall time, with the breakdown the compare writes (start-up, builds, correctness,
   inputs and warm-up, timing, per side; the rest is overhead);
2. `warm`: the same compare again on the now filled caches: the warm wall time (target: at most
   3 minutes) and an unchanged revision passing;
3. `planted`: `sdpa` and `t_planted` (tests/fault_variants/attnwatch_planted.py: sdpa plus a
   calibrated extra spin of ATTNWATCH_PLANTED_SLOWDOWN, default 3%, of its own median, in the head
   worker only) on the pr set: every t_planted case should be a regression, no sdpa case;
4. `sanitizer`: compute-sanitizer memcheck over one `main` group (l4_mission, fp16, non-causal,
   every variant, correctness, timing and the CUDA-graph stage) with PyTorch's caching allocator
   off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), so that an out-of-bounds access into a neighbouring
   tensor is an error instead of a silent write inside one cached segment;
5. `diagnose`: the same group twice with CUDA_LAUNCH_BLOCKING=1 (`RunOptions.diagnose`): a
   faulting kernel is then named by its own launch.

Writes under --out (default $OUT): gpu_compare.json (every figure), one folder per step
(compare.json, session.json, the round bundles and worker logs; sanitizer logs), and
prints a short table last. On a machine without a GPU the same steps run on the CPU (shape set
`cpu`; no sanitizer), which checks the script itself.

    PYTHONPATH=. python3 scripts/gpu_compare.py --budget-s 560 --commit <sha> --out $OUT

A step is started only when the budget left, less what the later steps need at least, covers its
own minimum; it is stopped at its maximum (NEED and MOST below). What is skipped is named in the
table, so a second call with `--steps` can run it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from attnwatch.ci.selection import detect_device_kind  # noqa: E402

FAULTS = REPO_ROOT / "tests" / "fault_variants"
STEPS = ("cold", "warm", "planted", "sanitizer", "diagnose")
NEED = {"cold": 150.0, "warm": 120.0, "planted": 45.0, "sanitizer": 90.0, "diagnose": 45.0}
MOST = {"cold": 270.0, "warm": 200.0, "planted": 90.0, "sanitizer": 240.0, "diagnose": 90.0}
MAIN_GROUP = "l4_mission"


def log(text: str) -> None:
    print(text, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated subset of {', '.join(STEPS)}")
    p.add_argument("--shapes", default=None, help="shape set of the compares (default: pr on a GPU, cpu on a CPU)")
    p.add_argument("--variants", default=None, help="variants of the cold/warm compares (default: all)")
    p.add_argument("--slowdown", type=float, default=0.03, help="planted slowdown (default 0.03)")
    p.add_argument(
        "--planted-repeats",
        type=int,
        default=1,
        help="run the planted step this many times (planted, planted_2, ...): each a fresh pair of workers",
    )
    p.add_argument("--rounds", type=int, default=None, help="compare --rounds (default: ci/run_config.toml)")
    p.add_argument("--min-rounds", type=int, default=None, help="compare --min-rounds (default: ci/run_config.toml)")
    p.add_argument("--budget-s", type=float, default=560.0, help="wall-clock budget of the whole call")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/gpu_compare)")
    p.add_argument(
        "--commit", default=None, help="commit measured, for a copy without .git (recorded in gpu_compare.json)"
    )
    p.add_argument("--run-group", metavar="BUNDLE_DIR", help=argparse.SUPPRESS)  # child mode of steps 4 and 5
    p.add_argument("--group-diagnose", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--group-deadline-s", type=float, default=120.0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


class Budget:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# -- compares -----------------------------------------------------------------------------------


def run_logged(cmd: list[str], env: dict, timeout_s: float, log_path: Path, cwd: Path = REPO_ROOT) -> tuple[int, float]:
    """Run a step's subprocess in `cwd` (the repository root), its stdout and stderr written to
    `log_path`; (exit status, wall seconds). Killed at `timeout_s`, it reads 124, as timeout(1) does."""
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        parts = [p.decode(errors="replace") if isinstance(p, bytes) else (p or "") for p in (exc.stdout, exc.stderr)]
        rc, text = 124, "".join(parts) + f"\n(killed after {timeout_s:.0f} s)"
    log_path.write_text(text)
    return rc, time.monotonic() - started


def run_compare(
    name: str, args, out: Path, base_root: Path, env: dict, variants: str | None, extra: list[str], timeout_s: float
) -> dict:
    """One `python -m attnwatch compare` in a subprocess; its results read back from what it wrote."""
    folder = out / name
    cmd = [
        sys.executable,
        "-m",
        "attnwatch",
        "compare",
        "--base-root",
        str(base_root),
        "--base",
        "copy-of-this-tree",
        "--shapes",
        args.shapes,
        "--out",
        str(folder),
        "--fail-on",
        "regression",
        *extra,
    ]
    if variants:
        cmd += ["--variants", variants]
    for flag, value in (("--rounds", args.rounds), ("--min-rounds", args.min_rounds)):
        if value is not None:
            cmd += [flag, str(value)]
    folder.mkdir(parents=True, exist_ok=True)
    rc, wall = run_logged(cmd, env, timeout_s, folder / "compare.log")
    result = {"step": name, "rc": rc, "wall_s": round(wall, 1)}
    try:
        report = json.loads((folder / "compare.json").read_text())
        session = json.loads((folder / "session.json").read_text())
    except (OSError, ValueError) as exc:
        result["error"] = (
            f"no compare.json/session.json: {exc}; log tail: {(folder / 'compare.log').read_text()[-800:]}"
        )
        return result
    result.update(summarize_compare(report, session, wall))
    result["sampling"] = sampling_cost(folder / "bundles", result["breakdown_s"])
    return result


def sampling_cost(bundles: Path, breakdown: dict) -> dict:
    """Per side: timed calls over all rounds (the round bundles, read by the bundle reader), the
    timing wall time per call (guard, flush and bookkeeping included: what one more sample
    costs), and the blocks the guard made re-time or left uncovered."""
    from attnwatch.history.contract.validate import load_bundle

    out = {}
    for side, parts in breakdown.items():
        calls = retimed = uncovered = 0
        for folder in sorted(bundles.glob(f"{side}-round*")):
            bundle = load_bundle(folder, known_commit=False)
            calls += sum(len(v) for v in bundle.samples.values())
            for timing in bundle.timings:
                retimed += timing.guard_retimed_blocks or 0
                uncovered += timing.guard_uncovered_blocks or 0
        out[side] = {
            "calls": calls,
            "guard_retimed_blocks": retimed,
            "guard_uncovered_blocks": uncovered,
            "timing_us_per_call": round(parts.get("timing_s", 0.0) * 1e6 / calls, 1) if calls else None,
        }
    return out


def summarize_compare(report: dict, session: dict, wall: float) -> dict:
    verdicts: dict[str, int] = {}
    for case in report["cases"]:
        verdicts[case["verdict"]] = verdicts.get(case["verdict"], 0) + 1
    sides = session["sides"]
    parts = {name: s["times"] for name, s in sides.items()}
    # start-up and builds of the two sides overlap (both workers start at once); the rest is sequential
    setup = max(t["startup_s"] + t["build_s"] for t in parts.values())
    measured = sum(t["correctness_s"] + t["prepare_s"] + t["timing_s"] + t["probe_s"] for t in parts.values())
    used = list(session["rounds_used"].values())
    return {
        "cases": len(report["cases"]),
        "verdicts": verdicts,
        "regressions": [c["case_id"] for c in report["cases"] if c["verdict"] == "regression"],
        "ratios": {c["case_id"]: c["ratio"] for c in report["cases"] if c["ratio"] is not None},
        "rounds_run": session["rounds_run"],
        "rounds_per_case": [min(used), max(used)] if used else None,
        "mean_rounds": round(sum(used) / len(used), 2) if used else None,
        "breakdown_s": {name: {k: round(v, 1) for k, v in t.items() if k.endswith("_s")} for name, t in parts.items()},
        "setup_overlapped_s": round(setup, 1),
        "judging_s": round(session["looks_s"], 1),
        "other_s": round(wall - setup - measured - session["looks_s"], 1),
        "restarts": {name: s["restarts"] for name, s in sides.items()},
        "lost": {name: s["final"] for name, s in sides.items() if s["final"]},
        "notes": report["notes"],
    }


# -- one main group under the sanitizer / with CUDA_LAUNCH_BLOCKING ------------------------------


def run_group(bundle_dir: str, diagnose: bool, deadline_s: float) -> int:
    """Child mode: `attnwatch run` of one main group with light timing (what gpu_check does)."""
    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.supervisor import RunOptions, execute_suite
    from attnwatch.ci.selection import select_cases

    kind = detect_device_kind()
    selection = select_cases(MAIN_GROUP if kind == "cuda" else "cpu_tiny", None, "fp16", "no", kind)
    timing = timing_config(kind).with_overrides(time_cap_s=0.1, max_samples=40, min_samples=20)
    if not diagnose:  # under memcheck: no 4x-L2 memset per call, few graph replays (the stage still runs)
        timing = timing.with_overrides(flush_l2_multiple=0, graph_calls=2, graph_replays=2)
    options = RunOptions(
        shape_set="custom",
        device_kind=kind,
        timing=timing,
        correctness_seeds=[0],
        case_timeout_s=max(60.0, deadline_s / 2),
        progress=True,
        plain_progress=True,
        diagnose=diagnose,
        deadline=time.monotonic() + deadline_s,
        trigger="workflow_dispatch",
        notes="gpu_compare: " + ("CUDA_LAUNCH_BLOCKING=1" if diagnose else "compute-sanitizer memcheck"),
    )
    result = execute_suite(selection.cases, kernels_root=None, out_dir=Path(bundle_dir), options=options)
    return 0 if result.status == "complete" else 1


def group_step(name: str, out: Path, *, sanitizer: str | None, diagnose: bool, timeout_s: float) -> dict:
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--run-group",
        str(folder / "bundle"),
        "--group-deadline-s",
        str(max(30.0, timeout_s - 30.0)),
    ]
    if diagnose:
        cmd.append("--group-diagnose")
    if sanitizer:
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        cmd = [
            sanitizer,
            "--tool",
            "memcheck",
            "--target-processes",
            "all",
            "--report-api-errors",
            "no",
            "--print-limit",
            "50",
            "--log-file",
            str(folder / "memcheck.%p.log"),
            *cmd,
        ]
    rc, wall = run_logged(cmd, env, timeout_s, folder / "run.log")
    result = {"step": name, "rc": rc, "wall_s": round(wall, 1)}
    outcomes_path = folder / "bundle" / "outcomes.json"
    if outcomes_path.is_file():
        outcomes = json.loads(outcomes_path.read_text())["cases"]
        statuses: dict[str, int] = {}
        for o in outcomes:
            statuses[o["status"]] = statuses.get(o["status"], 0) + 1
        result["statuses"] = statuses
        result["lost"] = {o["case_id"]: o["error"] for o in outcomes if o["status"] in ("failed", "crashed", "timeout")}
        result["notes"] = json.loads((folder / "bundle" / "manifest.json").read_text()).get("notes", "")
    if sanitizer:
        summaries = []
        for path in sorted(folder.glob("memcheck.*.log")):
            summaries += [
                line.strip() for line in path.read_text(errors="replace").splitlines() if "ERROR SUMMARY" in line
            ]
        result["memcheck_summaries"] = summaries
        result["memcheck_errors"] = sum(
            int(s.split("ERROR SUMMARY:")[1].split()[0])
            for s in summaries
            if s.split("ERROR SUMMARY:")[1].split()[0].isdigit()
        )
    return result


# -- the call -----------------------------------------------------------------------------------


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.run_group:
        return run_group(args.run_group, args.group_diagnose, args.group_deadline_s)
    budget = Budget(args.budget_s)
    kind = detect_device_kind() if args.device == "auto" else args.device
    args.shapes = args.shapes or ("pr" if kind == "cuda" else "cpu")
    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "gpu_compare")
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in args.steps.split(",") if s]
    unknown = set(steps) - set(STEPS)
    if unknown:
        log(f"unknown steps {sorted(unknown)}; known: {', '.join(STEPS)}")
        return 2
    work = Path(tempfile.mkdtemp(prefix="gpu-compare-"))
    base_root = work / "base"
    shutil.copytree(REPO_ROOT / "kernels", base_root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    caches = work / "caches"  # empty: the first compare is cold, later ones reuse what it compiled
    env = dict(
        os.environ,
        ATTNWATCH_CACHE=str(caches / "attnwatch"),
        TRITON_CACHE_DIR=str(caches / "triton"),
        CUPY_CACHE_DIR=str(caches / "cupy"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    from attnwatch.ci.environment import capture_git

    report = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device_kind": kind,
        "commit": args.commit or capture_git(REPO_ROOT).sha,
        "shapes": args.shapes,
        "budget_s": args.budget_s,
        "steps": {},
    }
    # A step gets at most MOST[step] seconds and never eats what the later steps asked for need
    # (NEED: the least worth starting; a cut-off compare returns nothing useful).
    sanitizer = shutil.which("compute-sanitizer") or (
        "/usr/local/cuda/bin/compute-sanitizer" if Path("/usr/local/cuda/bin/compute-sanitizer").exists() else None
    )
    for step in STEPS:
        if step not in steps:
            continue
        later = sum(NEED[s] for s in STEPS[STEPS.index(step) + 1 :] if s in steps)
        timeout = min(MOST[step], budget.left() - later)
        if step == "sanitizer" and (kind != "cuda" or not sanitizer):
            why = "no GPU" if kind != "cuda" else "compute-sanitizer not found"
        elif timeout < NEED[step]:
            why = f"{budget.left():.0f} s of the budget left, {later:.0f} s kept for the later steps"
        else:
            why = None
        if why:
            report["steps"][step] = {"step": step, "skipped": why}
            log(f"{step}: skipped ({why})")
            continue
        log(f"{step}: starting (up to {timeout:.0f} s)")
        if step in ("cold", "warm"):
            result = run_compare(step, args, out, base_root, env, args.variants, [], timeout)
        elif step == "planted":
            planted_env = dict(env, ATTNWATCH_PLANTED_SLOWDOWN=str(args.slowdown))
            for k in range(1, max(1, args.planted_repeats) + 1):
                name = "planted" if k == 1 else f"planted_{k}"
                if k > 1 and budget.left() - later < NEED[step]:
                    report["steps"][name] = {"step": name, "skipped": f"{budget.left():.0f} s of the budget left"}
                    break
                if k > 1:
                    log(f"{name}: starting (up to {min(MOST[step], budget.left() - later):.0f} s)")
                report["steps"][name] = run_compare(
                    name,
                    args,
                    out,
                    base_root,
                    planted_env,
                    "sdpa,t_planted",
                    ["--variant-module", "attnwatch_planted", "--variant-path", str(FAULTS)],
                    min(MOST[step], budget.left() - later),
                )
            result = report["steps"]["planted"]
        else:
            result = group_step(
                step,
                out,
                sanitizer=sanitizer if step == "sanitizer" else None,
                diagnose=step == "diagnose",
                timeout_s=timeout,
            )
        report["steps"][step] = result
        log(f"{step}: {json.dumps({k: v for k, v in result.items() if k not in ('ratios', 'notes', 'lost')})[:600]}")
        (out / "gpu_compare.json").write_text(json.dumps(report, indent=1, default=str))
    report["seconds"] = round(args.budget_s - budget.left(), 1)
    (out / "gpu_compare.json").write_text(json.dumps(report, indent=1, default=str))
    print_table(report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(report: dict) -> None:
    log("")
    log(f"{'step':<10} {'rc':>4} {'wall s':>7}  result")
    for name, r in report["steps"].items():
        if "skipped" in r:
            log(f"{name:<10} {'-':>4} {'-':>7}  skipped: {r['skipped']}")
            continue
        if "verdicts" in r:
            text = f"{r['cases']} cases {r['verdicts']}, rounds/case {r['rounds_per_case']} (mean {r['mean_rounds']})"
            if name.startswith("planted"):
                planted = {k: round(v, 4) for k, v in r["ratios"].items() if k.startswith("t_planted/")}
                text += f"; t_planted ratios {planted}; regressions {len(r['regressions'])}"
            log(f"{name:<10} {r['rc']:>4} {r['wall_s']:>7}  {text}")
            for side, parts in r["breakdown_s"].items():
                log(f"{'':<10} {'':>4} {'':>7}  {side}: " + ", ".join(f"{k[:-2]} {v}" for k, v in parts.items()))
            if r.get("sampling"):
                log(
                    f"{'':<10} {'':>4} {'':>7}  timed calls "
                    + ", ".join(
                        f"{side} {c['calls']} ({c['timing_us_per_call']} us of timing each, blocks re-timed "
                        f"{c['guard_retimed_blocks']}, uncovered {c['guard_uncovered_blocks']})"
                        for side, c in r["sampling"].items()
                    )
                )
            log(
                f"{'':<10} {'':>4} {'':>7}  setup (both sides, overlapped) {r['setup_overlapped_s']}, judging "
                f"{r['judging_s']}, other {r['other_s']}; restarts {r['restarts']}; lost {list(r['lost'])}"
            )
        else:
            extra = f", memcheck errors {r.get('memcheck_errors')}" if "memcheck_errors" in r else ""
            log(
                f"{name:<10} {r['rc']:>4} {r['wall_s']:>7}  {r.get('statuses', r.get('error', '?'))}{extra}; "
                f"lost {list(r.get('lost', {}))}"
            )
    log(f"total {report['seconds']} s of {report['budget_s']:.0f}")


if __name__ == "__main__":
    sys.exit(main())
