"""Run Nsight Compute over chosen cases and turn its output into bundle records.

One ncu process per variant, so a variant whose kernel crashes or hangs under the profiler
loses only its own cases. Each process runs `ci.ncu.target`, which profiles one call per case
inside an NVTX range named by the case id. ncu is run with `--clock-control none`: its default
locks the SM clock to base and reports durations about 30% longer than the timed runs.

ncu missing, failing, timing out or refusing metrics never raises: the affected cases carry the
reason in `NcuCaseMetrics.error` and everything else proceeds.

A run's deadline (`deadline`, a time.monotonic() value) is checked between variants and bounds
each ncu process: the variants that do not fit are recorded as `DEADLINE_ERROR`, so a GPU job
with a time limit ends with the metrics that finished instead of being killed mid-profile.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from attnwatch.ci.child_env import child_env
from attnwatch.ci.ncu.aggregate import CaseWork, aggregate_case, group_by_case
from attnwatch.ci.ncu.metrics import metrics_argument
from attnwatch.ci.ncu.parse import NcuParseError, ParsedKernel, parse_ncu_csv
from attnwatch.ci.ncu.target import OUTCOME_PREFIX
from attnwatch.ci.run_config import default
from attnwatch.history.contract.bundle import NcuCaseMetrics, NcuKernelRow
from attnwatch.history.contract.bundle_writer import NcuFiles
from attnwatch.history.analysis.ceilings import find_ceiling
from attnwatch.kernels.cases import Case

_ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
DEADLINE_ERROR = "not profiled: run deadline"


@dataclass
class NcuProfile:
    kernel_rows: list[NcuKernelRow] = field(default_factory=list)
    case_metrics: list[NcuCaseMetrics] = field(default_factory=list)
    raw_csv: str = ""  # every CSV ncu printed, concatenated, for the bundle's ncu_raw.csv
    errors: dict[str, str] = field(default_factory=dict)  # case id -> why it has no metrics
    ncu_version: str = ""
    seconds: float = 0.0

    def files(self) -> NcuFiles:
        """ncu.json's records and the CSV, as the bundle writer (history.contract.bundle_writer) takes them."""
        return NcuFiles(self.ncu_version, self.kernel_rows, self.case_metrics, self.raw_csv)


def find_ncu() -> str | None:
    """`$ATTNWATCH_NCU`, else `ncu` on PATH, else the usual CUDA install location."""
    explicit = os.environ.get("ATTNWATCH_NCU")
    if explicit:
        return explicit if Path(explicit).exists() else None
    for candidate in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def ncu_version(ncu: str) -> str:
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def case_work(case: Case, gpu_name: str | None) -> CaseWork:
    ceiling = find_ceiling(gpu_name, "matmul_tflops", case.dtype)
    return CaseWork(
        flops=case.flops,
        ideal_bytes=float(case.shape.min_bytes(_ELEMENT_BYTES[case.dtype])),
        peak_tflops=ceiling.value if ceiling else None,
    )


def profile_cases(
    cases: Sequence[Case],
    out_dir: Path,
    *,
    full: bool = False,
    timeout_s: float | None = None,
    kernels_root: Path | None = None,
    gpu_name: str | None = None,
    deadline: float | None = None,
) -> NcuProfile:
    """Profile every case; never raises for ncu's own failures (they land in `errors`).

    `timeout_s`: per variant's ncu process (default: ci/run_config.toml [defaults] ncu_timeout_s).
    `deadline` (time.monotonic()): no variant starts after it, and none runs past it.
    """
    started = time.monotonic()
    timeout_s = float(default("ncu_timeout_s")) if timeout_s is None else timeout_s
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    profile = NcuProfile()
    ncu = find_ncu()
    if ncu is None:
        return _all_failed(profile, cases, "ncu not found (not on PATH; set ATTNWATCH_NCU)", started)
    profile.ncu_version = ncu_version(ncu)
    by_variant: dict[str, list[Case]] = {}
    for case in cases:
        by_variant.setdefault(case.variant, []).append(case)
    csv_parts = []
    for variant, group in by_variant.items():
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            for case in group:
                profile.errors[case.id] = DEADLINE_ERROR
                profile.case_metrics.append(NcuCaseMetrics(case.id, 0, error=DEADLINE_ERROR))
            continue
        bounded = timeout_s if left is None else min(timeout_s, left)
        kernels, csv_text, errors = _profile_group(ncu, group, out_dir / variant, full, bounded, kernels_root, deadline)
        if bounded < timeout_s and time.monotonic() >= deadline:
            # Cut short by the run's deadline, not by ncu's own limit: say so.
            cut = f"{DEADLINE_ERROR} (ncu stopped after {bounded:.0f} s)"
            errors = {cid: cut if "timed out after" in why else why for cid, why in errors.items()}
        csv_parts.append(csv_text)
        profile.errors.update(errors)
        grouped = group_by_case(kernels)
        for case in group:
            rows = grouped.get(case.id, [])
            for index, kernel in enumerate(rows):
                profile.kernel_rows.append(NcuKernelRow(
                    case_id=case.id, kernel_index=index, kernel_name=kernel.kernel_name,
                    metrics=kernel.metrics, block_size=kernel.block_size, grid_size=kernel.grid_size,
                ))
            if case.id in profile.errors:
                profile.case_metrics.append(NcuCaseMetrics(case.id, 0, error=profile.errors[case.id]))
            else:
                metrics = aggregate_case(case.id, rows, case_work(case, gpu_name))
                if metrics.kernel_count == 0:
                    profile.errors[case.id] = metrics.error or "no kernels"
                profile.case_metrics.append(metrics)
    profile.raw_csv = "\n".join(part for part in csv_parts if part)
    profile.seconds = time.monotonic() - started
    return profile


def _all_failed(profile: NcuProfile, cases: Sequence[Case], reason: str, started: float) -> NcuProfile:
    for case in cases:
        profile.errors[case.id] = reason
        profile.case_metrics.append(NcuCaseMetrics(case.id, 0, error=reason))
    profile.seconds = time.monotonic() - started
    return profile


def _target_env(kernels_root: Path | None, scratch: Path) -> dict[str, str]:
    """The profiled program's environment: this checkout's `ci`, maybe another checkout's `kernels`."""
    return child_env(scratch, Path(kernels_root).resolve() if kernels_root is not None else None)


def _profile_group(
    ncu: str, cases: list[Case], work_dir: Path, full: bool, timeout_s: float, kernels_root: Path | None,
    deadline: float | None = None,
) -> tuple[list[ParsedKernel], str, dict[str, str]]:
    """One ncu process over one variant's cases: (kernels, csv text, per-case errors).

    `timeout_s` bounds each ncu process; `deadline` (monotonic) also bounds the report import.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    plan = work_dir / "plan.json"
    plan.write_text(json.dumps({"cases": [
        {"variant": c.variant, "shape": asdict(c.shape), "dtype": c.dtype, "causal": c.causal} for c in cases
    ]}), encoding="utf-8")
    report = work_dir / "report"
    command = [
        ncu, "--clock-control", "none", "--profile-from-start", "off", "--nvtx",
        "--target-processes", "all", "--force-overwrite", "--export", str(report),
    ]
    command += ["--set", "full"] if full else ["--metrics", metrics_argument()]
    command += [sys.executable, "-m", "attnwatch.ci.ncu.target", str(plan)]
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        ok, output = _run_bounded(command, _target_env(kernels_root, Path(scratch)), timeout_s)
    outcomes = _outcomes(output)
    for case in cases:
        outcome = outcomes.get(case.id)
        if outcome and outcome["status"] != "ok":
            errors[case.id] = f"{outcome['status']}: {outcome['error']}"
        elif not ok:
            errors[case.id] = _why(output)
    report_file = report.with_suffix(".ncu-rep")
    if not report_file.exists():
        for case in cases:
            errors.setdefault(case.id, _why(output) or "ncu wrote no report")
        return [], "", errors
    page = ["--page", "details"] if full else ["--page", "raw"]
    import_timeout = timeout_s if deadline is None else max(1.0, min(timeout_s, deadline - time.monotonic()))
    imported_ok, csv_text = _run_bounded(
        [ncu, "--import", str(report_file), "--csv", "--print-units", "base", *page], dict(os.environ), import_timeout,
    )
    # Output the parser refused is not kept as CSV (the bundle's ncu_raw.csv holds only whole
    # tables, history.contract.ncu_csv); why it was refused is each case's error.
    if not imported_ok:
        for case in cases:
            errors.setdefault(case.id, "ncu --import failed: " + _why(csv_text))
        return [], "", errors
    try:
        parsed = parse_ncu_csv(str(report_file), text=csv_text)
    except NcuParseError as exc:
        for case in cases:
            errors.setdefault(case.id, str(exc))
        return [], "", errors
    if parsed.unknown_columns:
        print(f"attnwatch ncu: {report_file}: columns not on ci/ncu/metrics.toml, not read: "
              f"{', '.join(parsed.unknown_columns)}", file=sys.stderr)
    return parsed.kernels, csv_text, errors


def _run_bounded(command: list[str], env: dict[str, str], timeout_s: float) -> tuple[bool, str]:
    """Run in a new process group; on timeout kill the whole group (ncu and its target)."""
    try:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True,
        )
    except OSError as exc:
        return False, f"==ERROR== could not start {command[0]}: {exc}"
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return False, (output or "") + f"\n==ERROR== timed out after {timeout_s:.0f} s"
    return proc.returncode == 0, output or ""


def _outcomes(output: str) -> dict[str, dict]:
    found = {}
    for line in output.splitlines():
        if line.startswith(OUTCOME_PREFIX):
            try:
                record = json.loads(line[len(OUTCOME_PREFIX):])
                found[record["case_id"]] = record
            except (ValueError, KeyError):
                continue
    return found


def _why(output: str) -> str:
    """ncu's own error lines (the last few), or the output's tail."""
    errors = [line.strip() for line in output.splitlines() if "==ERROR==" in line]
    if errors:
        return " | ".join(errors[-3:])[:2000]
    tail = output.strip().splitlines()[-3:]
    return " | ".join(tail)[:2000] if tail else ""
