"""What one A/B round measured for one side: per case, samples, gap to baseline, correctness, ncu.

A round is one run bundle (`DIR/bundles/<side>-round<k>`, written by ci/compare/bundles.py
from one round of a side's warm worker, or recorded earlier by `attnwatch run`). It is read by
the bundle contract's one reader, history.contract.validate (every file's schema version, every field,
the files' agreement), and nothing else; it needs no database, so compare runs on a GPU host
without duckdb. A round may say commit "unknown" (a base measured from an exported checkout):
compare can still compare it, though the history would not store it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnwatch.history.contract.bundle import SAMPLES_FILE, NcuKernelRow
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.loaded_bundle import LoadedBundle
from attnwatch.history.contract.validate import load_bundle
from attnwatch.history.analysis.kernel_launches import Launch, launch_counters
from attnwatch.history.analysis.ncu_explain import DURATION, combine_kernels

# ncu case metrics worth showing next to a regression (NcuCaseMetrics field names).
NCU_FIELDS = (
    "duration_us",
    "sm_throughput_pct",
    "dram_throughput_pct",
    "dram_bytes",
    "achieved_occupancy_pct",
    "tensor_pipe_pct",
    "l2_hit_rate_pct",
    "registers_per_thread",
    "shared_mem_per_block_bytes",
    "local_memory_bytes",
    "sm_clock_mhz",
)


@dataclass
class CaseRound:
    case_id: str
    variant: str
    shape_id: str
    dtype: str
    causal: bool
    status: str
    samples_us: list[float] = field(default_factory=list)
    gap_to_baseline: float | None = None
    baseline_variant: str | None = None
    correct: bool | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    error: str | None = None
    ncu: dict[str, float] = field(default_factory=dict)
    # Every ncu counter of the case, its kernels combined (history.analysis.ncu_explain): what
    # the counter rules read.
    counters: dict[str, float] = field(default_factory=dict)
    # The profiled call's kernels in launch order (ncu's names and durations), which the cause names.
    launches: list[Launch] = field(default_factory=list)
    # As a worker reported them, for the round's bundle (ci/compare/bundles.py): the CaseTiming
    # (a dict, as history.contract.bundle.CaseTiming) and the correctness records checked in this round.
    timing: dict | None = None
    checks: list[dict] = field(default_factory=list)
    operator: str = "attention"  # kernels.operators: what the case computes

    @property
    def kernel_config(self) -> str | None:
        """The launch configuration the kernel ran with this round (CaseTiming.kernel_config)."""
        value = (self.timing or {}).get("kernel_config")
        return value if isinstance(value, str) else None

    @property
    def kernel_binary(self) -> str | None:
        """The sha256 of the binary the kernel ran this round, when compiled in the measuring
        process (CaseTiming.kernel_binary_sha256)."""
        value = (self.timing or {}).get("kernel_binary_sha256")
        return value if isinstance(value, str) else None


@dataclass
class RoundData:
    bundle: str
    gpu_name: str | None
    commit_sha: str
    cases: dict[str, CaseRound]
    environment: dict = field(default_factory=dict)
    started_at: str = ""  # ISO 8601 UTC: when the side's round began and ended
    finished_at: str = ""
    repo: str = ""  # the repository the round's manifest names
    dirty: bool = False  # the round measured a checkout with uncommitted changes


def read_round(bundle_dir: str | Path) -> RoundData:
    """Read one bundle's cases for comparison; raises BundleError naming the file and field."""
    return round_of(load_bundle(Path(bundle_dir), known_commit=False))


def round_of(bundle: LoadedBundle) -> RoundData:
    """A validated run as one round: a bundle, or a pytest-benchmark file of the pytest plugin's
    measurements (history.contract.pytest_benchmark_import; `attnwatch compare --pytest`)."""
    bundle_dir = bundle.source_path
    samples_file = Path(bundle_dir) / SAMPLES_FILE if bundle.source == "bundle" else Path(bundle_dir)
    cases = {
        o.case_id: CaseRound(
            o.case_id, o.variant, o.shape_id, o.dtype, o.causal, o.status, error=o.error, operator=o.operator
        )
        for o in bundle.outcomes
    }
    for timing in bundle.timings:
        case = cases.get(timing.case_id)
        if case is not None:
            case.gap_to_baseline, case.baseline_variant = timing.gap_to_baseline, timing.baseline_variant
            case.timing = asdict(timing)  # as the worker reported it (kernel_config among it)
    for case_id, values in bundle.samples.items():
        zero = next((i for i, v in enumerate(values) if v <= 0), None)
        if zero is not None:  # the reader allows 0 µs; a ratio of medians cannot use it
            raise BundleError(
                samples_file, f"samples.{case_id}[{zero}]", f"{values[zero]}: compare needs positive latencies"
            )
        cases[case_id].samples_us = list(values)
    for rec in bundle.correctness:
        case = cases.get(rec.case_id)
        if case is None:
            continue
        case.correct = rec.passed if case.correct is None else (case.correct and rec.passed)
        for name in ("max_abs_err", "rel_err"):
            value = getattr(rec, name)
            if value is not None:
                setattr(case, name, max(value, getattr(case, name) or 0.0))
        if not rec.passed and rec.error and not case.error:
            case.error = rec.error
    for row in bundle.ncu_cases:
        case = cases.get(row.case_id)
        if case is not None:
            case.ncu = {k: getattr(row, k) for k in NCU_FIELDS if getattr(row, k) is not None}
    by_case: dict[str, list[NcuKernelRow]] = {}
    for kernel in bundle.ncu_kernels:
        by_case.setdefault(kernel.case_id, []).append(kernel)
    for case_id, kernels in by_case.items():
        if case_id in cases:
            kernels.sort(key=lambda k: k.kernel_index)
            cases[case_id].counters = combine_kernels(k.metrics for k in kernels)
            cases[case_id].launches = [
                Launch(k.kernel_name, k.metrics.get(DURATION), launch_counters(k.metrics)) for k in kernels
            ]
    env = asdict(bundle.manifest.environment)
    m = bundle.manifest
    return RoundData(
        bundle_dir, env.get("gpu_name"), m.commit_sha, cases, env, m.started_at, m.finished_at, m.repo, m.dirty
    )
