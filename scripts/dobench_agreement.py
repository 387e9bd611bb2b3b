"""The harness's median against triton.testing.do_bench (and do_bench_cudagraph), repeated.

On a GPU host:

    PYTHONPATH=. python3 scripts/dobench_agreement.py --out $OUT

SDPA at B=4, H=16, D=64 fp16, S=1024 and 2048: per S, five alternations of one harness
measurement (ci.timing.sampler.measure_interleaved with the run's timing settings, L2 flushed)
and one do_bench(warmup=50, rep=300) and do_bench_cudagraph(rep=300) median each. Prints one
line per alternation; writes dobench_probe.json under --out. docs/benchmarks.md ("Harness
noise, cost and agreement") records what it showed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--alternations", type=int, default=5)
    args = parser.parse_args()

    import torch
    import triton.testing

    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NvmlMonitor
    from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher

    out = {}
    for seq in (1024, 2048):
        q, k, v = (torch.randn(4, 16, seq, 64, device="cuda", dtype=torch.float16) for _ in range(3))

        def fn():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        config = timing_config("cuda")
        flusher = L2Flusher(torch.device("cuda"), 4 * torch.cuda.get_device_properties(0).L2_cache_size)
        timer = CudaEventTimer(config.block_calls)
        warm_up(fn, config, timer, flusher)
        rows = []
        for _ in range(args.alternations):
            measured = measure_interleaved([Subject("a", fn)], config, timer, flusher, NvmlMonitor())["a"]
            ours = statistics.median(measured.samples_us)
            theirs = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1000
            graphed = triton.testing.do_bench_cudagraph(fn, rep=300, return_mode="median") * 1000
            rows.append({"harness_us": ours, "do_bench_us": theirs, "do_bench_cudagraph_us": graphed})
            print(seq, f"harness {ours:.2f}  do_bench {theirs:.2f}  ratio {ours / theirs:.3f}  cudagraph {graphed:.2f}",
                  flush=True)
        out[seq] = rows
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "dobench_probe.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
