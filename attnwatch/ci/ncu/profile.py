"""Run Nsight Compute over chosen cases and turn its output into bundle records.

One ncu process profiles every chosen case: it launches one `ci.ncu.target` process that
imports torch once, prepares each case (the variants' builds are cached), and runs each case's
kernels once inside an NVTX range named by the case id, between cudaProfilerStart/Stop
(`--profile-from-start off`), so only those launches are replayed, and only in the target
itself (`--target-processes application-only`: a build's ninja or compiler run is not injected).
What is collected is the chosen sections of ci/ncu/metrics.toml (`--metrics`; the replay mode
and cache control of its [profile]); each section's cost per case is measured in
docs/benchmarks.md, and the replay passes ncu needed per kernel are kept (`NcuProfile.passes`).
ncu is run with `--clock-control none`: its default locks the SM clock to base and reports
durations about 30% longer than the timed runs.

A case whose kernel crashes or hangs the target loses only itself: the target reports each case
as it finishes, so the first case without a report is the one that was running; it is recorded
as crashed (or hung, when ncu had to be killed at its time limit) and the other cases get a
fresh process (one per culprit; after a kill, which leaves no report, the finished ones too).

ncu missing, failing, timing out or refusing metrics never raises: the affected cases carry the
reason in `NcuCaseMetrics.error` and everything else proceeds.

A run's deadline (`deadline`, a time.monotonic() value) bounds every ncu process: cases not
profiled by then are recorded as `DEADLINE_ERROR`, so a GPU job with a time limit ends with the
metrics that finished instead of being killed mid-profile.
"""

from __future__ import annotations

import json
import os
import re
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
from attnwatch.ci.ncu.metrics import instanced_metrics, metrics_argument, choose_sections, replay_settings, specs_in
from attnwatch.ci.ncu.parse import NcuParseError, ParsedKernel, parse_ncu_csv
from attnwatch.ci.ncu.target import OUTCOME_PREFIX
from attnwatch.ci.run_config import default
from attnwatch.history.contract.bundle import NcuCaseMetrics, NcuKernelRow
from attnwatch.history.contract.bundle_writer import NcuFiles
from attnwatch.history.contract.sass_file import SassRecords
from attnwatch.history.analysis.ceilings import find_ceiling
from attnwatch.kernels.capabilities import UNDER_PROFILER_ENV
from attnwatch.kernels.cases import Case

DEADLINE_ERROR = "not profiled: run deadline"
CRASH_ERROR = "crashed the profiled process"
HANG_ERROR = "hung under the profiler"
TIMED_OUT = "==ERROR== timed out"  # what _run_bounded appends when it kills the process group
CONNECTED = "==PROF== Connected to process"  # ncu's line once the target runs
IMPORT_MARGIN = 0.15  # share of the time left kept for writing and importing the report
# ncu's line per profiled kernel ends "- 9 passes" (or "- 1 pass")
_PASSES = re.compile(r'^==PROF== Profiling ".*- (\d+) pass(?:es)?\b')


@dataclass
class NcuProfile:
    kernel_rows: list[NcuKernelRow] = field(default_factory=list)
    case_metrics: list[NcuCaseMetrics] = field(default_factory=list)
    raw_csv: str = ""  # every CSV ncu printed, concatenated, for the bundle's ncu_raw.csv
    errors: dict[str, str] = field(default_factory=dict)  # case id -> why it has no metrics
    passes: list[int] = field(default_factory=list)  # replay passes ncu reported, per profiled kernel
    ncu_version: str = ""
    seconds: float = 0.0
    # case id -> seconds of each of its stages in the target (prepare, warm-up, profiled, clean-up)
    phases: dict[str, dict[str, float]] = field(default_factory=dict)
    import_seconds: float = 0.0  # `ncu --import` of the reports to CSV, over every ncu process
    notes: list[str] = field(default_factory=list)  # what the profile had to leave out, and why
    sass: SassRecords | None = None  # the profiled variants' binaries' static code (ci/ncu/sass_record.py)

    def files(self) -> NcuFiles:
        """ncu.json's records, the CSV and sass.json's, as the bundle writer (history.contract.bundle_writer) takes them."""
        return NcuFiles(self.ncu_version, self.kernel_rows, self.case_metrics, self.raw_csv, self.sass)


def find_ncu() -> str | None:
    """`$ATTNWATCH_NCU`, else `ncu` on PATH, else the usual CUDA install location."""
    explicit = os.environ.get("ATTNWATCH_NCU")
    if explicit:
        return str(Path(explicit).resolve()) if Path(explicit).exists() else None
    for candidate in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if candidate and Path(candidate).exists():
            return str(Path(candidate).resolve())
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
        ideal_bytes=float(case.bytes),  # the operator's byte model (kernels.operators)
        peak_tflops=ceiling.value if ceiling else None,
    )


def profile_cases(
    cases: Sequence[Case],
    out_dir: Path,
    *,
    full: bool = False,
    sections: tuple[str, ...] | None = None,
    timeout_s: float | None = None,
    kernels_root: Path | None = None,
    gpu_name: str | None = None,
    deadline: float | None = None,
    cache_control: str | None = None,
) -> NcuProfile:
    """Profile every case in one ncu process; never raises for ncu's own failures (they land in `errors`).

    `sections`: the metric sections to collect (ci.ncu.metrics.choose_sections; default ones for
    None). `timeout_s` bounds each ncu process (default: ci/run_config.toml [defaults]
    ncu_timeout_s); `deadline` (time.monotonic()) bounds them all. `cache_control` overrides
    metrics.toml's [profile] one (scripts/ncu_check.py measures what `none` would save).
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
    chosen = None if full else choose_sections(",".join(sections) if sections else None)
    pending, kernels, csv_parts, attempt = list(cases), [], [], 0
    silent: dict[str, str] = {}  # case id -> ncu's errors of a pass where the case ran but may have no kernels
    while pending:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            profile.errors.update({case.id: DEADLINE_ERROR for case in pending})
            break
        bounded = timeout_s if left is None else min(timeout_s, left)
        run = _profile_group(
            ncu, pending, out_dir / f"pass{attempt}", chosen, bounded, kernels_root, deadline, cache_control
        )
        kernels += run.kernels
        profile.passes += run.passes
        profile.phases.update(run.phases)
        profile.import_seconds += run.import_s
        csv_parts.append(run.csv_text)
        at_deadline = not run.exited and deadline is not None and time.monotonic() >= deadline
        if chosen and EXACT_SECTION in chosen and not run.kernels and _refused_exact(run):
            # this ncu cannot collect the SASS-patched counts (per opcode, shared-memory
            # wavefronts): profile without them rather than lose every counter; the exact compare
            # then reads the totals and the launch resources alone
            chosen = tuple(name for name in chosen if name != EXACT_SECTION)
            profile.notes.append(
                "ncu refused the exact section's SASS-patched counters (per-opcode counts, shared-memory "
                f"wavefronts); profiled without them: {run.failure or run.why}"
            )
            attempt += 1
            continue
        profile.errors.update({cid: why for cid, why in run.outcomes.items() if why})
        if run.failure:
            silent.update({cid: run.failure for cid, why in run.outcomes.items() if not why})
        rest = [case for case in pending if case.id not in run.outcomes]
        if rest and run.started and not at_deadline:
            # The target died (or hung) inside the first case it did not report: that case alone
            # is lost. A killed ncu wrote no report, so the cases it had finished go again too.
            culprit = rest[0]
            detail = run.failure if run.exited else None
            profile.errors[culprit.id] = (CRASH_ERROR if run.exited else HANG_ERROR) + (
                f" ({detail})" if detail else ""
            )
            if run.exited:  # its report holds the finished cases
                pending = [case for case in pending if case is not culprit and case.id not in run.outcomes]
            else:  # killed: no report, so the finished cases go again (not the ones that failed)
                pending = [case for case in pending if case is not culprit and not run.outcomes.get(case.id)]
            attempt += 1
            continue
        why = run.failure or run.why or "ncu did not profile this case"  # ncu's own error is the root cause
        if at_deadline:
            why = f"{DEADLINE_ERROR} (ncu stopped after {bounded:.0f} s)"
        lost = [case for case in pending if case.id not in run.outcomes or (run.why and not run.outcomes[case.id])]
        profile.errors.update({case.id: why for case in lost})
        break
    collect_records(profile, cases, kernels, gpu_name, silent)
    profile.raw_csv = "\n".join(part for part in csv_parts if part)
    profile.seconds = time.monotonic() - started
    return profile


def collect_records(
    profile: NcuProfile,
    cases: Sequence[Case],
    kernels: list[ParsedKernel],
    gpu_name: str | None,
    silent: dict[str, str],
) -> None:
    """Kernel rows and case metrics for every case, in the cases' order; a case that ran but has
    no kernels says what ncu printed (`silent`: a permission error, say) when it printed anything.
    ci.ncu.profile_cache derives a cached case's records with it too, from the kernels of its table."""
    grouped = group_by_case(kernels)
    for case in cases:
        rows = grouped.get(case.id, [])
        for index, kernel in enumerate(rows):
            profile.kernel_rows.append(
                NcuKernelRow(
                    case_id=case.id,
                    kernel_index=index,
                    kernel_name=kernel.kernel_name,
                    metrics=kernel.metrics,
                    block_size=kernel.block_size,
                    grid_size=kernel.grid_size,
                )
            )
        if case.id in profile.errors:
            profile.case_metrics.append(NcuCaseMetrics(case.id, 0, error=profile.errors[case.id]))
        else:
            metrics = aggregate_case(case.id, rows, case_work(case, gpu_name))
            if metrics.kernel_count == 0:
                metrics.error = silent.get(case.id) or metrics.error or "no kernels"
                profile.errors[case.id] = metrics.error
            profile.case_metrics.append(metrics)


def _all_failed(profile: NcuProfile, cases: Sequence[Case], reason: str, started: float) -> NcuProfile:
    for case in cases:
        profile.errors[case.id] = reason
        profile.case_metrics.append(NcuCaseMetrics(case.id, 0, error=reason))
    profile.seconds = time.monotonic() - started
    return profile


def _target_env(kernels_root: Path | None, scratch: Path) -> dict[str, str]:
    """The profiled program's environment: this checkout's `ci`, maybe another checkout's `kernels`,
    and the flag that tells the variants they run under a profiler (kernels.capabilities)."""
    env = child_env(scratch, Path(kernels_root).resolve() if kernels_root is not None else None)
    env[UNDER_PROFILER_ENV] = "1"
    return env


@dataclass
class _Pass:
    """What one ncu process gave."""

    kernels: list[ParsedKernel]
    csv_text: str
    outcomes: dict[str, str | None]  # case id -> None (profiled) or why not, for each case the target reported
    why: str | None  # why the pass as a whole gave no metrics (no report, import or parse failed)
    failure: str | None  # ncu's error lines when it exited non-zero (a crashed target's last words)
    exited: bool  # ncu exited by itself rather than killed at its time limit
    started: bool  # the target ran (a case reported, or ncu connected to it)
    passes: list[int] = field(default_factory=list)  # replay passes per profiled kernel, from ncu's log
    phases: dict[str, dict[str, float]] = field(default_factory=dict)  # case id -> its stages' seconds
    import_s: float = 0.0  # the report's `ncu --import` to CSV


def plan_entry(case: Case) -> dict:
    """A case as the ncu target rebuilds it (ci/ncu/target.py `case_of`): an attention case by its
    shape's fields (any harness API version has `Shape`), another operator's by its shape id."""
    operator = getattr(case, "operator", "attention")
    if operator == "attention":
        return {"variant": case.variant, "shape": asdict(case.shape), "dtype": case.dtype, "causal": case.causal}
    return {
        "variant": case.variant,
        "shape_id": case.shape.id,
        "dtype": case.dtype,
        "operator": operator,
        "mode": case.mode,
    }


def _profile_group(
    ncu: str,
    cases: list[Case],
    work_dir: Path,
    sections: tuple[str, ...] | None,
    timeout_s: float,
    kernels_root: Path | None,
    deadline: float | None = None,
    cache_control: str | None = None,
) -> _Pass:
    """One ncu process over `cases`. `sections` None means `--set full`. `timeout_s` bounds the
    ncu process; `deadline` (monotonic) also bounds the report import, and the target starts no
    case after `deadline` less the import's margin, so a slow pass still ends with a report."""
    work_dir = work_dir.resolve()  # the target runs elsewhere (below)
    work_dir.mkdir(parents=True, exist_ok=True)
    plan = work_dir / "plan.json"
    stop_at = None if deadline is None else time.time() + (deadline - time.monotonic()) * (1 - IMPORT_MARGIN)
    plan.write_text(json.dumps({"stop_at": stop_at, "cases": [plan_entry(c) for c in cases]}), encoding="utf-8")
    report = work_dir / "report"
    command = ncu_command(ncu, report, sections, plan, cache_control)
    with tempfile.TemporaryDirectory() as scratch:
        # The target runs in the scratch folder: `python -m` puts its working directory first on
        # sys.path, so started from a checkout it would import that checkout's `kernels` ahead
        # of `kernels_root`'s (a compare's base would be profiled with the head's kernels).
        ok, output = _run_bounded(command, _target_env(kernels_root, Path(scratch)), timeout_s, cwd=scratch)
    records = _outcomes(output)
    outcomes = {cid: _outcome_error(record) for cid, record in records.items()}
    run = _Pass(
        [],
        "",
        outcomes,
        None,
        None if ok else _why(output),
        TIMED_OUT not in output,
        bool(outcomes) or CONNECTED in output,
        pass_counts(output),
        {cid: record["phases"] for cid, record in records.items() if isinstance(record.get("phases"), dict)},
    )
    report_file = report.with_suffix(".ncu-rep")
    if not report_file.exists():
        run.why = _why(output) or "ncu wrote no report"
        return run
    if not ok and not outcomes:
        run.why = run.failure
    page = ["--page", "details"] if sections is None else ["--page", "raw"]
    if sections is not None and instanced_metrics(sections):
        page += ["--print-metric-instances", "details"]  # per-opcode counts, each named (ci/ncu/parse.py)
    import_timeout = timeout_s if deadline is None else max(1.0, min(timeout_s, deadline - time.monotonic()))
    importing = time.monotonic()
    imported_ok, csv_text = _run_bounded(
        [ncu, "--import", str(report_file), "--csv", "--print-units", "base", *page],
        dict(os.environ),
        import_timeout,
    )
    run.import_s = time.monotonic() - importing
    # Output the parser refused is not kept as CSV (the bundle's ncu_raw.csv holds only whole
    # tables, history.contract.ncu_csv); why it was refused is each case's error.
    if not imported_ok:
        run.why = "ncu --import failed: " + _why(csv_text)
        return run
    try:
        parsed = parse_ncu_csv(str(report_file), text=csv_text, requested=requested_metrics(sections))
    except NcuParseError as exc:
        run.why = str(exc)
        return run
    if parsed.unknown_columns:
        print(
            f"attnwatch ncu: {report_file}: columns not on ci/ncu/metrics.toml, not read: "
            f"{', '.join(parsed.unknown_columns)}",
            file=sys.stderr,
        )
    run.kernels, run.csv_text = parsed.kernels, csv_text
    return run


def requested_metrics(sections: tuple[str, ...] | None) -> frozenset[str] | None:
    """The metrics ncu is asked for (the parser's `requested`); None for `--set full`."""
    return None if sections is None else frozenset(spec.metric for spec in specs_in(sections))


def collection_options(sections: tuple[str, ...] | None, cache_control: str | None = None) -> list[str]:
    """The options of the ncu command that decide what it collects and how (clocks, caches, replay,
    which launches, the metric list; `sections` None: `--set full`): everything but the paths and
    the target, so ci.ncu.profile_cache keys its entries by them."""
    settings = replay_settings()
    return [
        "--clock-control",
        "none",
        "--cache-control",
        cache_control or settings.cache_control,
        "--replay-mode",
        settings.replay_mode,
        "--profile-from-start",
        "off",
        "--nvtx",
        "--target-processes",
        "application-only",
        *(["--set", "full"] if sections is None else ["--metrics", metrics_argument(sections)]),
    ]


def ncu_command(
    ncu: str, report: Path, sections: tuple[str, ...] | None, plan: Path, cache_control: str | None = None
) -> list[str]:
    """The ncu command that profiles `plan`'s cases (module doc); `sections` None: `--set full`."""
    return [
        ncu,
        *collection_options(sections, cache_control),
        "--force-overwrite",
        "--export",
        str(report),
        sys.executable,
        "-m",
        "attnwatch.ci.ncu.target",
        str(plan),
    ]


def pass_counts(output: str) -> list[int]:
    """The replay passes ncu printed for each kernel it profiled, in order."""
    return [int(m.group(1)) for m in map(_PASSES.match, output.splitlines()) if m]


EXACT_SECTION = "exact"  # metrics.toml's section of the SASS-patched counts


def _refused_exact(run: "_Pass") -> bool:
    """ncu refused the run and named one of the exact section's metrics in its error (by its base
    name: ncu names a metric without the `.sum` it was asked with)."""
    said = f"{run.failure or ''} {run.why or ''}"
    return any(spec.metric.split(".")[0] in said for spec in specs_in((EXACT_SECTION,)))


def _outcome_error(record: dict) -> str | None:
    if record["status"] == "ok":
        return None
    if record["status"] == "deadline":
        return DEADLINE_ERROR
    return f"{record['status']}: {record['error']}"


def _run_bounded(command: list[str], env: dict[str, str], timeout_s: float, cwd: str | None = None) -> tuple[bool, str]:
    """Run in a new process group; on timeout kill the whole group (ncu and its target)."""
    try:
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
            cwd=cwd,
        )
    except OSError as exc:
        return False, f"==ERROR== could not start {command[0]}: {exc}"
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        return False, (output or "") + f"\n{TIMED_OUT} after {timeout_s:.0f} s"
    return proc.returncode == 0, output or ""


def _outcomes(output: str) -> dict[str, dict]:
    found = {}
    for line in output.splitlines():
        if line.startswith(OUTCOME_PREFIX):
            try:
                record = json.loads(line[len(OUTCOME_PREFIX) :])
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
