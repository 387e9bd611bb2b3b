"""Benchmark the hand-written CUDA variants against sdpa_flash, interleaved, on one GPU.

Why a separate script: the CUDA kernels' speed target (cuda_wmma within 4x of sdpa_flash at the
`main` shapes) is shown by a measurement anyone can rerun, whose output goes in
docs/benchmarks.md with the machine, date and commit.

Method (docs/design.md, "Measurement recipe"): every variant is prepared (inputs, compile, load)
outside the timed region and warmed up; then, round-robin over the variants of one case,
each call is preceded by an L2 flush (writing a 256 MiB buffer, several times the H200's
50 MiB L2) and bracketed by CUDA events on the current stream. The headline is the median
of `--calls` per-call times; p10/p90 show the spread. The SM clock (NVML) is read before
and after each case so a throttled case is visible. TFLOPS = 4*B*H*S^2*D / t, halved when
causal; us/head = t / (B*H); ratio = t / t(sdpa_flash) of the same case, same process.

Usage: python scripts/bench_cuda_kernels.py --shapes main --json results.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from attnwatch.kernels import registry  # noqa: E402
from attnwatch.kernels.availability import device_summary, skip_reason  # noqa: E402
from attnwatch.kernels.cases import Case  # noqa: E402
from attnwatch.kernels.correctness import check_case  # noqa: E402
from attnwatch.kernels.shapes import Shape, shape_set  # noqa: E402

FLUSH_BYTES = 256 * 1024 * 1024
DEFAULT_VARIANTS = ("sdpa_flash", "cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync")
BASELINE = "sdpa_flash"


def sm_clock_reader():
    """A function returning the SM clock in MHz (NVML), or None when NVML is unavailable."""
    try:
        import pynvml
    except ImportError:
        return lambda: None
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    position = fraction * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def measure_case(prepared: dict, calls: int, warmup: int, flush) -> dict[str, list[float]]:
    """Per-call milliseconds for every prepared variant, interleaved round-robin."""
    import torch

    for fn in prepared.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    names = list(prepared)
    events = {n: [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(calls)] for n in names}
    for i in range(calls):
        order = names[i % len(names):] + names[: i % len(names)]  # rotate who goes first
        for name in order:
            flush()
            start, end = events[name][i]
            start.record()
            prepared[name]()
            end.record()
    torch.cuda.synchronize()
    return {n: [s.elapsed_time(e) for s, e in events[n]] for n in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="main", help="shape set name (kernels/shapes.py)")
    parser.add_argument("--variants", default=",".join(DEFAULT_VARIANTS))
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write every sample and summary here")
    parser.add_argument("--no-check", action="store_true",
                        help="skip the float64-reference check (seed 0) run before timing each case")
    args = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    flush = flush_buffer.zero_
    clock = sm_clock_reader()
    variants = [registry.get(n) for n in args.variants.split(",")]
    record = {"device": device_summary(), "calls": args.calls, "warmup": args.warmup,
              "flush_bytes": FLUSH_BYTES, "builds": {}, "cases": []}
    for v in variants:
        if v.build is not None:
            report = v.build()
            record["builds"][v.name] = {"ok": report.ok, "target": report.target,
                                        "compile_seconds": report.compile_seconds, "error": report.error,
                                        "kernels": report.config.get("kernels", {})}

    rows = []
    for shape in shape_set(args.shapes, Shape):
        for dtype in args.dtypes.split(","):
            for causal in (False, True):
                prepared, skipped, checks = {}, {}, {}
                for v in variants:
                    case = Case(v.name, shape, dtype, causal)
                    reason = skip_reason(v, case)
                    if reason:
                        skipped[v.name] = reason
                        continue
                    if not args.no_check:
                        # A time is only worth reporting for a kernel that computes attention.
                        result = check_case(v, case, device, seeds=(0,), calls=1)[0]
                        checks[v.name] = result
                        if not result.passed:
                            skipped[v.name] = f"failed correctness: {result.error}"
                            continue
                    prepared[v.name] = v.prepare(case, device, 0).fn
                clock_before = clock()
                samples = measure_case(prepared, args.calls, args.warmup, flush)
                clock_after = clock()
                flops = shape.flops(causal)
                base = statistics.median(samples[BASELINE]) if BASELINE in samples else None
                for name, ms in samples.items():
                    median_ms = statistics.median(ms)
                    row = {
                        "variant": name, "shape": shape.id, "dtype": dtype, "causal": causal,
                        "median_us": median_ms * 1e3, "p10_us": percentile(ms, 0.1) * 1e3,
                        "p90_us": percentile(ms, 0.9) * 1e3, "n": len(ms),
                        "us_per_head": median_ms * 1e3 / (shape.batch * shape.heads),
                        "tflops": flops / (median_ms * 1e-3) / 1e12,
                        "ratio_to_sdpa_flash": median_ms / base if base else None,
                        "sm_clock_mhz_before": clock_before, "sm_clock_mhz_after": clock_after,
                        "max_abs_err": checks[name].max_abs_err if name in checks else None,
                    }
                    rows.append(row)
                    record["cases"].append({**row, "samples_ms": ms})
                for name, reason in skipped.items():
                    record["cases"].append({"variant": name, "shape": shape.id, "dtype": dtype,
                                            "causal": causal, "skipped": reason})
                del prepared
                torch.cuda.empty_cache()

    if args.json:
        args.json.write_text(json.dumps(record, indent=1))
    print(record["device"])
    for name, build in record["builds"].items():
        for entry, usage in build["kernels"].items():
            print(f"build {name:18s} {entry:30s} regs={usage['registers']:3d} "
                  f"smem={usage['static_smem_bytes'] + usage['dynamic_smem_bytes']:6d}B "
                  f"spill_st={usage['spill_store_bytes']} spill_ld={usage['spill_load_bytes']}")
    print(f"{'shape':16s} {'dtype':5s} {'causal':6s} {'variant':18s} {'median_us':>10s} {'p10':>9s} {'p90':>9s} "
          f"{'us/head':>8s} {'TFLOPS':>7s} {'x_flash':>7s} {'max_err':>8s} {'MHz':>9s}")
    for r in rows:
        ratio = f"{r['ratio_to_sdpa_flash']:.2f}" if r["ratio_to_sdpa_flash"] else "-"
        err = f"{r['max_abs_err']:.1e}" if r["max_abs_err"] is not None else "-"
        print(f"{r['shape']:16s} {r['dtype']:5s} {str(r['causal']):6s} {r['variant']:18s} {r['median_us']:10.1f} "
              f"{r['p10_us']:9.1f} {r['p90_us']:9.1f} {r['us_per_head']:8.3f} {r['tflops']:7.1f} {ratio:>7s} {err:>8s} "
              f"{r['sm_clock_mhz_before']}/{r['sm_clock_mhz_after']}")
    for case in record["cases"]:
        if "skipped" in case:
            print(f"skipped {case['variant']}/{case['shape']}/{case['dtype']}/causal={case['causal']}: {case['skipped']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
