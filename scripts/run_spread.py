"""Per case, how far apart the medians of several independent runs are (no database needed).

`python3 -m scripts.run_spread BUNDLE...` reads each bundle's timings.json (its CaseTimings)
and outcomes.json, and prints one row per case: every run's
median (us), the spread (max - min) / min of those medians, and the kernel configurations the
runs used (one name when they agree). `--json PATH` writes the same figures. Exit status 1 when
a case's spread exceeds `--limit` (default 1%) or a case is missing from a run; this is the
check that fresh processes measure the same (docs/benchmarks.md, "Fresh-process spread").
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def run_medians(bundle: Path) -> dict[str, dict]:
    """case id -> {"median_us", "kernel_config"} of one bundle's timed cases."""
    document = json.loads((bundle / "timings.json").read_text())
    found = {}
    for timing in document.get("timings", []):
        if isinstance(timing, dict) and timing.get("median_us"):
            found[timing["case_id"]] = {"median_us": float(timing["median_us"]),
                                        "kernel_config": timing.get("kernel_config")}
    return found


def spread_rows(runs: list[dict[str, dict]]) -> list[dict]:
    cases = sorted(set().union(*runs)) if runs else []
    rows = []
    for case in cases:
        medians = [r[case]["median_us"] if case in r else None for r in runs]
        present = [m for m in medians if m is not None]
        configs = sorted({str(r[case]["kernel_config"]) for r in runs if case in r and r[case]["kernel_config"]})
        rows.append({"case": case, "medians_us": medians,
                     "spread": (max(present) - min(present)) / min(present) if len(present) == len(runs) else None,
                     "configs": configs})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundles", nargs="+", type=Path)
    p.add_argument("--limit", type=float, default=0.01, help="largest acceptable spread (default 0.01)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    args = p.parse_args(argv)
    rows = spread_rows([run_medians(b) for b in args.bundles])
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    width = max((len(r["case"]) for r in rows), default=4)
    print(f"{'case':{width}s} " + " ".join(f"{'r' + str(i + 1):>8s}" for i in range(len(args.bundles)))
          + f" {'spread':>7s}  config")
    bad = 0
    for r in rows:
        cells = " ".join(f"{m:8.2f}" if m is not None else f"{'-':>8s}" for m in r["medians_us"])
        spread = f"{r['spread'] * 100:6.2f}%" if r["spread"] is not None else "missing"
        bad += r["spread"] is None or r["spread"] > args.limit
        print(f"{r['case']:{width}s} {cells} {spread:>7s}  {'|'.join(r['configs'])}")
    worst = max((r["spread"] for r in rows if r["spread"] is not None), default=0.0)
    print(f"{len(rows)} cases over {len(args.bundles)} runs; largest spread {worst * 100:.2f}%; "
          f"{bad} over {args.limit * 100:g}% or missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
