"""Is a stored float64 reference faster to read back than to compute? Measured per shape, on a GPU.

For each attention shape of a set (default: the pr set), dtype and mode, one seed: the float64
reference computed from the seed's inputs (kernels.reference, synchronised), then the same
reference through kernels.reference_cache twice in a fresh cache folder: the first call
computes and stores it, the second reads it back (page cache warm, as on a runner after the
restore step). Prints one JSON line per case and a summary; the median of `repeats` timings each.

    python scripts/reference_cache_check.py [--shapes pr] [--repeats 5] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def _timed(fn, repeats: int, sync) -> float:
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    import torch

    from attnwatch.kernels import reference_cache
    from attnwatch.kernels.cases import Case
    from attnwatch.kernels.operators import get_operator
    from attnwatch.kernels.shapes import Shape, shape_set

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="pr")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    attention = get_operator("attention")
    rows = []
    for shape in shape_set(args.shapes, Shape):
        for dtype in ("fp16", "bf16"):
            for mode in ("noncausal", "causal"):
                case = Case("sdpa", shape, dtype, mode=mode)
                inputs = attention.make_inputs(shape, dtype, mode, device, 0)
                compute_s = _timed(lambda: attention.reference64(inputs, mode), args.repeats, sync)
                with tempfile.TemporaryDirectory() as folder:
                    directory = Path(folder)
                    reference_cache.cached_reference(attention, case, inputs, 0, directory=directory)
                    stored = any(directory.glob(f"*{reference_cache.SUFFIX}"))
                    read_s = _timed(
                        lambda: reference_cache.cached_reference(attention, case, inputs, 0, directory=directory),
                        args.repeats,
                        sync,
                    )
                row = {
                    "case": f"{shape.id}/{dtype}/{mode}",
                    "output_mib": shape.batch * shape.heads * shape.seq_len * shape.head_dim * 8 / 2**20,
                    "compute_s": compute_s,
                    "cached_call_s": read_s,
                    "stored": stored,
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "compute_s_total": sum(r["compute_s"] for r in rows),
        "cached_call_s_total": sum(r["cached_call_s"] for r in rows),
        "cases": rows,
    }
    print(json.dumps({k: v for k, v in summary.items() if k != "cases"}))
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
