"""Which metrics of the Nsight Compute list cost replay passes, and which lists need fewer.

Each replay pass re-runs a profiled kernel (memory restored, caches flushed), so a case's
profiled time grows with the passes its metric list needs: on the H200 one pass cost 0.02 s
per one-kernel case and four passes 0.21 s (docs/benchmarks/ncu.md "Nsight Compute: which
counters cost passes").
ncu decides the passes from which hardware counters the list needs together, so a metric
alone can need one pass and still add passes beside others. This script asks ncu, over a
one-kernel CUDA program built with nvcc (passes depend on the metrics, not on the kernel):

1. each metric of ci/ncu/metrics.toml alone;
2. the default list (one pass), and the explain list (every counter a rule reads) whole, without
   each of its sections, and without each of its metrics (leave one out: which metric adds a
   pass to the whole);
3. each section alone, and without each of its metrics, and parts of the memory section;
4. the candidate lists in CANDIDATES: the explain list with some metrics replaced by others
   that give a rule the same signal (each entry says why it could). A name ncu does not know
   is reported as ncu's error, not as a pass count.

Writes ncu_passes.json under --out (default $OUT) and prints a table of every list's passes.
`ncu_check.py` reuses `build_probe` and `passes_of` for its metric-pass step.

Run from the repository root:  PYTHONPATH=. python3 scripts/ncu_passes.py --budget-s 150
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = r"""
__global__ void probe(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 1.5f + 1.0f;
}
int main() {
  const int n = 1 << 22;
  float *x;
  cudaMalloc(&x, n * sizeof(float));
  cudaMemset(x, 0, n * sizeof(float));
  probe<<<n / 256, 256>>>(x, n);
  cudaDeviceSynchronize();
  cudaFree(x);
  return 0;
}
"""

_STALLS = ("barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "lg_throttle")
# name -> (metrics removed from the default list, metrics added, why they could serve the rules)
CANDIDATES: dict[str, tuple[tuple[str, ...], tuple[str, ...], str]] = {
    "dram total": (
        ("dram__bytes_read.sum", "dram__bytes_write.sum"),
        ("dram__bytes.sum",),
        "the dram_traffic rule adds read and write: one counter of both",
    ),
    "global total": (
        ("l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum"),
        ("l1tex__t_bytes_pipe_lsu_mem_global.sum",),
        "the global_traffic rule adds loads and stores",
    ),
    "local total": (
        ("l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum", "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum"),
        ("l1tex__t_bytes_pipe_lsu_mem_local.sum",),
        "the spills rule adds local loads and stores",
    ),
    "sm instructions": (
        ("smsp__inst_executed.sum",),
        ("sm__inst_executed.sum",),
        "the instructions rule reads the count of warp instructions executed: summed per SM "
        "it is the same count as summed per SM sub-partition",
    ),
    "sampled stalls": (
        tuple(f"smsp__average_warps_issue_stalled_{s}_per_issue_active.ratio" for s in _STALLS),
        tuple(f"smsp__pcsamp_warps_issue_stalled_{s}" for s in _STALLS) + ("smsp__pcsamp_sample_count",),
        "warp-state sampling gives every stall reason's share of warp samples in one sampling pass",
    ),
}


_L1 = "l1tex__t_bytes_pipe_lsu_mem_"
# Parts of the memory section asked alone: which of its counters cannot share a pass.
MEMORY_PARTS: dict[str, tuple[str, ...]] = {
    "dram": ("dram__bytes_read.sum", "dram__bytes_write.sum"),
    "dram and L2": ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum"),
    "L1 global": (f"{_L1}global_op_ld.sum", f"{_L1}global_op_st.sum"),
    "L1 local": (f"{_L1}local_op_ld.sum", f"{_L1}local_op_st.sum"),
    "L1 loads": (f"{_L1}global_op_ld.sum", f"{_L1}local_op_ld.sum"),
    "L1 all four": tuple(f"{_L1}{m}_op_{o}.sum" for m in ("global", "local") for o in ("ld", "st")),
}


def find_nvcc() -> str | None:
    nvcc = shutil.which("nvcc")
    return nvcc or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)


def build_probe(scratch: Path) -> tuple[Path | None, str]:
    """The one-kernel program, built in `scratch`: (binary, "") or (None, why not)."""
    nvcc = find_nvcc()
    if nvcc is None:
        return None, "no nvcc"
    source, binary = scratch / "probe.cu", scratch / "probe"
    source.write_text(PROBE, encoding="utf-8")
    for arch in ("-arch=native", "-arch=sm_90"):
        built = subprocess.run(
            [nvcc, "-O2", arch, "-o", str(binary), str(source)], capture_output=True, text=True, timeout=180
        )
        if built.returncode == 0:
            return binary, ""
    return None, f"nvcc failed: {built.stderr.strip()[-300:]}"


def passes_of(ncu: str, binary: Path, metrics: list[str] | tuple[str, ...], timeout_s: float = 120.0) -> dict:
    """ncu's replay passes for the probe's kernel with `metrics` together, or ncu's error."""
    from attnwatch.ci.ncu.profile import pass_counts

    began = time.monotonic()
    try:
        done = subprocess.run(
            [ncu, "--clock-control", "none", "--metrics", ",".join(metrics), str(binary)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:
        return {"passes": None, "error": "timed out", "wall_s": round(time.monotonic() - began, 2)}
    passes = pass_counts(done.stdout + done.stderr)
    error = None
    if not passes:
        said = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line or "WARN" in line]
        error = (said[0] if said else f"no pass count (exit {done.returncode})")[:200]
    return {"passes": passes[0] if passes else None, "error": error, "wall_s": round(time.monotonic() - began, 2)}


def lists_to_ask() -> list[tuple[str, list[str]]]:
    """(label, metric list) for every question of steps 1-4, in order."""
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections, metric_specs, sections, specs_in

    explain_sections = choose_sections(EXPLAIN)
    explain = [s.metric for s in specs_in(explain_sections)]
    lists: list[tuple[str, list[str]]] = [(f"alone: {s.metric}", [s.metric]) for s in metric_specs()]
    lists.append(("default list", [s.metric for s in specs_in(None)]))
    lists.append(("explain list", explain))
    for name in explain_sections:
        kept = tuple(n for n in explain_sections if n != name)
        lists.append((f"explain without section {name}", [m.metric for m in specs_in(kept)]))
    lists += [(f"explain without {m}", [x for x in explain if x != m]) for m in explain]
    for section in sections():
        own = [s.metric for s in specs_in((section.name,))]
        lists.append((f"section {section.name}", own))
        if len(own) > 1:
            lists += [(f"section {section.name} without {m}", [x for x in own if x != m]) for m in own]
    lists += [(f"memory part: {name}", list(metrics)) for name, metrics in MEMORY_PARTS.items()]
    for name, (removed, added, _why) in CANDIDATES.items():
        lists.append((f"candidate: {name}", [m for m in explain if m not in removed] + list(added)))
    every = list(explain)
    for removed, added, _why in CANDIDATES.values():
        every = [m for m in every if m not in removed] + list(added)
    lists.append(("candidate: all substitutions", every))
    return lists


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "ncu-passes-out"))
    p.add_argument("--budget-s", type=float, default=150.0, help="stop asking once this much wall time is spent")
    p.add_argument("--only", default="", help="ask only the lists whose label contains this text")
    args = p.parse_args(argv)
    from attnwatch.ci.ncu.profile import find_ncu, ncu_version

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ncu = find_ncu()
    if ncu is None:
        sys.exit("ncu_passes: ncu not found (not on PATH; set ATTNWATCH_NCU)")
    began = time.monotonic()
    result = {"ncu": ncu_version(ncu), "candidates": {k: v[2] for k, v in CANDIDATES.items()}, "lists": []}
    with tempfile.TemporaryDirectory() as scratch:
        binary, why = build_probe(Path(scratch))
        if binary is None:
            sys.exit(f"ncu_passes: the probe program was not built ({why})")
        for label, metrics in lists_to_ask():
            if args.only and args.only not in label:
                continue
            if time.monotonic() - began > args.budget_s:
                print(f"ncu_passes: budget spent; stopped before '{label}'", flush=True)
                break
            answer = passes_of(ncu, binary, metrics)
            result["lists"].append({"label": label, "metrics": metrics, **answer})
            print(
                f"{label[:90]:<90} {answer['passes'] if answer['passes'] is not None else '-':>3}"
                f"  {answer['error'] or ''}",
                flush=True,
            )
    (out / "ncu_passes.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{len(result['lists'])} lists asked in {time.monotonic() - began:.0f} s; {result['ncu']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
