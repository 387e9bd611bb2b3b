"""The rmsnorm operator on a GPU in one call: correctness of every variant against the float64
reference, then its time, achieved bandwidth and gap to the baseline, per shape and dtype.

For each shape of the set (default `main`) and dtype (fp16, bf16):

1. correctness: each available variant is prepared for seeds 0 and 1 and called twice per seed
   (a variant's own output buffer filled with NaN before each call), and compared element by
   element with `reference64` of its own inputs under kernels/rmsnorm/tolerances.toml
   (kernels.correctness.compare: max error, violations, the share of the allowance used);
2. timing: the variants that passed, plus a plain device copy of x into a buffer of y's size
   (the same bytes as RMSNorm's minimum but for w: the bandwidth this shape can reach at all),
   are timed interleaved by the harness's engine (ci/timing: CUDA events around each call,
   the L2 flushed before every call outside the timed region, a guard kernel ahead of each
   block, round-robin blocks until IQR/median <= 1% or the cap), with the `[timing.cuda]`
   settings of ci/run_config.toml except the per-case cap; one input set per variant (the
   engine's input-set rotation is not used here).

Per case it reports the median, IQR/median, achieved bandwidth = the byte model's bytes
(kernels/rmsnorm/model.py: x read, y written, w read, once each) / median, that as a percent
of the GPU's measured copy bandwidth (history/analysis/ceilings.toml, kind copy_tbps; none for
an unlisted GPU), the median over the baseline's (rmsnorm_torch), and on a GPU
`triton.testing.do_bench`'s median of the same call as a cross-check by a second method.

Writes under --out (default $OUT): rmsnorm_check.json (every figure, the environment, skips
with their reasons) and rmsnorm_check.log; prints the table last. Needs torch (and Triton
for rmsnorm_triton / rmsnorm_liger); never duckdb, streamlit or plotly.

    python3 scripts/rmsnorm_check.py --budget-s 540 --site DIR --out $OUT     # on the GPU
    python3 scripts/rmsnorm_check.py --smoke --out out/rmsnorm_smoke          # CPU, interpreter

--site DIR (repeatable) adds a folder that `pip install --target DIR` filled (liger-kernel,
quack-kernels and nvidia-cutlass-dsl) with site.addsitedir, which also runs the .pth files the
CUTLASS DSL wheels need. --smoke runs the `cpu` shapes on the CPU under TRITON_INTERPRET=1 with
a short timing cap: it checks that the script works, not how fast anything is.
"""

from __future__ import annotations

import argparse
import json
import os
import site
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANT_NAMES = ("rmsnorm_torch", "rmsnorm_triton", "rmsnorm_liger", "rmsnorm_quack")
BASELINE = "rmsnorm_torch"
COPY = "(copy x->y)"
SEEDS = (0, 1)
CALLS_PER_SEED = 2
BUDGET_MARGIN_S = 45.0  # stop starting groups this long before the budget: a group takes ~10-30 s
LOG_NAME, JSON_NAME = "rmsnorm_check.log", "rmsnorm_check.json"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/rmsnorm_check)")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget of the whole call")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--smoke", action="store_true", help="CPU, the `cpu` shapes, TRITON_INTERPRET=1, short caps")
    p.add_argument("--shapes", default=None, help="RMSNorm shape set (default: main; cpu with --smoke)")
    p.add_argument("--dtypes", default="fp16,bf16")
    p.add_argument("--variants", default=",".join(VARIANT_NAMES))
    p.add_argument("--time-cap-s", type=float, default=None, help="timing cap per case (default: run_config's)")
    p.add_argument("--site", action="append", default=[], help="extra site dir with liger/quack (repeatable)")
    return p.parse_args(argv)


class Log:
    def __init__(self, path: Path) -> None:
        self._file = path.open("w", encoding="utf-8")

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self._file.write(text + "\n")
        self._file.flush()


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("torch", "triton", "liger-kernel", "quack-kernels", "nvidia-cutlass-dsl", "nvidia-ml-py"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = None
    return found


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def check_variant(variant, case, device, tol) -> tuple[dict, object | None]:
    """Correctness over SEEDS; returns (record, the seed-0 Prepared to time, or None on failure)."""
    from attnwatch.kernels.correctness import compare
    from attnwatch.kernels.rmsnorm.model import reference64

    record = {"passed": True, "seeds": []}
    kept = None
    for seed in SEEDS:
        entry = {"seed": seed}
        record["seeds"].append(entry)
        try:
            prepared = variant.prepare(case, device, seed)
            _sync(device)
            inputs = tuple(prepared.inputs)
            originals = [t.clone() for t in inputs]
            ref = reference64(inputs, "fwd")
            worst = None
            for _ in range(CALLS_PER_SEED):
                if prepared.out is not None:
                    prepared.out.fill_(float("nan"))
                got = prepared.fn()
                got = prepared.out if got is None else got
                _sync(device)
                if tuple(got.shape) != tuple(ref.shape) or got.dtype != inputs[0].dtype:
                    raise ValueError(
                        f"output {tuple(got.shape)} {got.dtype}, expected {tuple(ref.shape)} {inputs[0].dtype}"
                    )
                cmp = compare(got, ref, tol.atol, tol.rtol)
                if worst is None or (cmp.tolerance_used or float("inf")) > (worst.tolerance_used or 0.0):
                    worst = cmp
            changed = not all(before.equal(now) for before, now in zip(originals, inputs))
            entry.update(
                max_abs_err=worst.max_abs_err,
                rel_err=worst.rel_err,
                tolerance_used=worst.tolerance_used,
                violations=worst.violations,
                nonfinite=worst.nonfinite,
                inputs_changed=changed,
            )
            entry["passed"] = worst.violations == 0 and worst.nonfinite == 0 and not changed
            del ref, originals
        except Exception as exc:  # a broken variant costs its case, never the run
            entry.update(passed=False, error=f"{type(exc).__name__}: {str(exc)[:500]}")
            prepared = None
        record["passed"] = record["passed"] and entry["passed"]
        if seed == SEEDS[0] and entry["passed"]:
            kept = prepared
    record["tolerance_used"] = max((s.get("tolerance_used") or 0.0) for s in record["seeds"])
    record["max_abs_err"] = max((s.get("max_abs_err") or 0.0) for s in record["seeds"])
    record["config"] = getattr(kept, "config", None)
    return record, (kept if record["passed"] else None)


def time_group(subjects: dict, device, config, log) -> dict:
    """The harness engine over `subjects` (name -> zero-argument call), interleaved."""
    import torch

    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import open_monitor
    from attnwatch.ci.timing.timers import CpuWallTimer, CudaEventTimer, L2Flusher, NoFlush
    from attnwatch.history.analysis.statistics import summarize

    if device.type == "cuda":
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        flusher = L2Flusher(device, int(config.flush_l2_multiple * l2))
        timer = CudaEventTimer(config.block_calls, streams=config.streams)
    else:
        flusher, timer = NoFlush(), CpuWallTimer()
    monitor = open_monitor(device.type)
    results = {}
    for key, fn in list(subjects.items()):
        try:
            warm_up(fn, config, timer, flusher)
        except Exception as exc:  # a subject that fails its warm-up is dropped with the error
            results[key] = {"error": f"warm-up: {type(exc).__name__}: {str(exc)[:300]}"}
            log(f"    {key}: {results[key]['error']}")
            del subjects[key]
    raws = measure_interleaved([Subject(k, fn) for k, fn in subjects.items()], config, timer, flusher, monitor)
    for key, raw in raws.items():
        if raw.error or not raw.samples_us:
            results[key] = {"error": raw.error or "no samples"}
            log(f"    {key}: timing failed: {raw.error}")
            continue
        summary = summarize(raw.samples_us)
        results[key] = {
            "median_us": summary.median_us,
            "p10_us": summary.p10_us,
            "p90_us": summary.p90_us,
            "rel_spread": summary.rel_spread,
            "n": summary.n,
            "converged": raw.converged,
            "throttled_samples": raw.throttled_samples,
            "throttle_reasons": raw.throttle_reasons,
            "sm_clock_mhz": [raw.sm_clock_mhz_before, raw.sm_clock_mhz_after],
            "guard_uncovered_blocks": raw.guard_uncovered_blocks,
            "timing_mode": raw.timing_mode,
        }
    if device.type == "cuda":
        _do_bench_cross_check(subjects, results)
    return results


def _do_bench_cross_check(subjects: dict, results: dict) -> None:
    """`triton.testing.do_bench`'s median beside the engine's: a second method on the default
    stream. The engine times on a pool of streams, so a library that launched on another
    stream than torch's current one would show here as a large disagreement."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return
    for key, fn in subjects.items():
        if "median_us" in results.get(key, {}):
            try:
                results[key]["do_bench_median_us"] = do_bench(fn, warmup=25, rep=100, return_mode="median") * 1000.0
            except Exception as exc:  # the cross-check must not cost the engine's figure
                results[key]["do_bench_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"


def copy_subject(x):
    """A device copy of x into a buffer of x's size: RMSNorm's bytes without the arithmetic or w."""
    import torch

    dst = torch.empty_like(x)

    def run():
        return dst.copy_(x)

    return run


def run_group(shape, dtype, variants, device, timing, tol, ceiling_tbps, log) -> dict:
    from attnwatch.kernels.availability import skip_reason
    from attnwatch.kernels.rmsnorm.model import bytes_moved, make_inputs
    from attnwatch.kernels.rmsnorm.records import rmsnorm_case

    nbytes = bytes_moved(shape, dtype, "fwd")
    group = {
        "shape": shape.id,
        "rows": shape.rows,
        "hidden": shape.hidden,
        "dtype": dtype,
        "bytes": nbytes,
        "variants": {},
    }
    to_time = {}
    for variant in variants:
        case = rmsnorm_case(variant.name, shape, dtype)
        reason = skip_reason(variant, case)
        if reason:
            group["variants"][variant.name] = {"skipped": reason}
            continue
        started = time.perf_counter()
        record, prepared = check_variant(variant, case, device, tol)
        record["check_s"] = time.perf_counter() - started
        group["variants"][variant.name] = record
        errors = [s["error"] for s in record["seeds"] if s.get("error")]
        log(
            f"    {variant.name}: {'passed' if record['passed'] else 'FAILED'} "
            f"(tolerance used {record['tolerance_used']:.2f}, {record['check_s']:.1f} s)"
            + (f": {errors[0]}" if errors else "")
        )
        if prepared is not None:
            to_time[variant.name] = prepared.fn
    if to_time:
        x, _ = make_inputs(shape, dtype, "fwd", device, 0)
        to_time[COPY] = copy_subject(x)
        timed = time_group(to_time, device, timing, log)
        base = timed.get(BASELINE, {}).get("median_us")
        copy_bytes = 2.0 * x.numel() * x.element_size()
        for name, result in timed.items():
            if "median_us" not in result:
                continue
            moved = copy_bytes if name == COPY else nbytes
            result["gbps"] = moved / (result["median_us"] * 1e-6) / 1e9
            result["pct_of_copy_ceiling"] = (100.0 * result["gbps"] / (ceiling_tbps * 1e3)) if ceiling_tbps else None
            result["x_baseline"] = result["median_us"] / base if base and name != COPY else None
            if name == COPY:
                group["copy"] = result
            else:
                group["variants"][name]["timing"] = result
    return group


def table(groups: list[dict], ceiling_tbps: float | None) -> str:
    head = (
        f"{'shape':<16} {'dtype':<5} {'variant':<15} {'correct':<12} {'median_us':>10} {'iqr/med':>8} "
        f"{'GB/s':>7} {'%copyBW':>8} {'x_base':>7} {'do_bench':>9}"
    )
    lines = [head, "-" * len(head)]
    for g in groups:
        rows = list(g["variants"].items()) + ([(COPY, {"timing": g["copy"]})] if "copy" in g else [])
        for name, rec in rows:
            if "skipped" in rec:
                lines.append(f"{g['shape']:<16} {g['dtype']:<5} {name:<15} skipped: {rec['skipped'][:70]}")
                continue
            correct = "-" if name == COPY else (f"ok {rec['tolerance_used']:.2f}" if rec["passed"] else "FAIL")
            t = rec.get("timing") or {}
            if "median_us" not in t:
                lines.append(f"{g['shape']:<16} {g['dtype']:<5} {name:<15} {correct:<12} {'-':>10}")
                continue
            pct = f"{t['pct_of_copy_ceiling']:.1f}" if t.get("pct_of_copy_ceiling") is not None else "-"
            xb = f"{t['x_baseline']:.3f}" if t.get("x_baseline") is not None else "-"
            db = f"{t['do_bench_median_us']:.2f}" if t.get("do_bench_median_us") is not None else "-"
            lines.append(
                f"{g['shape']:<16} {g['dtype']:<5} {name:<15} {correct:<12} {t['median_us']:>10.2f} "
                f"{100 * t['rel_spread']:>7.2f}% {t['gbps']:>7.0f} {pct:>8} {xb:>7} {db:>9}"
            )
    ceiling = f"{ceiling_tbps:.3f} TB/s (ceilings.toml copy_tbps)" if ceiling_tbps else "none recorded for this GPU"
    lines.append(
        f"bytes = x read + y written + w read; %copyBW against {ceiling}; do_bench = triton.testing.do_bench "
        "median (default stream), a cross-check of median_us"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    for folder in args.site:
        if not os.path.isdir(folder):
            print(f"rmsnorm_check: --site {folder}: no such folder; the packages it was to hold stay missing")
        site.addsitedir(os.path.abspath(folder))
    if args.smoke or args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports Triton
    sys.path.insert(0, str(REPO_ROOT))
    import torch

    from attnwatch.ci.run_config import timing_config
    from attnwatch.history.analysis.ceilings import find_ceiling
    from attnwatch.kernels.availability import device_summary
    from attnwatch.kernels.correctness import load_tolerances
    from attnwatch.kernels.rmsnorm.model import TOLERANCES_PATH
    from attnwatch.kernels.rmsnorm.shapes import shape_set

    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "rmsnorm_check")
    out.mkdir(parents=True, exist_ok=True)
    log = Log(out / LOG_NAME)
    kind = "cpu" if args.smoke else args.device
    if kind == "auto":
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(kind)
    shapes = shape_set(args.shapes or ("cpu" if args.smoke else "main"))
    dtypes = [d for d in args.dtypes.split(",") if d]
    variants = _variants([v for v in args.variants.split(",") if v])
    timing = timing_config(kind)
    cap = args.time_cap_s if args.time_cap_s is not None else (0.2 if args.smoke else None)
    timing = timing.with_overrides(time_cap_s=cap, max_samples=20 if args.smoke else None)
    gpu = torch.cuda.get_device_name(device) if kind == "cuda" else None
    ceiling = find_ceiling(gpu, "copy_tbps") if gpu else None
    tolerances = load_tolerances(TOLERANCES_PATH)
    report = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": device_summary(),
        "gpu": gpu,
        "versions": _versions(),
        "args": vars(args),
        "timing_config": timing.to_dict(),
        "copy_ceiling_tbps": ceiling.value if ceiling else None,
        "copy_ceiling_provenance": ceiling.provenance if ceiling else None,
        "tolerances": {k: {"atol": t.atol, "rtol": t.rtol} for k, t in tolerances.items()},
        "groups": [],
        "not_run": [],
        "group_errors": [],
    }
    log(f"rmsnorm_check: {len(shapes)} shapes x {len(dtypes)} dtypes on {report['device']}")
    for shape in shapes:
        for dtype in dtypes:
            if time.monotonic() - started > args.budget_s - BUDGET_MARGIN_S:
                report["not_run"].append(f"{shape.id}/{dtype}: budget")
                log(f"  {shape.id}/{dtype}: not run (budget of {args.budget_s:.0f} s)")
                continue
            log(f"  {shape.id} ({shape.rows} x {shape.hidden}) {dtype}")
            try:
                group = run_group(
                    shape, dtype, variants, device, timing, tolerances[dtype], ceiling.value if ceiling else None, log
                )
                report["groups"].append(group)
            except Exception as exc:  # e.g. out of memory for the inputs: the other groups still run
                report["group_errors"].append(f"{shape.id}/{dtype}: {type(exc).__name__}: {str(exc)[:300]}")
                log(f"    group failed: {report['group_errors'][-1]}")
            if kind == "cuda":
                torch.cuda.empty_cache()
            (out / JSON_NAME).write_text(json.dumps(report, indent=1, default=str))
    report["wall_s"] = time.monotonic() - started
    (out / JSON_NAME).write_text(json.dumps(report, indent=1, default=str))
    failed = [
        f"{g['shape']}/{g['dtype']}/{n}"
        for g in report["groups"]
        for n, r in g["variants"].items()
        if "skipped" not in r and not r["passed"]
    ]
    log(
        f"wall {report['wall_s']:.0f} s; {len(failed)} failed: {', '.join(failed) or 'none'}; "
        f"group errors: {'; '.join(report['group_errors']) or 'none'}; not run: {', '.join(report['not_run']) or 'none'}"
    )
    log(table(report["groups"], report["copy_ceiling_tbps"]))
    return 1 if failed or report["group_errors"] else 0


def _variants(names: list[str]) -> list:
    import importlib

    found = []
    for name in names:
        if name not in VARIANT_NAMES:
            raise SystemExit(f"rmsnorm_check: unknown variant {name!r}; known: {', '.join(VARIANT_NAMES)}")
        module = importlib.import_module(f"attnwatch.kernels.variants.{name}")
        found.extend(module.VARIANTS)
    return found


if __name__ == "__main__":
    sys.exit(main())
