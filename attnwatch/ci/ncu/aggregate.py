"""Per-case Nsight Compute metrics from per-kernel rows, plus the derived roofline inputs.

Rules (docs/design.md "Metrics: ncu"): a multi-kernel variant's durations, bytes and instruction
counts are summed; percentages and rates are weighted by each kernel's duration, so a 5 µs
scale kernel does not count as much as a 100 µs softmax; per-launch resources (registers,
shared memory, occupancy limits) take the largest kernel's value.
"""

from __future__ import annotations

from dataclasses import dataclass

from attnwatch.ci.ncu.metrics import MetricSpec, metric_specs
from attnwatch.ci.ncu.parse import ParsedKernel
from attnwatch.history.contract.bundle import NcuCaseMetrics

DURATION_METRIC = "gpu__time_duration.sum"
_LIMIT_FIELDS = {
    "limit_registers_blocks": "registers",
    "limit_shared_mem_blocks": "shared_mem",
    "limit_warps_blocks": "warps",
    "limit_blocks_blocks": "block_slots",
}


@dataclass(frozen=True)
class CaseWork:
    """What the case must do, for the derived metrics: FLOPs and the fewest DRAM bytes."""

    flops: float
    ideal_bytes: float
    peak_tflops: float | None = None  # a measured ceiling (history/analysis/ceilings.toml), if known


def combine(spec: MetricSpec, kernels: list[ParsedKernel]) -> float | None:
    """One quantity for the case from its kernels, by the spec's rule; None if no kernel had it."""
    pairs = [(k.metrics[spec.metric], k.metrics.get(DURATION_METRIC)) for k in kernels if spec.metric in k.metrics]
    if not pairs:
        return None
    values = [v for v, _ in pairs]
    if spec.combine == "sum":
        total = sum(values)
    elif spec.combine == "max":
        total = max(values)
    else:
        weights = [w for _, w in pairs if w is not None]
        if len(weights) < len(pairs) or sum(weights) <= 0:
            total = sum(values) / len(values)  # no durations: plain mean, the honest fallback
        else:
            total = sum(v * w for v, w in zip(values, weights)) / sum(weights)
    return total * spec.scale


def occupancy_limiter(kernel: ParsedKernel) -> str | None:
    """Which resource caps blocks per SM: the smallest of ncu's four limits (ties joined by '+').

    For a multi-kernel case this is asked of its longest kernel, where the time goes.
    """
    by_field = {spec.field: spec.metric for spec in metric_specs()}
    limits = {name: kernel.metrics.get(by_field[key]) for key, name in _LIMIT_FIELDS.items()}
    known = {name: v for name, v in limits.items() if v is not None}
    if not known:
        return None
    low = min(known.values())
    return "+".join(sorted(name for name, v in known.items() if v == low))


def aggregate_case(case_id: str, kernels: list[ParsedKernel], work: CaseWork | None = None) -> NcuCaseMetrics:
    """NcuCaseMetrics for one case's kernels (all launches inside its NVTX range)."""
    if not kernels:
        return NcuCaseMetrics(case_id=case_id, kernel_count=0, error="no kernels were profiled in this case's range")
    q = {spec.field: combine(spec, kernels) for spec in metric_specs()}
    result = NcuCaseMetrics(
        case_id=case_id,
        kernel_count=len(kernels),
        duration_us=q["duration_us"],
        sm_throughput_pct=q["sm_throughput_pct"],
        memory_throughput_pct=q["memory_throughput_pct"],
        dram_throughput_pct=q["dram_throughput_pct"],
        dram_bytes=_add(q["dram_read_bytes"], q["dram_write_bytes"]),
        achieved_occupancy_pct=q["achieved_occupancy_pct"],
        theoretical_occupancy_pct=q["theoretical_occupancy_pct"],
        tensor_pipe_pct=q["tensor_pipe_pct"],
        hmma_instructions=q["hmma_instructions"],
        gmma_instructions=q["gmma_instructions"],
        l2_hit_rate_pct=q["l2_hit_rate_pct"],
        registers_per_thread=q["registers_per_thread"],
        shared_mem_per_block_bytes=q["shared_mem_per_block_bytes"],
        local_memory_bytes=_add(q["local_load_bytes"], q["local_store_bytes"]),
        sm_clock_mhz=q["sm_clock_mhz"],
        occupancy_limiter=occupancy_limiter(max(kernels, key=lambda k: k.metrics.get(DURATION_METRIC, 0.0))),
    )
    missing = sorted({m for k in kernels for m in k.missing})
    if missing:
        result.error = "not collected: " + ", ".join(missing)
    if work is not None:
        _derive(result, work)
    return result


def _derive(result: NcuCaseMetrics, work: CaseWork) -> None:
    """Roofline inputs: achieved TFLOPS from ncu's own duration, bytes against the ideal."""
    result.dram_bytes_ideal = work.ideal_bytes
    if result.duration_us:
        result.achieved_tflops = work.flops / (result.duration_us * 1e-6) / 1e12
    if result.dram_bytes:
        result.arithmetic_intensity = work.flops / result.dram_bytes
    if work.peak_tflops and result.achieved_tflops is not None:
        result.peak_tflops = work.peak_tflops
        result.pct_of_peak = 100.0 * result.achieved_tflops / work.peak_tflops


def _add(a: float | None, b: float | None) -> float | None:
    if a is None and b is None:
        return None
    return (a or 0.0) + (b or 0.0)


def group_by_case(kernels: list[ParsedKernel]) -> dict[str, list[ParsedKernel]]:
    """Kernels grouped by their NVTX range (the case id); kernels outside any range are dropped."""
    groups: dict[str, list[ParsedKernel]] = {}
    for kernel in kernels:
        if kernel.nvtx_range:
            groups.setdefault(kernel.nvtx_range, []).append(kernel)
    return groups
