"""The one GPU-machine script: build, check and time everything in a single call.

What it does, in order (each step optional, so a short lease can run a subset):

1. `--pytest PATH...`: the GPU-marked tests (`pytest -m gpu`) of the given test files;
2. `--repeats N` independent runs of the harness (`ci.supervisor.execute_suite`, exactly what
   `attnwatch run` does: builds every variant, checks correctness on the first run, times
   every case interleaved), each in fresh child processes, with the wall time of each run
   (the first run pays compilation; later runs show the warm-cache cost);
3. noise: per case, the coefficient of variation of the run medians and of gap-to-SDPA across
   the repeats (targets: CV <= 1% for cases >= 50 us, <= 2% below; gap CV <= 1%);
4. `--do-bench`: the same cases timed by `triton.testing.do_bench` (L2 flushed by Triton,
   median of per-call events) in a separate process, and the ratio harness/do_bench;
5. writes under `--out` (default $OUT): `gpu_check.json` (every figure), `bundles.tar.gz` (the
   run bundles), `pytest_gpu.log`; prints a short table last.

`bundles.tar.gz` is rewritten (temp file + rename) the moment a run's bundle is written, which
is before that run's ncu pass, and again when ncu's files are added: a call killed from outside
at any point still returns every bundle finished so far, and the ncu records that finished.

Run from the repository root:  PYTHONPATH=. python3 scripts/gpu_check.py --shapes pr --repeats 3 --do-bench
`--budget-s` stops starting new repeats when the next one would not fit, and stops a run that
reaches it (its unfinished cases are recorded as not run), so the call always returns data.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from attnwatch.ci.selection import detect_device_kind, select_cases
from attnwatch.ci.environment import capture_environment, capture_git
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import default, timing_config
from attnwatch.ci.supervisor import RunOptions, execute_suite
from attnwatch.history.analysis.statistics import coefficient_of_variation

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", default="pr", help="shape set or comma-separated shape ids")
    p.add_argument("--variants", default=None, help="comma-separated variants (default: all)")
    p.add_argument("--dtypes", default="fp16")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--repeats", type=int, default=1, help="independent runs (noise needs >= 2)")
    p.add_argument(
        "--correctness-every-run", action="store_true", help="check correctness in every repeat, not just the first"
    )
    p.add_argument("--no-correctness", action="store_true")
    p.add_argument("--do-bench", action="store_true", help="compare medians with triton.testing.do_bench")
    p.add_argument("--do-bench-variants", default=None, help="variants to compare (default: all that timed ok)")
    p.add_argument("--do-bench-rep-ms", type=float, default=200.0, help="do_bench's rep (ms of timed calls per case)")
    p.add_argument("--pytest", nargs="*", default=[], help="test files whose gpu-marked tests to run first")
    p.add_argument("--time-cap", type=float, default=None, help="per-case timing cap, seconds")
    p.add_argument("--max-samples", type=int, default=None)
    p.add_argument(
        "--case-timeout",
        type=float,
        default=None,
        help="seconds of silence before a case counts as hung (default: ci/run_config.toml)",
    )
    p.add_argument("--ncu", action="store_true", help="also profile with ncu in the first run")
    p.add_argument(
        "--ncu-cases", default="", help="with --ncu: comma-separated fnmatch patterns of case ids to profile"
    )
    p.add_argument("--budget-s", type=float, default=400.0, help="do not start a repeat that would end after this")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/gpu_check)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--probe",
        action="store_true",
        help="diagnose harness vs do_bench on a 4096^3 fp16 matmul and a small SDPA: medians, clocks, throttle reasons",
    )
    p.add_argument(
        "--commit",
        default=None,
        help="commit to record (report and bundles) when the checkout has no .git (copied trees)",
    )
    p.add_argument("--do-bench-worker", nargs=2, metavar=("PLAN", "RESULT"), help=argparse.SUPPRESS)
    p.add_argument("--probe-worker", metavar="RESULT", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def log(text: str) -> None:
    print(text, flush=True)


def run_pytest(paths: list[str], out: Path, timeout_s: float) -> dict:
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", *paths]
    started = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s)
        text, rc = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        text, rc = f"{exc.stdout or ''}\n(timed out after {timeout_s} s)", 124
    (out / "pytest_gpu.log").write_text(text if isinstance(text, str) else text.decode(), encoding="utf-8")
    last = [line for line in str(text).splitlines() if line.strip()][-1:] or [""]
    return {"rc": rc, "summary": last[0], "seconds": round(time.perf_counter() - started, 1)}


def bundle_timings(bundle: Path) -> tuple[dict[str, dict], dict[str, dict]]:
    """(timings by case id, outcomes by case id) read back from a written bundle."""
    outcomes = json.loads((bundle / "outcomes.json").read_text())["cases"]
    timings = {t["case_id"]: t for t in json.loads((bundle / "timings.json").read_text())["timings"]}
    return timings, {o["case_id"]: o for o in outcomes}


def guard_totals(timings: dict[str, dict]) -> dict | None:
    """The timing guard over one run: blocks re-timed, and blocks kept uncovered (host gaps
    possible); None when no case ran behind a guard (CPU timing)."""
    if all(t.get("guard_retimed_blocks") is None for t in timings.values()):
        return None
    uncovered = {cid: t["guard_uncovered_blocks"] for cid, t in timings.items() if t.get("guard_uncovered_blocks")}
    return {
        "retimed_blocks": sum(t.get("guard_retimed_blocks") or 0 for t in timings.values()),
        "uncovered_blocks": sum(uncovered.values()),
        "cases_with_uncovered_blocks": uncovered,
    }


def noise_table(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """Per case present in every run: mean median, CV of medians, CV of gap-to-SDPA."""
    common = set(runs[0]).intersection(*runs[1:]) if len(runs) > 1 else set()
    table = {}
    for cid in sorted(common):
        medians = [r[cid]["median_us"] for r in runs]
        gaps = [r[cid]["gap_to_baseline"] for r in runs if r[cid].get("gap_to_baseline") is not None]
        graph = [r[cid]["graph_median_us"] for r in runs if r[cid].get("graph_median_us") is not None]
        table[cid] = {
            "medians_us": medians,
            "mean_median_us": statistics.fmean(medians),
            "cv_median": coefficient_of_variation(medians),
            "gaps": gaps,
            "cv_gap": coefficient_of_variation(gaps) if len(gaps) == len(runs) else None,
            "graph_medians_us": graph,
            "rel_spread": [r[cid]["rel_spread"] for r in runs],
            "n": [r[cid]["n"] for r in runs],
            "converged": [r[cid]["converged"] for r in runs],
            "throttled_samples": [r[cid]["throttled_samples"] for r in runs],
            "throttle_reasons": sorted({x for r in runs for x in r[cid]["throttle_reasons"]}),
        }
    return table


def do_bench_worker(plan_path: str, result_path: str) -> int:
    """Child process: time each case with triton.testing.do_bench (median, L2 flushed)."""
    import torch
    import triton.testing

    from attnwatch.kernels import registry
    from attnwatch.kernels.cases import Case

    plan = RunPlan.load(Path(plan_path))
    rep_ms = float(plan.timing.get("do_bench_rep_ms", 200.0))
    device = torch.device("cuda")
    results = {}
    for pc in plan.cases:
        case = Case(pc.variant, pc.shape(), pc.dtype, pc.causal)
        prepared = None
        try:
            prepared = registry.get(pc.variant).prepare(case, device, plan.timing_seed)
            ms = triton.testing.do_bench(prepared.fn, warmup=50, rep=rep_ms, return_mode="median")
            results[pc.case_id] = {"median_us": ms * 1000.0}
        except Exception as exc:  # noqa: BLE001 - one variant's failure is its own row
            results[pc.case_id] = {"error": f"{type(exc).__name__}: {exc}"}
        Path(result_path).write_text(json.dumps(results, indent=1))
        del prepared
        torch.cuda.empty_cache()
    return 0


def probe_worker(result_path: str) -> int:
    """Child process: the same two subjects timed by the harness engine (block 10 and block
    100) and by do_bench, alternately, twice, with NVML clocks and throttle reasons around each."""
    import torch
    import triton.testing

    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NvmlMonitor
    from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    q = torch.randn(1, 16, 1024, 64, device="cuda", dtype=torch.float16)
    subjects = {
        "matmul4096": lambda: a @ b,
        "sdpa_h100small": lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q),
    }
    monitor = NvmlMonitor()
    base = timing_config("cuda")
    flusher = L2Flusher(
        torch.device("cuda"), int(base.flush_l2_multiple * torch.cuda.get_device_properties(0).L2_cache_size)
    )
    rows = []
    for _ in range(2):
        for name, fn in subjects.items():
            for method in ("harness_block10", "harness_block100", "do_bench"):
                before = monitor.sm_clock_mhz()
                if method == "do_bench":
                    median = triton.testing.do_bench(fn, warmup=25, rep=300, return_mode="median") * 1000.0
                    reasons = monitor.reasons()
                else:
                    config = base.with_overrides(block_calls=10 if method.endswith("10") else 100, time_cap_s=0.3)
                    timer = CudaEventTimer(config.block_calls)
                    warm_up(fn, config, timer, flusher)
                    raw = measure_interleaved([Subject(name, fn)], config, timer, flusher, monitor)[name]
                    median, reasons = statistics.median(raw.samples_us), raw.throttle_reasons
                rows.append(
                    {
                        "subject": name,
                        "method": method,
                        "median_us": median,
                        "clock_before": before,
                        "clock_after": monitor.sm_clock_mhz(),
                        "reasons": reasons,
                    }
                )
    Path(result_path).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


def run_do_bench(cases: list[PlannedCase], seed: int, rep_ms: float, work: Path, timeout_s: float) -> dict[str, dict]:
    plan = RunPlan(cases=cases, timing={"do_bench_rep_ms": rep_ms}, device_kind="cuda", timing_seed=seed)
    plan_path = plan.save(work / "do_bench_plan.json")
    result_path = work / "do_bench_result.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    try:
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--do-bench-worker", str(plan_path), str(result_path)],
            cwd=REPO_ROOT,
            env=env,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        log(f"do_bench: timed out after {timeout_s:.0f} s; keeping the cases it finished")
    return json.loads(result_path.read_text()) if result_path.exists() else {}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.do_bench_worker:
        return do_bench_worker(*args.do_bench_worker)
    if args.probe_worker:
        return probe_worker(args.probe_worker)
    started = time.perf_counter()
    started_mono = time.monotonic()
    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "gpu_check")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    device_kind = detect_device_kind() if args.device == "auto" else args.device
    selection = select_cases(args.shapes, args.variants, args.dtypes, args.causal, device_kind)
    set_name, cases = selection.set_name, selection.cases
    timing = timing_config(device_kind).with_overrides(time_cap_s=args.time_cap, max_samples=args.max_samples)
    report: dict = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": args.commit or capture_git(REPO_ROOT).sha,
        "environment": asdict(capture_environment(probe_device=False)),
        "args": {k: v for k, v in vars(args).items() if k != "do_bench_worker"},
        "cases": len(cases),
        "timing_config": timing.to_dict(),
    }
    log(
        f"gpu_check: {len(cases)} cases on {device_kind} ({report['environment'].get('gpu_name')}), commit {report['commit'][:10]}"
    )
    if args.pytest:
        report["pytest_gpu"] = run_pytest(args.pytest, out, timeout_s=max(60.0, args.budget_s / 3))
        log(f"pytest -m gpu: rc {report['pytest_gpu']['rc']}: {report['pytest_gpu']['summary']}")

    runs, walls = [], []
    bundles = []
    for i in range(args.repeats):
        elapsed = time.perf_counter() - started
        if walls and elapsed + max(walls[1:] or walls) > args.budget_s:
            log(f"repeat {i}: skipped, would exceed --budget-s {args.budget_s:.0f} (elapsed {elapsed:.0f} s)")
            break
        options = RunOptions(
            shape_set=set_name,
            device_kind=device_kind,
            timing=timing,
            correctness=not args.no_correctness and (i == 0 or args.correctness_every_run),
            case_timeout_s=args.case_timeout or float(default(f"case_timeout_{device_kind}_s")),
            trigger="workflow_dispatch",
            progress=True,
            plain_progress=True,
            ncu=args.ncu and i == 0,
            ncu_cases=[p for p in args.ncu_cases.split(",") if p],
            notes=f"gpu_check repeat {i + 1}/{args.repeats}",
            deadline=started_mono + args.budget_s,
            commit_sha=args.commit,
            on_bundle_written=lambda bundle: save(report, [*bundles, bundle], out),
        )
        t0 = time.perf_counter()
        result = execute_suite(cases, kernels_root=None, out_dir=work / f"run{i}", options=options)
        walls.append(time.perf_counter() - t0)
        bundles.append(result.bundle)
        timings, outcomes = bundle_timings(result.bundle)
        runs.append(timings)
        statuses: dict[str, int] = {}
        for o in outcomes.values():
            statuses[o["status"]] = statuses.get(o["status"], 0) + 1
        report.setdefault("runs", []).append(
            {
                "wall_s": round(walls[-1], 1),
                "status": result.status,
                "statuses": statuses,
                "correctness": options.correctness,
                "lost": {c: o["error"] for c, o in outcomes.items() if o["status"] in ("failed", "crashed", "timeout")},
            }
        )
        report["runs"][-1]["guard"] = guard_totals(timings)
        if result.ncu is not None:
            metrics = result.ncu.case_metrics
            report["runs"][-1]["ncu"] = {
                "seconds": round(result.ncu.seconds, 1),
                "cases": len(metrics),
                "profiled": sum(1 for m in metrics if m.kernel_count and not m.error),
                "not_profiled_deadline": sum(
                    1 for m in metrics if (m.error or "").startswith("not profiled: run deadline")
                ),
            }
            log(f"run {i + 1} ncu: {report['runs'][-1]['ncu']}")
        if i == 0:
            correctness = json.loads((result.bundle / "correctness.json").read_text())["records"]
            report["correctness_failures"] = [r for r in correctness if not r["passed"]]
            report["correctness_records"] = len(correctness)
            report["builds"] = json.loads((result.bundle / "builds.json").read_text())["builds"]
        log(f"run {i + 1}: {walls[-1]:.1f} s wall, status {result.status}, {statuses}")
        save(report, bundles, out)  # after every run: a call cut short still returns what it measured

    report["noise"] = noise_table(runs) if len(runs) > 1 else {}
    if args.do_bench and runs and device_kind == "cuda" and args.budget_s - (time.perf_counter() - started) < 20:
        log("do_bench: skipped, less than 20 s of --budget-s left")
    elif args.do_bench and runs and device_kind == "cuda":
        wanted = set(args.do_bench_variants.split(",")) if args.do_bench_variants else None
        ok_cases = [c for c in cases if c.case_id in runs[0] and (wanted is None or c.variant in wanted)]
        remaining = args.budget_s - (time.perf_counter() - started)
        db = run_do_bench(
            ok_cases, int(default("timing_seed")), args.do_bench_rep_ms, work, timeout_s=max(30.0, remaining)
        )
        agreement = {}
        for cid, r in db.items():
            if "median_us" in r:
                ours = statistics.fmean(run[cid]["median_us"] for run in runs if cid in run)
                agreement[cid] = {"harness_us": ours, "do_bench_us": r["median_us"], "ratio": ours / r["median_us"]}
            else:
                agreement[cid] = r
        report["do_bench"] = agreement

    if args.probe and device_kind == "cuda":
        probe_path = work / "probe.json"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--probe-worker", str(probe_path)],
            cwd=REPO_ROOT,
            env=env,
            timeout=120,
            check=False,
        )
        report["probe"] = (
            json.loads(probe_path.read_text()) if probe_path.exists() else {"error": "probe wrote nothing"}
        )
        for row in report["probe"].get("rows", []):
            log(
                f"probe {row['subject']:<14} {row['method']:<22} median {row['median_us']:9.2f} us  clock {row['clock_before']}->{row['clock_after']} MHz  {row['reasons']}"
            )

    report["seconds"] = round(time.perf_counter() - started, 1)
    save(report, bundles, out)
    print_table(report, runs)
    return 0 if all(r["status"] == "complete" for r in report.get("runs", [])) else 1


def save(report: dict, bundles: list[Path], out: Path) -> None:
    """The bundles (as run0, run1, ...) and the report so far, each renamed into place whole."""
    tmp = out / ".bundles.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for i, b in enumerate(bundles):
            tar.add(b, arcname=f"run{i}", filter=_skip_temporaries)
    os.replace(tmp, out / "bundles.tar.gz")
    tmp = out / ".gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out / "gpu_check.json")


def _skip_temporaries(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave out a bundle file's temporary (.name.tmp), which is never part of the bundle."""
    return None if Path(member.name).name.endswith(".tmp") else member


def print_table(report: dict, runs: list[dict[str, dict]]) -> None:
    noise, db = report.get("noise", {}), report.get("do_bench", {})
    log("")
    log(
        f"{'case':<44} {'median_us':>10} {'gap':>6} {'cv%':>6} {'gapcv%':>6} {'graph_us':>9} {'dobench':>9} {'ratio':>6}"
    )
    for cid, t in runs[0].items() if runs else []:
        n = noise.get(cid, {})
        d = db.get(cid, {})
        cells = [
            f"{n.get('mean_median_us', t['median_us']):10.2f}",
            f"{t['gap_to_baseline']:6.3f}" if t.get("gap_to_baseline") is not None else f"{'-':>6}",
            f"{100 * n['cv_median']:6.2f}" if n else f"{'-':>6}",
            f"{100 * n['cv_gap']:6.2f}" if n.get("cv_gap") is not None else f"{'-':>6}",
            f"{t['graph_median_us']:9.2f}" if t.get("graph_median_us") is not None else f"{'-':>9}",
            f"{d['do_bench_us']:9.2f}" if "do_bench_us" in d else f"{'-':>9}",
            f"{d['ratio']:6.3f}" if "ratio" in d else f"{'-':>6}",
        ]
        log(f"{cid[:44]:<44} " + " ".join(cells))
    for i, r in enumerate(report.get("runs", [])):
        log(f"run {i + 1}: {r['wall_s']} s, {r['status']}, {r['statuses']}, lost: {list(r['lost'])[:6]}")
        if r.get("guard"):
            log(
                f"run {i + 1} guard: {r['guard']['retimed_blocks']} blocks re-timed, {r['guard']['uncovered_blocks']} kept "
                f"uncovered in {len(r['guard']['cases_with_uncovered_blocks'])} cases"
            )
    log(
        f"correctness: {report.get('correctness_records', 0)} records, {len(report.get('correctness_failures', []))} failed"
    )
    log(
        f"builds: {[(b['variant'], b['ok'], b.get('registers_per_thread'), b.get('spill_store_bytes')) for b in report.get('builds', [])]}"
    )
    if "pytest_gpu" in report:
        log(f"pytest -m gpu: {report['pytest_gpu']}")
    log(f"total {report['seconds']} s")


if __name__ == "__main__":
    sys.exit(main())
