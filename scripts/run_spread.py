"""Per case, how far apart the medians of several independent runs are (no database needed).

`python3 -m scripts.run_spread BUNDLE...` reads each bundle's timings.json (its CaseTimings)
and outcomes.json, and prints one row per case: every run's
median (us), the spread (max - min) / min of those medians, and the kernel configurations the
runs used (one name when they agree). `--json PATH` writes the same figures. Exit status 1 when
a case's spread exceeds `--limit` (default 1%) or a case is missing from a run; this is the
check that fresh processes measure the same (docs/benchmarks/kernels.md, "Fresh-process spread").

`--processes N --out DIR` measures first: N fresh `attnwatch run` processes one after another
(default: triton_fa2 over the FlashAttention-paper grid, fp16, both modes, the nightly recipe),
each writing `DIR/rN`, all sharing one Triton choice cache `DIR/triton-choices`
(kernels/triton/choice_cache.py, ATTNWATCH_TRITON_CHOICES) that starts empty: the first process
tunes each problem the recorded table lacks and stores its pick, the later ones read it back
("cached"). The spread table of the N bundles is printed last. The measuring path imports
neither DuckDB nor the dashboard's packages.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

FA_PAPER_SHAPES = ",".join(f"fa_s{s}_d{d}" for d in (64, 128) for s in (512, 1024, 2048, 4096, 8192, 16384))


def run_medians(bundle: Path) -> dict[str, dict]:
    """case id -> {"median_us", "kernel_config"} of one bundle's timed cases."""
    document = json.loads((bundle / "timings.json").read_text())
    found = {}
    for timing in document.get("timings", []):
        if isinstance(timing, dict) and timing.get("median_us"):
            found[timing["case_id"]] = {
                "median_us": float(timing["median_us"]),
                "kernel_config": timing.get("kernel_config"),
            }
    return found


def spread_rows(runs: list[dict[str, dict]]) -> list[dict]:
    cases = sorted(set().union(*runs)) if runs else []
    rows = []
    for case in cases:
        medians = [r[case]["median_us"] if case in r else None for r in runs]
        present = [m for m in medians if m is not None]
        configs = sorted({str(r[case]["kernel_config"]) for r in runs if case in r and r[case]["kernel_config"]})
        rows.append(
            {
                "case": case,
                "medians_us": medians,
                "spread": (max(present) - min(present)) / min(present) if len(present) == len(runs) else None,
                "configs": configs,
            }
        )
    return rows


def measure_fresh(out: Path, processes: int, run_args: list[str]) -> list[Path]:
    """N fresh `attnwatch run` processes sharing one (initially empty) Triton choice cache under
    `out`; returns their bundles. A process that fails stops the measurement (exit status kept)."""
    cache = out / "triton-choices"
    if cache.exists() and any(cache.iterdir()):
        raise SystemExit(f"run_spread: {cache} is not empty; the first process must tune from an empty cache")
    env = {**os.environ, "ATTNWATCH_TRITON_CHOICES": str(cache.resolve())}
    env.pop("ATTNWATCH_TRITON_RETUNE", None)
    bundles = []
    for i in range(processes):
        bundle = out / f"r{i + 1}"
        command = [sys.executable, "-m", "attnwatch", "run", *run_args, "--out", str(bundle), "--no-progress"]
        print("run_spread: " + " ".join(command), file=sys.stderr, flush=True)
        done = subprocess.run(command, env=env)
        if done.returncode != 0 or not (bundle / "manifest.json").is_file():
            raise SystemExit(f"run_spread: process {i + 1} failed (exit {done.returncode}); bundles so far in {out}")
        bundles.append(bundle)
    return bundles


def config_sources(bundle: Path) -> dict[str, str]:
    """case id -> how its kernel configuration was chosen (tuned / table / cached / fixed)."""
    document = json.loads((bundle / "timings.json").read_text())
    return {
        t["case_id"]: t.get("kernel_config_source") or "-"
        for t in document.get("timings", [])
        if isinstance(t, dict) and t.get("case_id")
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundles", nargs="*", type=Path)
    p.add_argument("--limit", type=float, default=0.01, help="largest acceptable spread (default 0.01)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument(
        "--processes",
        type=int,
        default=0,
        help="measure first: this many fresh `attnwatch run` processes sharing one choice cache (needs --out)",
    )
    p.add_argument("--out", type=Path, default=None, help="with --processes: where the bundles and the cache go")
    p.add_argument(
        "--run-args",
        default=f"--shapes {FA_PAPER_SHAPES} --variants triton_fa2 --dtypes fp16 "
        "--causal both --recipe paced_duty --no-correctness",
        help="with --processes: the options of every `attnwatch run` (default: triton_fa2 over the "
        "FlashAttention-paper grid, fp16, both modes, the nightly recipe)",
    )
    args = p.parse_args(argv)
    if args.processes:
        if args.out is None:
            p.error("--processes needs --out")
        args.out.mkdir(parents=True, exist_ok=True)
        args.bundles = measure_fresh(args.out, args.processes, args.run_args.split())
        args.json = args.json or args.out / "run_spread.json"
    if not args.bundles:
        p.error("give bundles, or --processes N --out DIR")
    rows = spread_rows([run_medians(b) for b in args.bundles])
    sources = [config_sources(b) for b in args.bundles]
    for r in rows:
        r["sources"] = [s.get(r["case"], "-") for s in sources]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    width = max((len(r["case"]) for r in rows), default=4)
    print(
        f"{'case':{width}s} "
        + " ".join(f"{'r' + str(i + 1):>8s}" for i in range(len(args.bundles)))
        + f" {'spread':>7s}  config  source per run"
    )
    bad = 0
    for r in rows:
        cells = " ".join(f"{m:8.2f}" if m is not None else f"{'-':>8s}" for m in r["medians_us"])
        spread = f"{r['spread'] * 100:6.2f}%" if r["spread"] is not None else "missing"
        bad += r["spread"] is None or r["spread"] > args.limit
        print(f"{r['case']:{width}s} {cells} {spread:>7s}  {'|'.join(r['configs'])}  {'/'.join(r['sources'])}")
    worst = max((r["spread"] for r in rows if r["spread"] is not None), default=0.0)
    print(
        f"{len(rows)} cases over {len(args.bundles)} runs; largest spread {worst * 100:.2f}%; "
        f"{bad} over {args.limit * 100:g}% or missing"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
