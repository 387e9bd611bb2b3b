"""Measure the roofline ceilings of the GPU this runs on and print them as history/ceilings.toml entries.

    python scripts/measure_ceilings.py [--device 0] [--json OUT]

The same method as the shipped H200 entries (history/ceilings.toml), so roofs of different GPUs
compare: dense GEMM 8192x8192x8192 through torch.matmul (cuBLAS) for fp16 and bf16, and a
device-to-device copy of a buffer far larger than L2 (bytes read + written over the time), each
timed with triton.testing.do_bench and its median taken. What it prints is a measurement with
its provenance (GPU, SMs, driver, SM clock, torch, date); append it to history/ceilings.toml by
hand after reading it, since that file is what CI and the dashboard trust. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from datetime import datetime, timezone

GEMM_N = 8192
COPY_BYTES = 4 * 2**30  # 4 GiB: far beyond any L2


def _smi(device: int) -> dict[str, str]:
    fields = ("name", "driver_version", "clocks.current.sm", "clocks.max.sm")
    out = subprocess.run(["nvidia-smi", f"--id={device}", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout.strip().split(", ")
    return dict(zip(fields, out))


def measure(device: int) -> dict:
    import torch
    from triton.testing import do_bench

    torch.cuda.set_device(device)
    found = {}
    for dtype, name in ((torch.float16, "fp16"), (torch.bfloat16, "bf16")):
        a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype)
        b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=dtype)
        ms = do_bench(lambda: torch.matmul(a, b), warmup=100, rep=1000, return_mode="median")
        found[f"gemm_{name}_{GEMM_N}_tflops"] = 2.0 * GEMM_N**3 / (ms * 1e-3) / 1e12
        del a, b
    src = torch.empty(COPY_BYTES // 2, device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    ms = do_bench(lambda: dst.copy_(src), warmup=25, rep=500, return_mode="median")
    found["d2d_copy_TBps"] = 2.0 * src.numel() / (ms * 1e-3) / 1e12
    props = torch.cuda.get_device_properties(device)
    return {"ceilings": found, "sms": props.multi_processor_count, "torch": torch.__version__}


def toml_entries(gpu: str, result: dict, where: str) -> str:
    c = result["ceilings"]
    rows = [
        ("matmul_tflops", "fp16", c[f"gemm_fp16_{GEMM_N}_tflops"],
         f"Dense fp16 GEMM {GEMM_N}x{GEMM_N}x{GEMM_N} (torch.matmul, cuBLAS), triton.testing.do_bench median time."),
        ("matmul_tflops", "bf16", c[f"gemm_bf16_{GEMM_N}_tflops"],
         f"Dense bf16 GEMM {GEMM_N}x{GEMM_N}x{GEMM_N} (torch.matmul, cuBLAS), triton.testing.do_bench median time."),
        ("copy_tbps", "any", c["d2d_copy_TBps"],
         "Device-to-device copy of a buffer far larger than L2, bytes read + written over the median time."),
    ]
    return "\n".join(
        f'[[ceiling]]\ngpu = "{gpu}"\nkind = "{kind}"\ndtype = "{dtype}"\nvalue = {value!r}\nhow = "{how}"\nmeasured = "{where}"\n'
        for kind, dtype, value, how in rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=int, default=0, help="CUDA device index (as nvidia-smi numbers it)")
    parser.add_argument("--json", help="also write the raw figures and the environment here")
    args = parser.parse_args(argv)
    smi = _smi(args.device)
    result = measure(args.device)
    date = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    where = (f"{smi['name']} ({result['sms']} SMs, driver {smi['driver_version']}, SM clock {smi['clocks.current.sm']} MHz "
             f"of {smi['clocks.max.sm']}), torch {result['torch']}, {date}; scripts/measure_ceilings.py")
    print(toml_entries(smi["name"], result, where))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"smi": smi, **result, "date": date}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
