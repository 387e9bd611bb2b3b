"""Run examples/adopt's benchmark suite with the gpu_benchmark fixture and check its records.

On a GPU host (no duckdb, streamlit or plotly needed):

    PYTHONPATH=. python3 scripts/adopt_check.py --budget-s 540 --out $OUT

copies examples/adopt to a scratch folder, runs its suite there (`python -m pytest tests/bench
--benchmark-json=...` with the plugin loaded, this checkout's attnwatch on the path,
with duckdb, streamlit and plotly made unimportable so a dependency on them fails the check),
reads the file with the importer's own reader (history.contract.pytest_benchmark_import, which
needs no database) and checks that every entry holds the engine's GPU statistics: timing mode
cuda_events, SM clocks read, the guard's counts, graph replay for a launch-bound case,
correctness passed, the reference timed in the same interleave group with its gap, bandwidth,
and the GPU named in the environment. `--device cpu` (Triton's interpreter) checks the same
pipeline with cpu_wall, for the test suite. Writes into --out: bench.json, pytest.log,
adopt_check.json (per entry: figures and failed checks). Exit 0 when every check passes.
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

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "adopt"
BLOCKED = ("duckdb", "streamlit", "plotly")  # what a GPU host lacks: the suite must not need them


def _blocker(folder: Path) -> Path:
    """A folder of modules that refuse to import, first on the path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in BLOCKED:
        (folder / f"{name}.py").write_text(f"raise ImportError('{name} is not installed on a GPU host')\n")
    return folder


def run_suite(device: str, out: Path, budget_s: float) -> tuple[int, float]:
    """The example's suite in a scratch copy; (pytest's exit status, wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="adopt-check-") as scratch:
        repo = Path(scratch) / "adopt"
        shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(_blocker(Path(scratch) / "blocked")), str(ROOT), str(repo)])
        if device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        from attnwatch.ci.pytest_plugin import plugin_args

        command = [
            sys.executable,
            "-m",
            "pytest",
            "tests/bench",
            "-q",
            *plugin_args(),
            "-p",
            "no:cacheprovider",
            f"--gpu-benchmark-device={device}",
            f"--benchmark-json={out / 'bench.json'}",
        ]
        started = time.monotonic()
        with open(out / "pytest.log", "w", encoding="utf-8") as log:
            try:
                done = subprocess.run(
                    command, cwd=repo, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=budget_s
                )
                rc = done.returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, time.monotonic() - started


def check_entries(path: Path, device: str) -> tuple[list[dict], list[str]]:
    """Per entry its figures and the checks it failed; problems of the whole file."""
    from attnwatch.history.contract.pytest_benchmark_import import load_pytest_benchmark_file
    from attnwatch.history.contract.pytest_record import MEASUREMENT_KEY, parse_measurement

    from attnwatch.ci.run_config import timing_config

    threshold_us = timing_config("cuda").graph_threshold_us
    loaded = load_pytest_benchmark_file(path)  # the importer's reader: validates every record
    env = loaded.manifest.environment
    problems = []
    if device == "cuda" and not env.gpu_name:
        problems.append("machine_info: no GPU named in the environment")
    if [m for m in BLOCKED if m in sys.modules]:
        problems.append(f"this check imported {[m for m in BLOCKED if m in sys.modules]}")
    rows = []
    for i, bench in enumerate(json.loads(path.read_text())["benchmarks"]):
        m = parse_measurement(bench["extra_info"].get(MEASUREMENT_KEY), path, f"benchmarks[{i}]")
        t, ref = m.timing, m.reference
        failed = []
        mode = "cuda_events" if device == "cuda" else "cpu_wall"
        if t.timing_mode != mode:
            failed.append(f"timing_mode {t.timing_mode}")
        if device == "cuda":
            if t.sm_clock_mhz_before is None or t.sm_clock_mhz_after is None:
                failed.append("no SM clock")
            if t.guard_retimed_blocks is None:
                failed.append("no guard counts")
            if t.median_us < threshold_us and t.graph_median_us is None:
                failed.append("launch-bound but no graph replay")
        if m.correctness is None or not m.correctness.passed:
            failed.append("correctness not passed")
        # The Triton test's reference is timed in its group; its timing is stored once, by the
        # torch kernel's own test (ci/plugin_cases.py), so the entry may keep only the gap.
        if "triton" in t.variant and (
            t.gap_to_baseline is None or (ref is not None and ref.interleave_group != t.interleave_group)
        ):
            failed.append("no reference timed in the same group")
        if not m.bandwidth_gbps:
            failed.append("no bandwidth")
        rows.append(
            {
                "name": bench["name"],
                "case_id": t.case_id,
                "mode": t.timing_mode,
                "n": t.n,
                "median_us": t.median_us,
                "p10_us": t.p10_us,
                "p90_us": t.p90_us,
                "rel_spread": t.rel_spread,
                "graph_median_us": t.graph_median_us,
                "gap_to_reference": t.gap_to_baseline,
                "reference_median_us": ref.median_us if ref else None,
                "bandwidth_gbps": m.bandwidth_gbps,
                "tflops": t.tflops,
                "sm_clock_mhz": [t.sm_clock_mhz_before, t.sm_clock_mhz_after],
                "throttled_samples": t.throttled_samples,
                "guard_retimed_blocks": t.guard_retimed_blocks,
                "correct": m.correctness.passed if m.correctness else None,
                "failed": failed,
            }
        )
    return rows, problems


def _table(rows: list[dict]) -> str:
    header = f"{'case':34} {'mode':11} {'n':>5} {'median us':>10} {'graph us':>9} {'gap':>6} {'GB/s':>8} {'clock MHz':>11} ok"
    lines = [header, "-" * len(header)]
    for r in rows:
        graph = f"{r['graph_median_us']:.2f}" if r["graph_median_us"] is not None else "-"
        gap = f"{r['gap_to_reference']:.3f}" if r["gap_to_reference"] is not None else "-"
        clocks = "/".join(str(c) if c is not None else "-" for c in r["sm_clock_mhz"])
        lines.append(
            f"{r['case_id'][:34]:34} {r['mode']:11} {r['n']:>5} {r['median_us']:>10.2f} {graph:>9} {gap:>6} "
            f"{r['bandwidth_gbps'] or 0:>8.1f} {clocks:>11} {'yes' if not r['failed'] else ', '.join(r['failed'])}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock limit of the suite")
    p.add_argument("--out", default=os.environ.get("OUT", "out/adopt_check"), help="output folder (default: $OUT)")
    args = p.parse_args(argv)
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rc, wall_s = run_suite(device, out, args.budget_s)
    report: dict = {"device": device, "pytest_exit": rc, "wall_s": round(wall_s, 1), "entries": [], "problems": []}
    if not (out / "bench.json").is_file() or (out / "bench.json").stat().st_size == 0:
        report["problems"].append(f"pytest exited {rc} without measuring anything (see pytest.log)")
    else:
        report["entries"], report["problems"] = check_entries(out / "bench.json", device)
    if rc != 0:
        report["problems"].append(f"pytest exited {rc} (see pytest.log)")
    ok = not report["problems"] and report["entries"] and not any(r["failed"] for r in report["entries"])
    report["ok"] = bool(ok)
    (out / "adopt_check.json").write_text(json.dumps(report, indent=2))
    print(f"adopt_check: {device}, suite {wall_s:.1f} s, pytest exit {rc}")
    for problem in report["problems"]:
        print(f"adopt_check: {problem}")
    print(_table(report["entries"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
