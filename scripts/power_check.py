"""Long kernels on a power-capped GPU: where the spread comes from, and the remedies side by side.

One call (issue #31; docs/benchmarks/timing.md "Power cap and long kernels"). Never changes a clock or
power setting: it reads NVML and times through attnwatch's own engine (ci/engine), in fresh
processes run one after another:

* evidence (the first process, before anything else): NVML's fastest read rate and how often
  its SM-clock and power values change; one long case timed with the `clock` recipe at busy
  fractions 1, 0.75, 0.5, 0.33 (duty cycle: an idle gap before each call) and with the L2 flush
  off; the SM clock and power polled through the whole process (position in the run, per phase);
  per-sample clocks and times of the long cases (correlation, first tenth vs last tenth);
* side by side: every recipe (ci/run_config.toml [timing.recipes], "plain" = today's) on the
  long cases and a few small ones, recipes rotated per interleave group, in `--children`
  processes: IQR/median, run-to-run spread of the medians between processes, the
  clock-normalised median's spread, the timing wall time against plain's, TFLOPS.

Needs torch (and nvidia-ml-py on a GPU), nothing of duckdb/streamlit/plotly. Writes under
--out: power_check.json (every figure), power_trace.json (the NVML trace and per-sample data of
the first process), power_check.log; prints a table last.

    PYTHONPATH=. python3 scripts/power_check.py --budget-s 530 --commit <sha> --out $OUT
    PYTHONPATH=. python3 scripts/power_check.py --device cpu --smoke --out out/pc   (a pipeline check)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from attnwatch.scripts.script_env import checkout_env  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from power_check_child import child  # noqa: E402

LONG_US, SMALL_US = 1000.0, 500.0  # the classes: over 1 ms, under 0.5 ms


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=530.0, help="wall-clock budget of the whole call")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/power_check)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--smoke", action="store_true", help="tiny caps and the cpu_tiny shape: checks the pipeline only")
    p.add_argument("--children", type=int, default=3, help="fresh processes of the side-by-side")
    p.add_argument("--long", default="fa_s8192_d64,fa_s16384_d128,fa_s4096_d128", help="long shapes (>1 ms)")
    p.add_argument("--small", default="fa_s512_d64", help="small shapes that must keep their figures")
    p.add_argument("--variants", default="sdpa_cudnn,triton_fa2,sdpa_flash")
    p.add_argument("--recipes", default="plain,clock,paced_duty,paced_power,band")
    p.add_argument("--commit", default=None, help="commit measured, for a copy without .git")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


# -- the parent: processes, aggregation, the table -----------------------------------------------


def spread(values: list[float]) -> float | None:
    """(max - min) / mean of the per-process medians; None with fewer than two."""
    values = [v for v in values if v]
    return (max(values) - min(values)) / statistics.fmean(values) if len(values) >= 2 else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def aggregate(children: list[dict], recipes: list[str]) -> dict:
    """Per recipe: long cases' IQR/median and run-to-run spread, small cases' shift from plain, cost."""
    rows = [r for c in children for r in c["results"] if r["label"] == "compare" and r.get("median_us")]
    by: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        by.setdefault((r["recipe"], r["case_id"]), []).append(r)
    plain = {cid: _median([r["median_us"] for r in rs]) for (rec, cid), rs in by.items() if rec == "plain"}
    table = {}
    for recipe in recipes:
        cases = {cid: rs for (rec, cid), rs in by.items() if rec == recipe}
        long = {
            cid: rs for cid, rs in cases.items() if rs[0]["long"] and (plain.get(cid) or rs[0]["median_us"]) > LONG_US
        }
        small = {cid: rs for cid, rs in cases.items() if (plain.get(cid) or rs[0]["median_us"]) < SMALL_US}
        iqr = [r["rel_spread"] for rs in long.values() for r in rs]
        r2r = [spread([r["median_us"] for r in rs]) for rs in long.values()]
        r2r_norm = [spread([r.get("clock_normalised_median_us") for r in rs]) for rs in long.values()]
        shift = [
            abs(_median([r["median_us"] for r in rs]) / plain[cid] - 1) for cid, rs in small.items() if plain.get(cid)
        ]
        cost = {}
        for c in children:
            seen = {r["call"]: r["timing_s"] for r in c["results"] if r["label"] == "compare" and r["recipe"] == recipe}
            cost[c["child"]] = sum(seen.values())
        table[recipe] = {
            "long_cases": len(long),
            "small_cases": len(small),
            "long_iqr_median_median": _median(iqr),
            "long_iqr_median_max": _max(iqr),
            "long_over_1pct": sum(1 for v in iqr if v > 0.01),
            "long_rows": len(iqr),
            "long_r2r_median": _median(r2r),
            "long_r2r_max": _max(r2r),
            "long_r2r_normalised_max": _max(r2r_norm),
            "small_shift_max": _max(shift),
            "timing_s_per_process": _median(list(cost.values())),
            "converged": sum(1 for rs in cases.values() for r in rs if r.get("converged")),
            "rows": sum(map(len, cases.values())),
            "band_discarded": sum(int(r.get("band_discarded_samples") or 0) for rs in cases.values() for r in rs),
            "throttled_rows": sum(
                1 for rs in cases.values() for r in rs if "sw_power_cap" in (r.get("throttle_reasons") or [])
            ),
        }
    base_cost = (table.get("plain") or {}).get("timing_s_per_process")
    for v in table.values():
        v["cost_vs_plain"] = v["timing_s_per_process"] / base_cost if base_cost and v["timing_s_per_process"] else None
    cases_out = {
        f"{rec}|{cid}": {
            "medians_us": [r["median_us"] for r in rs],
            "rel_spreads": [r["rel_spread"] for r in rs],
            "normalised_us": [r.get("clock_normalised_median_us") for r in rs],
            "tflops": [r.get("tflops") for r in rs],
            "clock_min_mhz": [r.get("sm_clock_min_mhz") for r in rs],
        }
        for (rec, cid), rs in sorted(by.items())
    }
    plain_rows = {cid: rs for (rec, cid), rs in by.items() if rec == "plain"}
    by_length = sorted(
        (
            {
                "case_id": cid,
                "median_us": plain[cid],
                "rel_spread": _median([r["rel_spread"] for r in rs]),
                "r2r": spread([r["median_us"] for r in rs]),
                "throttled_share": _median([(r.get("throttled_samples") or 0) / max(r.get("n") or 1, 1) for r in rs]),
            }
            for cid, rs in plain_rows.items()
        ),
        key=lambda r: r["median_us"],
    )
    return {"recipes": table, "cases": cases_out, "spread_vs_length": by_length}


def evidence(first: dict) -> dict:
    """From the first process: the duty-cycle and flush rows, per-sample correlation and drift."""
    ev = dict(first.get("evidence") or {})
    ev["one_case"] = [
        {
            k: r.get(k)
            for k in (
                "label",
                "case_id",
                "median_us",
                "rel_spread",
                "sm_clock_median_mhz",
                "sm_clock_min_mhz",
                "clock_normalised_median_us",
                "timing_s",
                "n",
            )
        }
        for r in first["results"]
        if r["label"] != "compare"
    ]
    ev["phases"] = first.get("phases", [])  # in run order: clock and power by position in the process
    per_case = {}
    for key, data in first.get("samples", {}).items():
        pairs = [(t, c) for t, c in zip(data["samples_us"], data["clocks_mhz"]) if c]
        if len(pairs) < 10:
            continue
        t, c = zip(*pairs)
        tenth = max(1, len(t) // 10)
        per_case[key] = {
            "n": len(t),
            "corr_time_vs_inverse_clock": _corr(t, [1 / x for x in c]),
            "first_tenth_median_us": statistics.median(t[:tenth]),
            "last_tenth_median_us": statistics.median(t[-tenth:]),
            "first_tenth_clock_mhz": statistics.median(c[:tenth]),
            "last_tenth_clock_mhz": statistics.median(c[-tenth:]),
        }
    ev["per_sample"] = per_case
    return ev


def _corr(x, y) -> float | None:
    if len(x) < 3 or statistics.pstdev(x) == 0 or statistics.pstdev(y) == 0:
        return None
    return statistics.correlation(x, y)


def _pct(v) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{100 * v:.2f}%"


def print_table(summary: dict, log) -> None:
    log(
        "recipe        long  IQR/med(med)  IQR/med(max)  >1%    r2r(med)  r2r(max)  r2r-norm(max)  small-shift(max)  cost"
    )
    for recipe, v in summary["recipes"].items():
        cost = "-" if v["cost_vs_plain"] is None else f"{v['cost_vs_plain']:.2f}x"
        log(
            f"{recipe:<13} {v['long_cases']:>4}  {_pct(v['long_iqr_median_median']):>12}  {_pct(v['long_iqr_median_max']):>12}  "
            f"{v['long_over_1pct']:>2}/{v['long_rows']:<3} {_pct(v['long_r2r_median']):>8}  {_pct(v['long_r2r_max']):>8}  "
            f"{_pct(v['long_r2r_normalised_max']):>13}  {_pct(v['small_shift_max']):>16}  {cost}"
        )


def parent(args) -> int:
    out = Path(args.out or os.environ.get("OUT") or "out/power_check")
    out.mkdir(parents=True, exist_ok=True)
    log_file = (out / "power_check.log").open("a", encoding="utf-8")

    def log(text: str) -> None:
        print(text, flush=True)
        log_file.write(text + "\n")
        log_file.flush()

    start = time.time()
    deadline = start + args.budget_s - 10
    recipes = args.recipes.split(",")
    children = []
    work = Path(tempfile.mkdtemp(prefix="power_check_"))
    for i in range(args.children):
        share = (deadline - time.time()) / (args.children - i)
        if share < 20:
            log(f"power_check: no time left for process {i}")
            break
        result = work / f"child{i}.json"
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--child",
            str(i),
            "--deadline",
            str(time.time() + share),
            "--result",
            str(result),
            "--device",
            args.device,
            "--long",
            args.long,
            "--small",
            args.small,
            "--variants",
            args.variants,
            "--recipes",
            args.recipes,
        ] + (["--smoke"] if args.smoke else [])
        log(f"power_check: process {i}, {share:.0f} s")
        try:
            proc = subprocess.run(
                cmd,
                capture_output=True,
                text=True,
                timeout=share + 60,
                env=checkout_env(),
            )
            log_file.write(proc.stdout[-20000:] + proc.stderr[-20000:])
            if proc.returncode != 0:
                log(f"power_check: process {i} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            log(f"power_check: process {i} overran its share and was killed")
        if result.exists():
            children.append(json.loads(result.read_text(encoding="utf-8")))
    if not children:
        log("power_check: no process finished")
        return 1
    summary = aggregate(children, recipes)
    report = {
        "commit": args.commit,
        "device": children[0]["device"],
        "gpu_name": children[0].get("gpu_name"),
        "budget_s": args.budget_s,
        "wall_s": time.time() - start,
        "processes": len(children),
        "recipes_asked": recipes,
        "truncated": [c["child"] for c in children if c.get("truncated")],
        "evidence": evidence(children[0]),
        **summary,
    }
    (out / "power_check.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    first = children[0]
    (out / "power_trace.json").write_text(
        json.dumps(
            {
                "columns": ["t_s", "sm_clock_mhz", "power_w", "reasons_mask"],
                "trace": first.get("trace", []),
                "phases": first.get("phases", []),
                "samples": first.get("samples", {}),
            }
        ),
        encoding="utf-8",
    )
    log(
        f"power_check: {len(children)} processes in {report['wall_s']:.0f} s; truncated: {report['truncated'] or 'none'}"
    )
    for row in report["evidence"].get("one_case", []):
        log(
            f"  evidence {row['label']:<10} {row['case_id']}: median {row['median_us'] or 0:.1f} us, "
            f"IQR/median {_pct(row['rel_spread'])}, clock {row['sm_clock_median_mhz']} (min {row['sm_clock_min_mhz']}) MHz, "
            f"timing {row['timing_s']:.2f} s"
        )
    for row in summary["spread_vs_length"]:
        log(
            f"  plain {row['case_id']:<44} median {row['median_us']:>10.1f} us  IQR/median {_pct(row['rel_spread']):>7}  "
            f"r2r {_pct(row['r2r']):>7}  throttled {_pct(row['throttled_share'])}"
        )
    print_table(summary, log)
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    return child(args) if args.child is not None else parent(args)


if __name__ == "__main__":
    sys.exit(main())
