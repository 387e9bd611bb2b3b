"""From raw samples to `history.contract.bundle.CaseTiming`: statistics and derived metrics.

Definitions (docs/design.md "Metrics", one each, used everywhere):

* statistics: `history.analysis.statistics.summarize` (order statistics, Hyndman & Fan type 7);
* us_per_head = median / (B*H), the seeds' unit;
* TFLOPS = flops / median, flops by the operator's model (kernels.operators; attention:
  4*B*H*Sq*Sk*D, halved when causal); bytes the operator's byte model (the fewest DRAM bytes
  one call moves: attention's Q, K, V and O once), what a memory-bound roofline divides;
* gap_to_baseline = median / median(baseline) of the same interleave group (same process, same
  GPU, timed round-robin), the baseline being the one the plan names for the case's operator
  (kernels.operators.Operator.baseline: attention's `sdpa`), recorded in baseline_variant;
  gap_to_backends the same against each measured reference of the operator
  (Operator.references: attention's SDPA backends); fastest_reference the reference with the
  lowest median, and gap_to_fastest_reference the gap to it.
  Gaps are only ever taken inside one interleave group, never across processes or runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.timing.sampler import RawMeasurement
from attnwatch.ci.timing.power import summarize_clocks
from attnwatch.history.contract.bundle import CaseTiming
from attnwatch.history.analysis.statistics import summarize


@dataclass(frozen=True)
class KernelRan:
    """What a variant's Prepared said its call runs (kernels.variant.Prepared): the launch
    configuration, how it was chosen, and the digest of a binary compiled in the process."""

    config: str | None = None
    config_source: str | None = None
    binary_sha256: str | None = None

    @classmethod
    def of(cls, prepared) -> KernelRan:
        """From a Prepared of any checkout's kernels (an older one has no binary_sha256)."""
        return cls(prepared.config, prepared.config_source, getattr(prepared, "binary_sha256", None))


def case_timing(
    case: PlannedCase,
    raw: RawMeasurement,
    interleave_group: str,
    kernel: KernelRan = KernelRan(),
) -> CaseTiming:
    """Summary statistics and per-case derived metrics (gaps are filled by `apply_gaps`).
    `kernel` is what the variant's Prepared said it ran.
    With a clock band the statistics are those of the samples inside it (`ci.timing.sampler.kept`), and
    the clock summary (ci/timing/power.py) goes beside them under its own names."""
    kept, clocks = summarize_clocks(raw.samples_us, raw.clocks_mhz, raw.reference_clock_mhz, raw.band_applied)
    s = summarize(kept)  # the samples inside the clock band, or all of them
    return CaseTiming(
        case_id=case.case_id,
        variant=case.variant,
        shape_id=case.shape_id,
        batch=case.batch,
        heads=case.heads,
        seq_q=case.seq_len,
        seq_k=case.seq_len,
        head_dim=case.head_dim,
        dtype=case.dtype,
        causal=case.causal,
        operator=case.operator,
        bound=case.bound,
        bytes=case.bytes,
        timing_mode=raw.timing_mode,
        **asdict(s),
        us_per_head=s.median_us / (case.batch * case.heads),
        tflops=case.flops / (s.median_us * 1e-6) / 1e12,
        converged=raw.converged,
        graph_median_us=raw.graph_median_us,
        sm_clock_mhz_before=raw.sm_clock_mhz_before,
        sm_clock_mhz_after=raw.sm_clock_mhz_after,
        throttle_reasons=list(raw.throttle_reasons),
        throttled_samples=raw.throttled_samples,
        interleave_group=interleave_group,
        guard_retimed_blocks=raw.guard_retimed_blocks,
        guard_uncovered_blocks=raw.guard_uncovered_blocks,
        kernel_config=kernel.config,
        kernel_config_source=kernel.config_source,
        kernel_binary_sha256=kernel.binary_sha256,
        timing_recipe=raw.recipe,
        pacing_gap_s=raw.pacing_gap_s,
        **asdict(clocks),
    )


def apply_gaps(timings: list[CaseTiming], baselines: dict[str, str], references: dict[str, list[str]]) -> None:
    """Fill gap_to_baseline (and baseline_variant), gap_to_backends, fastest_reference and
    gap_to_fastest_reference, per interleave group and operator.

    `baselines`: operator -> the plan's baseline variant (RunPlan.baselines); `references`:
    operator -> the variants its kernel team compares with (RunPlan.references). Mutates the
    timings in place; a group without its baseline gets no gap_to_baseline, one without any
    reference no fastest reference.
    """
    groups: dict[tuple[str | None, str], list[CaseTiming]] = {}
    for t in timings:
        groups.setdefault((t.interleave_group, t.operator), []).append(t)
    for (_, operator), members in groups.items():
        by_variant = {t.variant: t for t in members}
        reference = baselines.get(operator)
        measured = {v: by_variant[v] for v in references.get(operator, ()) if v in by_variant}
        baseline = by_variant.get(reference) if reference else None
        fastest = min(measured.values(), key=lambda t: t.median_us) if measured else None
        for t in members:
            if baseline is not None:
                t.gap_to_baseline = t.median_us / baseline.median_us
                t.baseline_variant = baseline.variant
            t.gap_to_backends = {v: t.median_us / b.median_us for v, b in sorted(measured.items())}
            if fastest is not None:
                t.fastest_reference = fastest.variant
                t.gap_to_fastest_reference = t.median_us / fastest.median_us
