"""Two runners at once, one per GPU of a host: does each bundle name its own GPU, and do they agree?

Starts `attnwatch run` twice at the same time, one with CUDA_VISIBLE_DEVICES=0 and one with =1
(`--devices`), on the same cases, while a sampler in this process reads every GPU's SM clock,
utilisation and compute processes through NVML once a second. Then prints, per bundle: the
device it was pinned to, the GPU UUID, PCI bus id and NVML index the bundle recorded, the GPU
NVML maps that CUDA_VISIBLE_DEVICES value to (ci.gpu_identity), whether NVML saw the run's
measuring process on the recorded GPU, the SM clock at the start and the range of the per-case
clocks before and after timing; then per case the two medians and their ratio, and a verdict.
`--solo` afterwards times the first device alone again, for the ratio "with a neighbour / alone".

Writes under --out (default $OUT, else out/gpu_pair_check): pair_check.json (every figure),
bundles.tar.gz (the bundles, as run_<device>/) and each run's log. Needs torch and the kernels'
packages, not duckdb or streamlit. Run from the repository root, e.g.

    PYTHONPATH=. python3 scripts/gpu_pair_check.py --shapes pr --variants sdpa,triton_fa2 --solo

Exit status 0 when both runs completed, named two different GPUs, each the one its
CUDA_VISIBLE_DEVICES value maps to (where NVML is available to say so); 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--devices", default="0,1", help="the two CUDA_VISIBLE_DEVICES values, comma-separated (default 0,1)"
    )
    p.add_argument("--shapes", default="pr")
    p.add_argument("--variants", default="sdpa,triton_fa2")
    p.add_argument("--dtypes", default="fp16")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto", help="passed to attnwatch run")
    p.add_argument("--max-minutes", type=float, default=4.0, help="per run (attnwatch run --max-minutes)")
    p.add_argument("--solo", action="store_true", help="then time the first device alone again")
    p.add_argument("--commit", default=None, help="commit to record, for a checkout without .git")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else out/gpu_pair_check)")
    return p.parse_args(argv)


# --- reading bundles (plain JSON: this script must run where the history's packages are absent) ---


def read_bundle(bundle: Path) -> dict[str, Any]:
    """What the check needs from one bundle: identity, clocks, per-case medians, child pids."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    timings = json.loads((bundle / "timings.json").read_text(encoding="utf-8"))["timings"]
    env = manifest["environment"]
    before = [t["sm_clock_mhz_before"] for t in timings if t.get("sm_clock_mhz_before") is not None]
    after = [t["sm_clock_mhz_after"] for t in timings if t.get("sm_clock_mhz_after") is not None]
    # interleave_group is "<group>#<pid>.<round>" (ci/engine/group.py; "<group>#<pid>" before)
    tails = [(t.get("interleave_group") or "").rpartition("#")[2].split(".")[0] for t in timings]
    pids = sorted({int(tail) for tail in tails if tail.isdigit()})
    return {
        "run_id": manifest["run_id"],
        "status": manifest["status"],
        "hostname": env.get("hostname"),
        "pool": env.get("pool"),
        "gpu_name": env.get("gpu_name"),
        "gpu_uuid": env.get("gpu_uuid"),
        "gpu_pci_bus_id": env.get("gpu_pci_bus_id"),
        "gpu_index": env.get("gpu_index"),
        "sm_clock_start_mhz": env.get("sm_clock_mhz"),
        "case_clock_before_mhz": [min(before), max(before)] if before else None,
        "case_clock_after_mhz": [min(after), max(after)] if after else None,
        "throttled_cases": sum(1 for t in timings if t.get("throttled_samples")),
        "medians_us": {t["case_id"]: t["median_us"] for t in timings},
        "child_pids": pids,
    }


def compare_medians(a: dict[str, float], b: dict[str, float]) -> dict[str, Any]:
    """Per case present in both: medians and b/a; over them: geometric mean, min and max ratio."""
    cases = {c: {"a_us": a[c], "b_us": b[c], "ratio": b[c] / a[c]} for c in sorted(set(a) & set(b)) if a[c] > 0}
    ratios = [v["ratio"] for v in cases.values()]
    summary = {"cases": len(ratios)}
    if ratios:
        summary.update(
            geomean=math.exp(statistics.fmean(math.log(r) for r in ratios)), min=min(ratios), max=max(ratios)
        )
    return {"cases": cases, "summary": summary}


def identity_verdict(runs: dict[str, dict], expected: dict[str, str | None], seen: dict[str, set[int]]) -> list[str]:
    """Problems with the recorded identities ([] = none): two bundles naming one GPU, a bundle
    naming another GPU than its CUDA_VISIBLE_DEVICES value maps to, a measuring process NVML saw
    only on another GPU than the recorded one."""
    problems = []
    uuids = [r["gpu_uuid"] for r in runs.values()]
    if all(u is None for u in uuids):
        return ["no GPU identity recorded: a CPU run checks only that the script works"]
    if len(set(uuids)) != len(uuids) or None in uuids:
        problems.append(f"the bundles do not name distinct GPUs: {uuids}")
    for device, run in runs.items():
        want = expected.get(device)
        if want and run["gpu_uuid"] != want:
            problems.append(f"CUDA_VISIBLE_DEVICES={device}: bundle says {run['gpu_uuid']}, NVML maps it to {want}")
        where = sorted(uuid for uuid, pids in seen.items() if pids & set(run["child_pids"]))
        if where and run["gpu_uuid"] not in where:
            problems.append(
                f"CUDA_VISIBLE_DEVICES={device}: its measuring process ran on {where}, bundle says {run['gpu_uuid']}"
            )
    return problems


# --- NVML: the expected mapping and a background sampler -----------------------------------


def load_nvml() -> Any:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVML (CPU machine): the check runs without it
        return None
    return pynvml


def expected_gpus(nvml: Any, devices: list[str]) -> dict[str, str | None]:
    from attnwatch.ci.gpu_identity import nvml_devices, visible_gpu

    if nvml is None:
        return {d: None for d in devices}
    listed = nvml_devices(nvml)
    return {d: (g.uuid if (g := visible_gpu(d, listed)) else None) for d in devices}


class Sampler(threading.Thread):
    """Every `period_s`: per GPU, SM clock, utilisation and the pids of its compute processes."""

    def __init__(self, nvml: Any, period_s: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.nvml, self.period_s = nvml, period_s
        self.samples: list[dict] = []
        self.pids: dict[str, set[int]] = {}
        self._stopping = threading.Event()

    def run(self) -> None:
        from attnwatch.ci.gpu_identity import nvml_devices

        gpus = [(d.uuid, self.nvml.nvmlDeviceGetHandleByIndex(d.index)) for d in nvml_devices(self.nvml)]
        while not self._stopping.wait(self.period_s):
            for uuid, handle in gpus:
                try:
                    procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)
                    util = self.nvml.nvmlDeviceGetUtilizationRates(handle).gpu
                    clock = self.nvml.nvmlDeviceGetClockInfo(handle, self.nvml.NVML_CLOCK_SM)
                except self.nvml.NVMLError:
                    continue
                self.pids.setdefault(uuid, set()).update(int(p.pid) for p in procs)
                self.samples.append(
                    {
                        "t": round(time.time(), 1),
                        "uuid": uuid,
                        "sm_clock_mhz": int(clock),
                        "util_pct": int(util),
                        "pids": sorted(int(p.pid) for p in procs),
                    }
                )

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=10)

    def busy_clocks(self) -> dict[str, dict]:
        """Per GPU: samples taken, median SM clock while >= 50% busy, highest utilisation."""
        out = {}
        for uuid in sorted({s["uuid"] for s in self.samples}):
            mine = [s for s in self.samples if s["uuid"] == uuid]
            busy = [s["sm_clock_mhz"] for s in mine if s["util_pct"] >= 50]
            out[uuid] = {
                "samples": len(mine),
                "busy_median_sm_clock_mhz": statistics.median(busy) if busy else None,
                "max_util_pct": max(s["util_pct"] for s in mine),
            }
        return out


# --- running ------------------------------------------------------------------------------------


def start_run(args: argparse.Namespace, device: str, out_dir: Path, log_path: Path) -> subprocess.Popen:
    """`attnwatch run` pinned to CUDA_VISIBLE_DEVICES=`device`, writing its bundle to `out_dir`."""
    cmd = [
        sys.executable,
        "-m",
        "attnwatch",
        "run",
        "--shapes",
        args.shapes,
        "--variants",
        args.variants,
        "--dtypes",
        args.dtypes,
        "--device",
        args.device,
        "--out",
        str(out_dir),
        "--no-progress",
        "--trigger",
        "workflow_dispatch",
        "--max-minutes",
        str(args.max_minutes),
        "--notes",
        f"gpu_pair_check CUDA_VISIBLE_DEVICES={device}",
    ]
    if args.commit:
        cmd += ["--commit", args.commit]
    env = dict(
        os.environ,
        CUDA_VISIBLE_DEVICES=device,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    )
    with open(log_path, "w", encoding="utf-8") as log:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_runs(procs: dict[str, subprocess.Popen], timeout_s: float) -> dict[str, int]:
    codes = {}
    for device, proc in procs.items():
        try:
            codes[device] = proc.wait(timeout=max(1.0, timeout_s))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[device] = proc.wait()
    return codes


def save(out: Path, report: dict, bundles: dict[str, Path]) -> None:
    tmp = out / ".bundles.tar.gz.tmp"
    with tarfile.open(tmp, "w:gz") as tar:
        for name, bundle in bundles.items():
            if (bundle / "manifest.json").exists():
                tar.add(bundle, arcname=name, filter=lambda m: None if m.name.endswith(".tmp") else m)
    os.replace(tmp, out / "bundles.tar.gz")
    tmp = out / ".pair_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1, default=sorted), encoding="utf-8")
    os.replace(tmp, out / "pair_check.json")


def print_report(report: dict) -> None:
    print()
    print(
        f"{'CUDA_VISIBLE_DEVICES':<21} {'status':<9} {'gpu_uuid (recorded)':<42} {'pci_bus_id':<17} {'nvml':>4} "
        f"{'expected by NVML':<42} {'seen':<5} {'clk0':>5} {'before':>11} {'after':>11}"
    )
    for device, run in report["runs"].items():
        seen = report["seen_on_recorded_gpu"].get(device)
        rng = lambda r: f"{r[0]}-{r[1]}" if r else "-"  # noqa: E731
        print(
            f"{device:<21} {run['status']:<9} {str(run['gpu_uuid']):<42} {str(run['gpu_pci_bus_id']):<17} "
            f"{str(run['gpu_index']):>4} {str(report['expected'].get(device)):<42} {str(seen):<5} "
            f"{str(run['sm_clock_start_mhz']):>5} {rng(run['case_clock_before_mhz']):>11} {rng(run['case_clock_after_mhz']):>11}"
        )
    a, b = list(report["runs"])[:2]
    print(f"\n{'case':<46} {'median ' + a:>14} {'median ' + b:>14} {b + '/' + a:>8}")
    for case, row in report["pair"]["cases"].items():
        print(f"{case[:46]:<46} {row['a_us']:14.2f} {row['b_us']:14.2f} {row['ratio']:8.4f}")
    print(f"pair {b}/{a}: {report['pair']['summary']}")
    if "solo" in report:
        print(f"{a} with a neighbour / alone: {report['solo']['summary']}")
    for uuid, c in report.get("nvml_sampler", {}).items():
        print(f"NVML sampler {uuid}: {c}")
    print("identity: " + ("OK" if not report["problems"] else "PROBLEMS: " + "; ".join(report["problems"])))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    devices = [d.strip() for d in args.devices.split(",")]
    if len(devices) != 2:
        print("--devices: give exactly two CUDA_VISIBLE_DEVICES values, e.g. 0,1", file=sys.stderr)
        return 2
    out = Path(args.out or os.environ.get("OUT") or REPO_ROOT / "out" / "gpu_pair_check")
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-pair-check-"))  # the bundles come back in bundles.tar.gz
    nvml = load_nvml()
    report: dict[str, Any] = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": vars(args),
        "expected": expected_gpus(nvml, devices),
    }
    sampler = Sampler(nvml) if nvml is not None else None
    if sampler:
        sampler.start()
    bundles = {f"run_{d}": work / f"run_{d}" for d in devices}
    started = time.monotonic()
    procs = {d: start_run(args, d, bundles[f"run_{d}"], out / f"run_{d}.log") for d in devices}
    report["exit_codes"] = wait_runs(procs, 60 * args.max_minutes + 180)
    report["pair_wall_s"] = round(time.monotonic() - started, 1)
    if sampler:
        sampler.stop()
        report["nvml_sampler"] = sampler.busy_clocks()
        report["nvml_samples"] = sampler.samples
    runs = {d: read_bundle(bundles[f"run_{d}"]) for d in devices if (bundles[f"run_{d}"] / "manifest.json").exists()}
    report["runs"] = runs
    seen = sampler.pids if sampler else {}
    report["seen_on_recorded_gpu"] = {
        d: (bool(seen.get(r["gpu_uuid"], set()) & set(r["child_pids"])) if seen else None) for d, r in runs.items()
    }
    if len(runs) == 2:
        report["pair"] = compare_medians(runs[devices[0]]["medians_us"], runs[devices[1]]["medians_us"])
    report["problems"] = (
        identity_verdict(runs, report["expected"], seen) if len(runs) == 2 else ["a run wrote no bundle"]
    )
    save(out, report, bundles)
    if args.solo and len(runs) == 2:
        bundles["solo_" + devices[0]] = work / f"solo_{devices[0]}"
        code = wait_runs(
            {devices[0]: start_run(args, devices[0], bundles["solo_" + devices[0]], out / "solo.log")},
            60 * args.max_minutes + 180,
        )
        if (bundles["solo_" + devices[0]] / "manifest.json").exists():
            solo = read_bundle(bundles["solo_" + devices[0]])
            report["solo"] = compare_medians(solo["medians_us"], runs[devices[0]]["medians_us"])
            report["solo"]["exit_code"] = code[devices[0]]
        save(out, report, bundles)
    if len(runs) == 2:
        print_report(report)
    else:
        print(f"a run wrote no bundle: exit codes {report['exit_codes']}; see {out}/run_*.log")
    complete = len(runs) == 2 and all(r["status"] == "complete" for r in runs.values())
    return 0 if complete and not report["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
