"""Check and time the Triton FA2 forward's block configurations against SDPA on one GPU.

One invocation does everything a tuning session needs, so it fits one GPU job:

1. compile every candidate configuration for every (head dim, causal, dtype) in parallel
   worker processes (each also launches it once at a small shape, so a configuration that
   cannot build or crashes is dropped before the main process touches it);
2. for every shape of the chosen set (plus an odd-length shape, S=777, that exercises the
   boundary masks), dtype and causality: compare every candidate's output with the float64
   reference (output poisoned with NaN first; NaN never passes);
3. time the correct candidates and the SDPA flash and cuDNN backends round-robin (the same
   rounds, so clock drift hits all alike): L2 flushed before every call, one CUDA-event pair
   per call, median of the samples;
4. write everything to a JSON file and print a compact table last;
5. with --write-choices, record per named shape the configuration the tuner's rule
   (`tuner.pick`: configs.toml's bucket order, its tie margin) takes from these medians in
   kernels/triton/choices.toml, with the medians and the job's provenance: the table runs
   use instead of tuning in each process (kernels/triton/choices.py). Review its diff.

Candidates are the configs.toml configurations (default) or, with --explore, that list plus
the extra ones below. Run from the repository root: `python3 -m scripts.tune_triton`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict
from multiprocessing import get_context
from pathlib import Path

from attnwatch.kernels.inputs import make_inputs, make_output
from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import SHAPES, Shape, adhoc_shape, shape_set
from attnwatch.kernels.triton.choices import CHOICES_FILE
from attnwatch.kernels.triton.configs import BlockConfig, load_table, runs_exactly

L2_FLUSH_BYTES = 256 * 1024 * 1024  # > 4x the H200's 60 MiB L2
COMPILE_SEQ = 256  # compile-and-smoke-test length: a multiple of every block size


def _cfg(name, bm, bn, warps, stages, tma=False, ws=False, split=1, reason="exploration") -> BlockConfig:
    return BlockConfig(name, bm, bn, warps, stages, tma, ws, reason, split)


# Configurations timed with --explore beside configs.toml's. The first sweep on the H200 showed
# pipelining depth matters most (num_stages 2 -> 3 cost or saved up to 25%), BLOCK_M < 64 (no
# wgmma) and BLOCK_N = 128 at 2 stages lose everywhere, and warp_specialize either fails to
# compile on sm_90 (BLOCK_M = 64) or changes nothing (BLOCK_M = 128); so: deeper pipelines,
# split-KV for the small grids, and 8 warps on a 64-row tile.
EXPLORE = [
    _cfg("m64_n64_w4_s4", 64, 64, 4, 4),
    _cfg("m64_n64_w4_s5", 64, 64, 4, 5),
    _cfg("m64_n64_w4_s4_tma", 64, 64, 4, 4, tma=True),
    _cfg("m64_n64_w4_s5_tma", 64, 64, 4, 5, tma=True),
    _cfg("m64_n128_w4_s3", 64, 128, 4, 3),
    _cfg("m64_n128_w4_s3_tma", 64, 128, 4, 3, tma=True),
    _cfg("m64_n64_w8_s3", 64, 64, 8, 3),
    _cfg("m64_n64_w4_s3_split2", 64, 64, 4, 3, split=2),
    _cfg("m64_n64_w4_s3_split4", 64, 64, 4, 3, split=4),
    _cfg("m64_n64_w4_s4_split2", 64, 64, 4, 4, split=2),
    _cfg("m64_n64_w4_s3_tma_split2", 64, 64, 4, 3, tma=True, split=2),
    _cfg("m128_n64_w8_s3_split2", 128, 64, 8, 3, split=2),
    _cfg("m128_n64_w8_s4", 128, 64, 8, 4),
    _cfg("m128_n64_w8_s2_tma", 128, 64, 8, 2, tma=True),
]


def candidate_list(explore: bool) -> list[BlockConfig]:
    table = load_table()
    names = []
    for bucket in table.buckets:
        names += [n for n in bucket.candidates if n not in names]
    found = [table.configs[n] for n in names]
    if explore:
        found += [c for c in EXPLORE if c.name not in names]
    return found


# ---- stage 1: parallel compile + smoke launch ---------------------------------------------


def build_key(head_dim: int, causal: bool, dtype: str, seq_len: int) -> str:
    """Which compiled specialisation a problem uses: S a multiple of 16 or not (Triton
    specialises integer arguments on divisibility by 16; the EVEN_M/EVEN_N flags follow)."""
    even = "even" if seq_len % 16 == 0 and seq_len % 128 == 0 else f"s{seq_len}"
    return f"d{head_dim}/{'causal' if causal else 'noncausal'}/{dtype}/{even}"


def _compile_worker(
    config_dict: dict, head_dims: list[int], dtypes: list[str], odd_lengths: list[int], device: str
) -> dict:
    """In a fresh process: build and launch one config for every (D, causal, dtype, length kind)."""
    import itertools

    import torch

    from attnwatch.kernels.inputs import torch_dtype
    from attnwatch.kernels.triton.fa2_fwd import make_launcher

    config = BlockConfig(**config_dict)
    report = {}
    for head_dim, causal, dtype, seq_len in itertools.product(
        head_dims, (False, True), dtypes, (COMPILE_SEQ, *odd_lengths)
    ):
        key = build_key(head_dim, causal, dtype, seq_len)
        if not runs_exactly(config, causal, seq_len):
            report[key] = {"error": "cannot run this problem exactly"}
            continue
        started = time.perf_counter()
        try:
            q, k, v = (torch.randn(1, 2, seq_len, head_dim, device=device, dtype=torch_dtype(dtype)) for _ in range(3))
            out = torch.empty_like(q)
            run = make_launcher(q, k, v, out, causal, config)
            resources = run.compiled_resources() if device == "cuda" else {}
            run()
            if device == "cuda":
                torch.cuda.synchronize()
            ok = bool(torch.isfinite(out).all())
            report[key] = {
                **resources,
                "compile_s": time.perf_counter() - started,
                **({} if ok else {"error": "non-finite output at smoke shape"}),
            }
        except Exception as exc:  # recorded: this config is dropped for this build key
            report[key] = {
                "error": f"{type(exc).__name__}: {str(exc)[:400]}",
                "compile_s": time.perf_counter() - started,
            }
            if "illegal" in str(exc).lower():
                break  # the CUDA context is gone; the rest would fail for no reason
    return report


def compile_all(
    configs: list[BlockConfig], head_dims, dtypes, odd_lengths, device: str, workers: int, timeout_s: float
) -> dict:
    results: dict[str, dict] = {}
    ctx = get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = {
            pool.submit(_compile_worker, asdict(c), list(head_dims), list(dtypes), list(odd_lengths), device): c.name
            for c in configs
        }
        try:
            for fut in as_completed(futures, timeout=timeout_s):
                name = futures[fut]
                try:
                    results[name] = fut.result()
                except Exception as exc:
                    results[name] = {"*": {"error": f"worker died: {type(exc).__name__}: {exc}"}}
        except TimeoutError:
            for fut, name in futures.items():
                if name not in results:
                    results[name] = {"*": {"error": f"compile did not finish in {timeout_s:.0f} s"}}
                    fut.cancel()
    return results


# ---- stage 2+3: check and time -------------------------------------------------------------


def sdpa_callable(backend: str, q, k, v, causal: bool):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    pinned = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[backend]

    def run():
        with sdpa_kernel([pinned]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def check_output(out, ref) -> dict:
    import torch

    finite = bool(torch.isfinite(out).all())
    diff = out.double() - ref
    return {
        "finite": finite,
        "max_abs_err": float(diff.abs().nan_to_num(float("inf")).max()),
        "rel_err": float(diff.norm() / ref.norm()) if finite else float("inf"),
    }


def time_round_robin(fns: dict, rounds: int, flush_buf) -> dict:
    """Per-call times (microseconds) of every fn, interleaved round by round, L2 flushed before
    each call. CUDA events on a GPU; on the CPU (the --dry-run under the interpreter) wall clock."""
    import torch

    names = list(fns)
    cuda = flush_buf.is_cuda
    marks = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]  # rotate who goes first
        for n in order:
            flush_buf.zero_()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fns[n]()
                end.record()
                marks[n].append((start, end))
            else:
                started = time.perf_counter()
                fns[n]()
                marks[n].append((started, time.perf_counter()))
        if cuda and r % 16 == 15:
            torch.cuda.synchronize()
    if cuda:
        torch.cuda.synchronize()
        return {n: [s.elapsed_time(e) * 1e3 for s, e in marks[n]] for n in names}
    return {n: [(e - s) * 1e6 for s, e in marks[n]] for n in names}


def summarize(samples: list[float]) -> dict:
    ordered = sorted(samples)
    n = len(ordered)
    q = statistics.quantiles(ordered, n=10) if n >= 10 else [ordered[0]] * 9
    return {"n": n, "median_us": statistics.median(ordered), "p10_us": q[0], "p90_us": q[-1], "min_us": ordered[0]}


def gpu_snapshot() -> str:
    try:
        return subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,"
                "power.draw,clocks_throttle_reasons.active",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"


def recorded_args(args: list[str]) -> str:
    """The job's arguments as choices.toml records them: without --out, whose folder is the
    tuning machine's and says nothing about the choices."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            kept.append(arg)
    return " ".join(kept)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="main", help="shape set name (kernels.shapes)")
    parser.add_argument("--explore", action="store_true", help="also time the EXPLORE configs")
    parser.add_argument("--rounds", type=int, default=60, help="timed calls per callable per case")
    parser.add_argument("--workers", type=int, default=max(1, min(16, (os.cpu_count() or 2) - 1)))
    parser.add_argument("--budget-s", type=float, default=380.0, help="stop timing new cases after this")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for tune_triton.json")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--only", default="", help="comma-separated config names to keep (default: all)")
    parser.add_argument(
        "--write-choices",
        nargs="?",
        const=str(CHOICES_FILE),
        default=None,
        metavar="PATH",
        help="record the chosen configuration per named shape in this choices table "
        "(default kernels/triton/choices.toml)",
    )
    parser.add_argument("--commit", default=None, help="the commit tuned (default: git rev-parse HEAD)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="CPU check of this script under TRITON_INTERPRET=1 at tiny shapes (no SDPA)",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    import torch
    import triton

    from attnwatch.kernels.reference import reference_attention
    from attnwatch.kernels.triton.fa2_fwd import make_launcher

    dtypes = args.dtypes.split(",")
    if args.dry_run:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--dry-run needs TRITON_INTERPRET=1")
        device, flush_bytes = "cpu", 1 << 20
        shapes = [adhoc_shape(1, 1, 128, 64), adhoc_shape(1, 1, 77, 64)]
    else:
        device, flush_bytes = "cuda", L2_FLUSH_BYTES
        shapes = shape_set(args.shapes, Shape) + [adhoc_shape(2, 4, 777, 64), adhoc_shape(1, 4, 777, 128)]
    head_dims = sorted({s.head_dim for s in shapes})
    odd_lengths = sorted({s.seq_len for s in shapes if "even" not in build_key(64, False, "fp16", s.seq_len)})
    configs = candidate_list(args.explore)
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {c.name for c in configs})
        if unknown:
            parser.error(f"--only: unknown config(s) {', '.join(unknown)}")
        configs = [c for c in configs if c.name in wanted]
    if args.dry_run:  # the interpreter runs small blocks in reasonable time only
        configs = [c for c in configs if c.block_m * c.block_n <= 64 * 64]
    result: dict = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpu": torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "smi_before": gpu_snapshot() if device == "cuda" else "",
        "configs": [asdict(c) for c in configs],
        "cases": [],
    }
    out_path = Path(args.out) / "tune_triton.json"

    def save():
        out_path.write_text(json.dumps(result, indent=1))

    builds = compile_all(configs, head_dims, dtypes, odd_lengths, device, args.workers, timeout_s=args.budget_s * 0.4)
    result["builds"] = builds
    result["compile_wall_s"] = time.perf_counter() - t0
    print(f"compiled {len(configs)} configs in {result['compile_wall_s']:.1f} s", flush=True)
    save()

    def built(config, head_dim, causal, dtype, seq_len) -> bool:
        entry = builds.get(config.name, {})
        key = build_key(head_dim, causal, dtype, seq_len)
        return key in entry and "error" not in entry[key]

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    flush_buf = torch.empty(flush_bytes // 4, dtype=torch.int32, device=device)
    table_rows = []
    for shape in shapes:
        for dtype in dtypes:
            for causal in (False, True):
                if time.perf_counter() - t0 > args.budget_s:
                    result.setdefault("skipped_for_time", []).append(f"{shape.id}/{dtype}/{causal}")
                    continue
                case = Case("triton_fa2", shape, dtype, causal)
                q, k, v = make_inputs(case, device, 0)
                ref = reference_attention(q, k, v, causal)
                entry = {
                    "case": case.id,
                    "shape": asdict(shape),
                    "flops": case.flops,
                    "candidates": {},
                    "baselines": {},
                }
                fns = {}
                for config in configs:
                    if not runs_exactly(config, causal, shape.seq_len):
                        continue
                    if not built(config, shape.head_dim, causal, dtype, shape.seq_len):
                        entry["candidates"][config.name] = {"error": "build/smoke failed"}
                        continue
                    try:
                        out = make_output(case, device)
                        out.fill_(float("nan"))
                        run = make_launcher(q, k, v, out, causal, config)
                        run()
                        sync()
                        check = check_output(out, ref)
                        out.fill_(float("nan"))  # second call into a poisoned buffer
                        run()
                        sync()
                        check2 = check_output(out, ref)
                        check = max((check, check2), key=lambda c: c["rel_err"])
                    except Exception as exc:
                        entry["candidates"][config.name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                        continue
                    tol = 2e-3 if dtype == "fp16" else 1.5e-2
                    check["passed"] = check["finite"] and check["rel_err"] < tol
                    entry["candidates"][config.name] = {"check": check}
                    if check["passed"]:
                        fns[config.name] = run
                if shape.id in SHAPES and device == "cuda":
                    for backend in ("flash", "cudnn"):
                        fn = sdpa_callable(backend, q, k, v, causal)
                        try:
                            fn()
                            sync()
                            fns[f"sdpa_{backend}"] = fn
                        except Exception as exc:
                            entry["baselines"][f"sdpa_{backend}"] = {"error": str(exc)[:300]}
                rounds = args.rounds if shape.id in SHAPES else min(args.rounds, max(10, args.rounds // 4))
                times = time_round_robin(fns, rounds, flush_buf) if fns else {}
                for name, samples in times.items():
                    stats = summarize(samples)
                    stats["tflops"] = case.flops / (stats["median_us"] * 1e-6) / 1e12
                    if name.startswith("sdpa_"):
                        entry["baselines"][name] = stats
                    else:
                        entry["candidates"][name].update(stats)
                timed = {n: c for n, c in entry["candidates"].items() if "median_us" in c}
                best = min(timed, key=lambda n: timed[n]["median_us"]) if timed else None
                entry["best"] = best
                result["cases"].append(entry)
                save()
                base = entry["baselines"]
                row = {"case": f"{shape.id}/{dtype}/{'c' if causal else 'nc'}", "best": best}
                if best:
                    row["us"] = timed[best]["median_us"]
                    row["tflops"] = timed[best]["tflops"]
                    row["rel_err"] = entry["candidates"][best]["check"]["rel_err"]
                    for b in ("sdpa_flash", "sdpa_cudnn"):
                        if "median_us" in base.get(b, {}):
                            row[b] = base[b]["median_us"]
                            row[f"x_{b}"] = row["us"] / base[b]["median_us"]
                table_rows.append(row)
                print(json.dumps(row), flush=True)
                del q, k, v, ref, fns
    result["smi_after"] = gpu_snapshot() if device == "cuda" else ""
    result["wall_s"] = time.perf_counter() - t0
    save()

    # Per-config ranking (sum of the ratio to the per-case best: lower is better everywhere).
    ranks: dict[str, list[float]] = {}
    for entry in result["cases"]:
        timed = {n: c["median_us"] for n, c in entry["candidates"].items() if "median_us" in c}
        if timed:
            best = min(timed.values())
            for n, us in timed.items():
                ranks.setdefault(n, []).append(us / best)
    print("\nconfig ranking (geomean of time / per-case best, cases where it ran):")
    for n, ratios in sorted(ranks.items(), key=lambda kv: math.exp(statistics.fmean(map(math.log, kv[1])))):
        print(f"  {n:26s} {math.exp(statistics.fmean(map(math.log, ratios))):6.3f}  ({len(ratios)} cases)")
    print(
        f"\n{'case':34s} {'best config':24s} {'us':>8s} {'TFLOPS':>7s} {'flash':>8s} {'cudnn':>8s} {'/flash':>7s} {'/cudnn':>7s} {'relerr':>8s}"
    )
    for r in table_rows:
        if not r.get("best"):
            print(f"{r['case']:34s} NO CORRECT CONFIG")
            continue
        print(
            f"{r['case']:34s} {r['best']:24s} {r['us']:8.2f} {r['tflops']:7.1f} "
            f"{r.get('sdpa_flash', float('nan')):8.2f} {r.get('sdpa_cudnn', float('nan')):8.2f} "
            f"{r.get('x_sdpa_flash', float('nan')):7.3f} {r.get('x_sdpa_cudnn', float('nan')):7.3f} {r['rel_err']:8.1e}"
        )
    print(f"wall {result['wall_s']:.0f} s; smi before: {result['smi_before']}; after: {result['smi_after']}")
    if args.write_choices:
        from attnwatch.scripts.tune_choices import write_choices

        write_choices(
            Path(args.write_choices),
            result,
            rounds=args.rounds,
            commit=args.commit,
            job="python3 -m scripts.tune_triton " + recorded_args(argv if argv is not None else sys.argv[1:]),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
