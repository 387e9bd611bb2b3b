"""Tile sweep of the CUTLASS 3-kernel variants on one GPU, against `sdpa` and `torch_3op`.

For every (shape, dtype, causal) group of the chosen shape set, the sweep prepares
`sdpa` (default dispatch: the gap-to-SDPA baseline), `torch_3op` (cuBLAS + torch softmax:
seed 000's "cuBLAS 3-kernel") and every `cutlass_3k_*` variant, then times them together
with the project's own timing engine (ci.timing): round-robin interleaved blocks, L2
flushed before every call, CUDA events per call, at least 100 calls per variant
(run_config.toml's min_samples), so the baseline is measured in the same run, on the same
GPU, interleaved. Cases under the graph threshold are also timed as CUDA-graph replays
(launch overhead removed), beside the headline per-call median.

    python scripts/bench_cutlass_sweep.py --shapes main --dtypes fp16 --out DIR

Writes DIR/cutlass_sweep.json (every sample summary, the GPU and its clocks) and prints one
markdown table per shape: median, p10-p90, us/head, TFLOPS, gap-to-SDPA. With
`--ncu-pass` it instead runs each variant once between cudaProfilerStart/Stop, for
`ncu --profile-from-start off` to profile exactly those kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from attnwatch.ci.run_config import default, timing_config
from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
from attnwatch.ci.timing.gpu_state import open_monitor
from attnwatch.ci.timing.graphs import graph_replay_us
from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher
from attnwatch.history.analysis.statistics import summarize
from attnwatch.kernels.availability import device_summary, skip_reason
from attnwatch.kernels.cases import Case
from attnwatch.kernels.registry import all_variants, get
from attnwatch.kernels.shapes import SHAPES, Shape, shape_set

BASELINES = ("sdpa", "torch_3op")
TIMING_SEED = int(default("timing_seed"))  # the inputs `attnwatch run` times


def variant_names(only: list[str] | None) -> list[str]:
    cutlass = [v.name for v in all_variants() if v.family == "cutlass"]
    chosen = [n for n in cutlass if not only or n in only]
    return [*BASELINES, *chosen]


def time_group(names: list[str], shape, dtype: str, causal: bool, config, device, monitor) -> list[dict]:
    import torch

    rows, subjects, prepared = [], [], {}
    for name in names:
        case = Case(name, shape, dtype, causal)
        reason = skip_reason(name, case)
        if reason:
            rows.append({"case_id": case.id, "variant": name, "skipped": reason})
            continue
        prepared[name] = get(name).prepare(case, device, TIMING_SEED)
        subjects.append(Subject(case.id, prepared[name].fn))
    l2 = torch.cuda.get_device_properties(device).L2_cache_size
    flusher = L2Flusher(device, int(config.flush_l2_multiple * l2))
    timer = CudaEventTimer(config.block_calls)
    for subject in subjects:
        warm_up(subject.fn, config, timer, flusher)
    raw = measure_interleaved(subjects, config, timer, flusher, monitor)
    baseline = None
    for subject in subjects:
        name = subject.key.split("/")[0]
        r = raw[subject.key]
        if r.error or not r.samples_us:
            rows.append({"case_id": subject.key, "variant": name, "error": r.error or "no samples"})
            continue
        s = summarize(r.samples_us)
        case = Case(name, shape, dtype, causal)
        row = {
            "case_id": subject.key, "variant": name, "shape": shape.id, "dtype": dtype, "causal": causal,
            **dataclasses.asdict(s), "converged": r.converged, "throttled_samples": r.throttled_samples,
            "sm_clock_mhz_before": r.sm_clock_mhz_before, "sm_clock_mhz_after": r.sm_clock_mhz_after,
            "us_per_head": s.median_us / (shape.batch * shape.heads),
            "tflops": case.flops / (s.median_us * 1e-6) / 1e12,
            "info": {k: v for k, v in prepared[name].info.items() if isinstance(v, (int, float, str, list))},
        }
        if s.median_us < config.graph_threshold_us:
            row["graph_median_us"], row["graph_note"] = graph_replay_us(
                subject.fn, flusher, config.graph_calls, config.graph_replays)
        if name == "sdpa":
            baseline = s.median_us
        rows.append(row)
    for row in rows:
        if baseline and "median_us" in row:
            row["gap_to_sdpa"] = row["median_us"] / baseline
    prepared.clear()
    torch.cuda.empty_cache()
    return rows


def print_tables(rows: list[dict]) -> None:
    shapes = list(dict.fromkeys(r["case_id"].split("/")[1] for r in rows))
    for shape_id in shapes:
        s = SHAPES.get(shape_id)
        dims = f" (B={s.batch}, H={s.heads}, S={s.seq_len}, D={s.head_dim})" if s else ""
        print(f"\n#### {shape_id}{dims}\n")
        print("| variant | dtype | causal | median us | p10-p90 us | n | us/head | TFLOPS | gap-to-SDPA | graph us |")
        print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            if r["case_id"].split("/")[1] != shape_id:
                continue
            _, _, dtype, causal = r["case_id"].split("/")
            if "median_us" not in r:
                print(f"| {r['variant']} | {dtype} | {causal} | {r.get('skipped') or r.get('error')} | | | | | | |")
                continue
            graph = f"{r['graph_median_us']:.1f}" if r.get("graph_median_us") else ""
            print(f"| {r['variant']} | {dtype} | {causal} | {r['median_us']:.1f} | {r['p10_us']:.1f}-{r['p90_us']:.1f} "
                  f"| {r['n']} | {r['us_per_head']:.3f} | {r['tflops']:.1f} | {r.get('gap_to_sdpa', float('nan')):.2f} | {graph} |")


def ncu_pass(names: list[str], shape, dtype: str, causal: bool, device) -> None:
    """Prepare everything, then run each variant once inside the profiler window, in order."""
    import torch

    prepared = []
    for name in names:
        case = Case(name, shape, dtype, causal)
        if skip_reason(name, case):
            continue
        p = get(name).prepare(case, device, TIMING_SEED)
        p.fn()  # first call (lazy init of cuBLAS handles etc.) outside the window
        prepared.append((name, p))
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for name, p in prepared:
        torch.cuda.nvtx.range_push(name)
        p.fn()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.profiler.stop()
    print("profiled, in order:", ", ".join(n for n, _ in prepared))


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="main", help="shape set name, or comma-separated shape ids")
    parser.add_argument("--dtypes", nargs="+", default=["fp16"])
    parser.add_argument("--causal", choices=("no", "yes", "both"), default="both")
    parser.add_argument("--variants", nargs="*", help="cutlass variants to include (default: all)")
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--ncu-pass", action="store_true")
    parser.add_argument("--time-cap-s", type=float, help="per-case timing cap (default: run_config.toml's); "
                        "a case stopped by it before min_samples shows its smaller n in the table")
    args = parser.parse_args(argv)

    if not torch.cuda.is_available():
        print("the sweep needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    shapes = shape_set(args.shapes, Shape) if "," not in args.shapes and args.shapes not in SHAPES else \
        [SHAPES[s] for s in args.shapes.split(",")]
    causals = {"no": [False], "yes": [True], "both": [False, True]}[args.causal]
    names = variant_names(args.variants)
    if args.ncu_pass:
        ncu_pass(names, shapes[0], args.dtypes[0], causals[0], device)
        return 0

    config = timing_config("cuda")
    if args.time_cap_s is not None:
        config = dataclasses.replace(config, time_cap_s=args.time_cap_s)
    monitor = open_monitor("cuda")
    started = time.time()
    rows = []
    for shape in shapes:
        for dtype in args.dtypes:
            for causal in causals:
                rows.extend(time_group(names, shape, dtype, causal, config, device, monitor))
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "device": device_summary(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "started_unix": started, "seconds": time.time() - started, "timing_config": config.to_dict(), "rows": rows,
    }
    (args.out / "cutlass_sweep.json").write_text(json.dumps(record, indent=1))
    print(f"device: {record['device']}  ({record['seconds']:.0f} s)")
    print_tables(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
