"""fa4_sm90 (flash-attn-4's SM90 forward) beside SDPA's backends on a Hopper GPU, in one call.

Every figure comes from the real harness: each step is one `python3 -m attnwatch run` of the
variants sdpa, sdpa_flash, sdpa_cudnn and fa4_sm90 (builds, correctness against the float64
reference, interleaved timing; gaps only within a run), and this script only reads back the
bundles it writes. Steps, in order of what matters most, each given what is left of
--budget-s (`--max-minutes`: a step cut short records its unfinished cases as not run):

1. `main`: the main set (which holds the pr set), fp16 and bf16, causal and not;
2. `fa_grid_fp16`: the FlashAttention-paper grid of the nightly set (fa_s512..16384, D 64/128);
3. `fa_grid_bf16`: the same grid in bf16 (the first to go when the budget is short).

Before the steps, a probe in its own process (PROBE_TIMEOUT_S at most) records whether fa4_sm90
is available here and why not, the versions of the flash-attn-4 stack, and the correctness check
(kernels.correctness, float64 reference) on problems the sets lack: S = 777 (partial tiles,
masking at the tail) in both head dims, dtypes and causalities, and the large-logits inputs
(kernels.inputs) that catch a softmax without its running maximum; and what one timed call is
(the kernels it launches, its host time beside the interface's own call's).

A step that cannot start with at least MIN_STEP_S left is skipped and listed. flash-attn-4
installed with `pip --target` is found through ATTNWATCH_EXTRA_SITE (or --extra-site), which
the runs' measuring children inherit.

Writes under --out (default $OUT, else out/fa4_check): fa4_check.json (the probe; per
fa4_sm90 case its median, graph-replay median, TFLOPS, gaps to sdpa, sdpa_cudnn and
sdpa_flash, the reference medians, correctness, kernel configuration; per step its status and
wall time), bundles.tar.gz (every run bundle), fa4_check.log (the runs' output); prints a
table last.

    ATTNWATCH_EXTRA_SITE=/root/fa4site PYTHONPATH=. python3 scripts/fa4_check.py --budget-s 510 --out $OUT
    PYTHONPATH=. python3 scripts/fa4_check.py --smoke --out /tmp/fa4   # CPU: fa4_sm90 skipped, with its reason

Imports nothing that needs duckdb, streamlit or plotly: a GPU machine without them runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from attnwatch.kernels.capabilities import EXTRA_SITE_ENV  # noqa: E402  (a leaf: no torch at import)
from attnwatch.kernels.shapes import SHAPE_SETS  # noqa: E402

VARIANTS = ("sdpa", "sdpa_flash", "sdpa_cudnn", "fa4_sm90")
SUBJECT = "fa4_sm90"
FA_GRID = tuple(s for s in SHAPE_SETS["nightly"] if s.startswith("fa_"))
STEPS = {  # name -> (shapes, dtypes)
    "main": ("main", "fp16,bf16"),
    "fa_grid_fp16": (",".join(FA_GRID), "fp16"),
    "fa_grid_bf16": (",".join(FA_GRID), "bf16"),
}
SMOKE_STEPS = {"cpu": ("cpu", "fp16")}
SMOKE_RUN = ("--device", "cpu", "--time-cap", "0.2", "--max-samples", "20")  # the script checked, not the CPU timed
STACK = (
    "flash-attn-4",
    "nvidia-cutlass-dsl",
    "nvidia-cutlass-dsl-libs-cu13",
    "apache-tvm-ffi",
    "torch-c-dlpack-ext",
    "quack-kernels",
    "torch",
)
PROBE_TIMEOUT_S = 150.0
LAUNCH_CALLS = 200
# Per-case timing cap of the GPU steps: their 288 cases fit 9 minutes at it (the H200 checked
# and timed 408 `main` cases in 441 s at 0.8 s, docs/benchmarks/timing.md "Harness noise, cost and
# agreement"); ci/run_config.toml's 1.5 s would leave the bf16 grid out.
GPU_TIME_CAP_S = 0.8
MIN_STEP_S = 60.0  # less than this left: start-up, compile and correctness would leave nothing timed
RESERVE_S = 15.0  # kept back from the last step for the summary and the files
WRAP_UP_S = 25.0  # a run's deadline before its step's end: the case in flight, then the bundle written


def log(text: str) -> None:
    print(text, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget of the whole call (at most 9 min)")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/fa4_check)")
    p.add_argument(
        "--steps", default=None, help=f"comma-separated subset of {', '.join(STEPS)} (default: all, in order)"
    )
    p.add_argument(
        "--extra-site", default=None, help=f"folder flash-attn-4 was pip --target-ed into (sets {EXTRA_SITE_ENV})"
    )
    p.add_argument(
        "--time-cap",
        type=float,
        default=GPU_TIME_CAP_S,
        help=f"per-case timing cap of the GPU steps, seconds (default {GPU_TIME_CAP_S})",
    )
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--smoke", action="store_true", help="CPU, the cpu shape set, fp16, a few samples: checks the script itself"
    )
    p.add_argument("--commit", default=None, help="commit measured, for a copy without .git")
    p.add_argument("--probe-worker", metavar="RESULT", help=argparse.SUPPRESS)
    p.add_argument("--probe-checks", default=SUBJECT, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    unknown = set(args.steps.split(",")) - set(STEPS) if args.steps else set()
    if unknown:
        p.error(f"--steps: unknown step(s) {', '.join(sorted(unknown))}; known: {', '.join(STEPS)}")
    return args


def _probe_cases(variant: str) -> list:
    """(case, input profile): S = 777 in both head dims, dtypes and causalities, and the
    large-logits inputs on one of them."""
    from attnwatch.kernels.cases import Case
    from attnwatch.kernels.shapes import adhoc_shape

    cases = [
        (Case(variant, adhoc_shape(b, h, 777, d), dtype, causal), "normal")
        for b, h, d, dtype in ((2, 3, 64, "fp16"), (1, 2, 128, "bf16"))
        for causal in (False, True)
    ]
    return cases + [(Case(variant, adhoc_shape(2, 3, 777, 64), "fp16", True), "large_logits")]


def launch_facts(case) -> dict:
    """What one timed call of fa4_sm90 is: the CUDA kernels it launches (the profiler's
    names; one is the design) and its host time beside that of the interface's own call
    (median of LAUNCH_CALLS back-to-back calls each, no synchronisation between them)."""
    import statistics

    import torch
    from flash_attn.cute import interface

    from attnwatch.kernels.inputs import softmax_scale
    from attnwatch.kernels.registry import get

    prepared = get(SUBJECT).prepare(case, torch.device("cuda"), 0)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        prepared.fn()
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    views = [t.transpose(1, 2) for t in (prepared.q, prepared.k, prepared.v, prepared.out)]
    scale = softmax_scale(case.shape.head_dim)

    def host_us(call) -> float:
        spent = []
        for _ in range(LAUNCH_CALLS):
            begin = time.perf_counter()
            call()
            spent.append(time.perf_counter() - begin)
        torch.cuda.synchronize()
        return statistics.median(spent) * 1e6

    return {
        "case": case.id,
        "kernels_per_call": kernels,
        "host_us_timed_call": host_us(prepared.fn),
        "host_us_interface_call": host_us(
            lambda: interface._flash_attn_fwd(
                *views[:3], softmax_scale=scale, causal=case.causal, out=views[3], _arch=90
            )
        ),
    }


def probe_worker(result_path: str, checked: str) -> int:
    """Child process: fa4_sm90's availability, the stack's versions, and the extra correctness
    checks of `checked` (fa4_sm90 when available; sdpa under --smoke, which exercises this on
    a CPU): one seed each, two calls, the output poisoned before each."""
    from importlib.metadata import PackageNotFoundError, version

    from attnwatch.kernels.availability import availability, device_summary
    from attnwatch.kernels.correctness import check_case

    ok, reason = availability(SUBJECT)  # adds ATTNWATCH_EXTRA_SITE's folders first
    versions = {}
    for dist in STACK:
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = None
    result = {"available": ok, "reason": reason, "device": device_summary(), "versions": versions, "checks": {}}
    Path(result_path).write_text(json.dumps(result, indent=1))  # kept should a check crash the process
    for case, profile in _probe_cases(checked) if ok or checked != SUBJECT else []:
        [check] = check_case(checked, case, seeds=(0,), profile=profile)
        result["checks"][f"{case.id}/{profile}"] = {
            "passed": check.passed,
            "max_abs_err": check.max_abs_err,
            "tolerance_used": check.tolerance_used,
            "error": check.error,
        }
        Path(result_path).write_text(json.dumps(result, indent=1))
    if ok and checked == SUBJECT:
        from attnwatch.kernels.cases import Case
        from attnwatch.kernels.shapes import SHAPES

        try:
            result["launch"] = launch_facts(Case(SUBJECT, SHAPES["b4_h16_s1k"], "fp16", False))
        except Exception as exc:  # noqa: BLE001 - a fact not gathered is reported, not fatal
            result["launch"] = {"error": f"{type(exc).__name__}: {exc}"[:1500]}
        Path(result_path).write_text(json.dumps(result, indent=1))
    return 0


def run_probe(work: Path, env: dict, timeout_s: float, checked: str) -> dict:
    path = work / "probe.json"
    failure = None
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--probe-worker", str(path), "--probe-checks", checked],
            cwd=REPO_ROOT,
            env=env,
            timeout=timeout_s,
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            failure = f"exit {done.returncode}: {done.stderr[-1500:]}"
    except subprocess.TimeoutExpired:
        failure = f"stopped after {timeout_s:.0f} s"
    probe = json.loads(path.read_text()) if path.exists() else {}
    if failure:
        probe["error"] = failure
        log(f"probe: {failure}")
    log(f"probe: {SUBJECT} " + ("available" if probe.get("available") else f"unavailable: {probe.get('reason')}"))
    log(f"probe: {probe.get('device')}; {probe.get('versions')}")
    for name, check in probe.get("checks", {}).items():
        log(
            f"probe: {name}: {'ok' if check['passed'] else 'FAILED'}, max_abs_err {check['max_abs_err']}"
            + (f", {check['error']}" if check["error"] else "")
        )
    if "launch" in probe:
        log(f"probe: one timed call: {probe['launch']}")
    return probe


def run_step(
    name: str, shapes: str, dtypes: str, args: argparse.Namespace, work: Path, env: dict, seconds: float, log_file
) -> dict:
    """One `attnwatch run` given `seconds`: its own deadline (--max-minutes) comes WRAP_UP_S
    earlier, so it ends its case in flight and writes its bundle in time; its process group
    is killed at `seconds`. Its bundle folder and exit status."""
    bundle = work / name
    cmd = [
        sys.executable,
        "-m",
        "attnwatch",
        "run",
        "--shapes",
        shapes,
        "--variants",
        ",".join(VARIANTS),
        "--dtypes",
        dtypes,
        "--causal",
        "both",
        "--out",
        str(bundle),
        "--no-progress",
        "--trigger",
        "workflow_dispatch",
        "--notes",
        f"fa4_check step {name}",
        "--max-minutes",
        f"{(seconds - WRAP_UP_S) / 60.0:.2f}",
    ]
    if args.smoke:
        cmd += list(SMOKE_RUN)
    else:
        cmd += ["--device", args.device, "--time-cap", str(args.time_cap)]
    if args.commit:
        cmd += ["--commit", args.commit]
    log(f"step {name}: {shapes if len(shapes) < 40 else shapes[:37] + '...'} {dtypes}, {seconds:.0f} s allowed")
    log_file.write(f"\n=== step {name}: {' '.join(cmd[1:])}\n")
    log_file.flush()
    started = time.perf_counter()
    child = subprocess.Popen(
        cmd, cwd=REPO_ROOT, env=env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        rc = child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        rc = child.wait()
    wall = round(time.perf_counter() - started, 1)
    status = (
        json.loads((bundle / "manifest.json").read_text()).get("status")
        if (bundle / "manifest.json").exists()
        else None
    )
    log(f"step {name}: rc {rc}, {wall} s, bundle status {status}")
    return {
        "shapes": shapes,
        "dtypes": dtypes,
        "rc": rc,
        "wall_s": wall,
        "status": status,
        "bundle": str(bundle) if (bundle / "outcomes.json").exists() else None,
    }


def _records(bundle: Path, name: str, key: str) -> list[dict]:
    return json.loads((bundle / name).read_text())[key]


def summarize_bundle(bundle: Path, step: str) -> dict[str, dict]:
    """Per fa4_sm90 case of one bundle: what the harness recorded for it and its references."""
    outcomes = {o["case_id"]: o for o in _records(bundle, "outcomes.json", "cases")}
    timings = {t["case_id"]: t for t in _records(bundle, "timings.json", "timings")}
    checks: dict[str, list[dict]] = {}
    for record in _records(bundle, "correctness.json", "records"):
        checks.setdefault(record["case_id"], []).append(record)
    rows = {}
    for case_id, outcome in outcomes.items():
        if outcome["variant"] != SUBJECT:
            continue
        shape = outcome["shape_id"]
        timing = timings.get(case_id, {})
        seeds = checks.get(case_id, [])
        errors = [r["max_abs_err"] for r in seeds if r.get("max_abs_err") is not None]

        def reference(variant: str) -> float | None:
            return timings.get(case_id.replace(SUBJECT + "/", variant + "/", 1), {}).get("median_us")

        rows[case_id] = {
            "step": step,
            "shape": shape,
            "dtype": outcome["dtype"],
            "causal": outcome["causal"],
            "sets": [name for name, ids in SHAPE_SETS.items() if shape in ids and name != "cpu"],
            "status": outcome["status"],
            "error": outcome.get("error"),
            "median_us": timing.get("median_us"),
            "graph_median_us": timing.get("graph_median_us"),
            "tflops": timing.get("tflops"),
            "gap_to_baseline": timing.get("gap_to_baseline"),
            "gap_to_cudnn": (timing.get("gap_to_backends") or {}).get("sdpa_cudnn"),
            "gap_to_flash": (timing.get("gap_to_backends") or {}).get("sdpa_flash"),
            "sdpa_us": reference("sdpa"),
            "cudnn_us": reference("sdpa_cudnn"),
            "flash_us": reference("sdpa_flash"),
            "kernel_config": timing.get("kernel_config"),
            "correct": all(r["passed"] for r in seeds) if seeds else None,
            "max_abs_err": max(errors) if errors else None,
            "tolerance_used": max(
                (r["tolerance_used"] for r in seeds if r.get("tolerance_used") is not None), default=None
            ),
            "correctness_errors": sorted({r["error"] for r in seeds if r.get("error")}),
        }
    return rows


def save(report: dict, bundles: list[Path], out: Path) -> None:
    """The report and the bundles so far, each renamed into place whole."""
    tmp = out / ".bundles.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for bundle in bundles:
            tar.add(bundle, arcname=bundle.name, filter=lambda m: None if m.name.endswith(".tmp") else m)
    os.replace(tmp, out / "bundles.tar.gz")
    tmp = out / ".fa4_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, out / "fa4_check.json")


def _cell(value: float | None, spec: str, width: int) -> str:
    return format(value, spec).rjust(width) if value is not None else "-".rjust(width)


def print_table(report: dict) -> None:
    log("")
    log(
        f"{'shape':<16} {'dtype':<5} {'causal':<6} {'fa4_us':>9} {'sdpa_us':>9} {'cudnn_us':>9} {'/sdpa':>6} "
        f"{'/cudnn':>6} {'/flash':>6} {'max_err':>8} {'ok':>3}  config / reason"
    )
    for row in report["cases"].values():
        ok = {True: "yes", False: "NO", None: "-"}[row["correct"]]
        tail = row["kernel_config"] or ""
        if row["status"] != "ok":
            tail = f"{row['status']}: {(row['error'] or '')[:90]}"
        log(
            f"{row['shape']:<16} {row['dtype']:<5} {'yes' if row['causal'] else 'no':<6} "
            f"{_cell(row['median_us'], '.2f', 9)} {_cell(row['sdpa_us'], '.2f', 9)} {_cell(row['cudnn_us'], '.2f', 9)} "
            f"{_cell(row['gap_to_baseline'], '.3f', 6)} {_cell(row['gap_to_cudnn'], '.3f', 6)} {_cell(row['gap_to_flash'], '.3f', 6)} "
            f"{_cell(row['max_abs_err'], '.1e', 8)} {ok:>3}  {tail}"
        )
    for name, step in report["steps"].items():
        log(
            f"step {name}: "
            + (
                f"skipped: {step['skipped']}"
                if "skipped" in step
                else f"{step['status']}, {step['wall_s']} s, rc {step['rc']}"
            )
        )
    rows = list(report["cases"].values())
    checks = report["probe"].get("checks", {}).values()
    log(f"probe: {sum(c['passed'] for c in checks)}/{len(checks)} extra correctness checks passed")
    log(
        f"{SUBJECT}: {sum(r['status'] == 'ok' for r in rows)}/{len(rows)} cases timed, "
        f"{sum(r['correct'] is False for r in rows)} failed correctness; total {report['seconds']} s"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_worker:
        return probe_worker(args.probe_worker, args.probe_checks)
    started = time.perf_counter()
    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "fa4_check")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fa4-check-"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    if args.extra_site:
        env[EXTRA_SITE_ENV] = args.extra_site
    steps = SMOKE_STEPS if args.smoke else {n: STEPS[n] for n in (args.steps.split(",") if args.steps else STEPS)}
    report: dict = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": args.commit,
        "args": vars(args),
        "extra_site": env.get(EXTRA_SITE_ENV),
        "variants": list(VARIANTS),
        "steps": {},
        "cases": {},
    }
    bundles: list[Path] = []
    report["probe"] = run_probe(work, env, min(PROBE_TIMEOUT_S, args.budget_s / 4), "sdpa" if args.smoke else SUBJECT)
    with open(out / "fa4_check.log", "w", encoding="utf-8") as log_file:
        for name, (shapes, dtypes) in steps.items():
            left = args.budget_s - (time.perf_counter() - started) - RESERVE_S
            if left < MIN_STEP_S:
                report["steps"][name] = {
                    "shapes": shapes,
                    "dtypes": dtypes,
                    "skipped": f"{left:.0f} s of --budget-s left, under {MIN_STEP_S:.0f} s",
                }
                log(f"step {name}: skipped, {left:.0f} s left")
                continue
            step = run_step(name, shapes, dtypes, args, work, env, left, log_file)
            report["steps"][name] = step
            if step["bundle"]:
                bundle = Path(step["bundle"])
                bundles.append(bundle)
                report["cases"].update(summarize_bundle(bundle, name))
                manifest = json.loads((bundle / "manifest.json").read_text())
                report.setdefault("environment", manifest.get("environment"))
            report["seconds"] = round(time.perf_counter() - started, 1)
            save(report, bundles, out)
    report["seconds"] = round(time.perf_counter() - started, 1)
    save(report, bundles, out)
    print_table(report)
    ran = [s for s in report["steps"].values() if "skipped" not in s]
    return 0 if ran and all(s["status"] == "complete" for s in ran) else 1


if __name__ == "__main__":
    sys.exit(main())
