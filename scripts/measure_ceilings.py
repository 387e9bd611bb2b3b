"""Measure a GPU's roofline ceilings and print them as history/analysis/ceilings.toml entries.

Two ceilings, the same recipe that gave the H200's entries:
  - matmul_tflops: a dense 8192x8192x8192 GEMM (torch.matmul, so cuBLAS) per dtype,
    2*M*N*K flops over the median time of `triton.testing.do_bench` (which flushes L2 and
    times each call with CUDA events);
  - copy_tbps: a device-to-device copy of a buffer far larger than L2 (2 GiB), bytes read +
    bytes written over the median time.
A ceiling is what this GPU reached with a vendor-tuned kernel, not a datasheet peak: that is
the roof a kernel can be held against. The printed block names the GPU, SM count, driver,
SM clock after the run and torch version, and is meant to be pasted into history/analysis/ceilings.toml
as measured; `--out` also writes the raw figures as JSON.

Run on the GPU machine from the repository root:  python3 scripts/measure_ceilings.py --out $OUT
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
from pathlib import Path

GEMM_SIZE = 8192
COPY_BYTES = 2 * 1024**3
REPEATS = 5


def _median_ms(fn) -> float:
    """Median of REPEATS do_bench medians: one do_bench call is itself a median of many calls."""
    from triton.testing import do_bench

    return statistics.median(do_bench(fn, warmup=100, rep=500, return_mode="median") for _ in range(REPEATS))


def gemm_tflops(dtype) -> float:
    import torch

    a = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=dtype)
    b = torch.randn(GEMM_SIZE, GEMM_SIZE, device="cuda", dtype=dtype)
    ms = _median_ms(lambda: torch.matmul(a, b))
    return 2 * GEMM_SIZE**3 / (ms * 1e-3) / 1e12


def copy_tbps() -> float:
    import torch

    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = _median_ms(lambda: dst.copy_(src))
    return 2 * COPY_BYTES / (ms * 1e-3) / 1e12


def _smi(field: str) -> str:
    out = subprocess.run(
        ["nvidia-smi", "-i", "0", f"--query-gpu={field}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "unknown"


def main() -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for ceilings.json")
    args = parser.parse_args()
    props = torch.cuda.get_device_properties(0)
    figures = {
        ("matmul_tflops", "fp16"): gemm_tflops(torch.float16),
        ("matmul_tflops", "bf16"): gemm_tflops(torch.bfloat16),
        ("copy_tbps", "any"): copy_tbps(),
    }
    where = (
        f"{props.name} ({props.multi_processor_count} SMs, driver {_smi('driver_version')}, "
        f"SM clock {_smi('clocks.sm')} MHz), torch {torch.__version__}, {datetime.date.today().isoformat()}"
    )
    how = {
        "matmul_tflops": f"Dense {{dtype}} GEMM {GEMM_SIZE}x{GEMM_SIZE}x{GEMM_SIZE} (torch.matmul, cuBLAS), "
        f"median of {REPEATS} triton.testing.do_bench medians.",
        "copy_tbps": f"Device-to-device copy of a {COPY_BYTES // 1024**3} GiB buffer, bytes read + written "
        f"over the median of {REPEATS} triton.testing.do_bench medians.",
    }
    for (kind, dtype), value in figures.items():
        print(
            f'\n[[ceiling]]\ngpu = "{props.name}"\nkind = "{kind}"\ndtype = "{dtype}"\nvalue = {value!r}\n'
            f'how = "{how[kind].format(dtype=dtype)}"\n'
            f'measured = "{where}; scripts/measure_ceilings.py."'
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        rows = [
            {"gpu": props.name, "kind": k, "dtype": d, "value": v, "measured": where} for (k, d), v in figures.items()
        ]
        (args.out / "ceilings.json").write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
