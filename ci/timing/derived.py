"""From raw samples to `history.contract.bundle.CaseTiming`: statistics and derived metrics.

Definitions (docs/design.md "Metrics", one each, used everywhere):

* statistics: `history.analysis.statistics.summarize` (order statistics, Hyndman & Fan type 7);
* us_per_head = median / (B*H), the seeds' unit;
* TFLOPS = flops / median, flops = 4*B*H*Sq*Sk*D, halved when causal;
* gap_to_sdpa = median / median(reference) of the same interleave group (same process, same
  GPU, timed round-robin), the reference being the variant the plan names (the registry's
  `is_reference`: `sdpa`); gap_to_backends the same against each other measured SDPA backend;
  fastest_backend the SDPA-family variant with the lowest median, and the gap to it.
  Gaps are only ever taken inside one interleave group, never across processes or runs.
"""

from __future__ import annotations

from dataclasses import asdict

from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.timing.engine import RawMeasurement
from attnwatch.ci.timing.power import summarize_clocks
from attnwatch.history.contract.bundle import CaseTiming
from attnwatch.history.analysis.statistics import summarize


def case_timing(case: PlannedCase, raw: RawMeasurement, interleave_group: str,
                kernel_config: tuple[str | None, str | None] = (None, None)) -> CaseTiming:
    """Summary statistics and per-case derived metrics (gaps are filled by `apply_gaps`).
    `kernel_config` is what the variant's Prepared said it ran: (config, config_source).
    With a clock band the statistics are those of the samples inside it (`ci.timing.engine.kept`), and
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
        kernel_config=kernel_config[0],
        kernel_config_source=kernel_config[1],
        timing_recipe=raw.recipe,
        pacing_gap_s=raw.pacing_gap_s,
        **asdict(clocks),
    )


def apply_gaps(timings: list[CaseTiming], families: dict[str, str], reference: str) -> None:
    """Fill gap_to_sdpa, gap_to_backends, fastest_backend and its gap, per interleave group.

    `families` maps variant name -> family; the SDPA family ("sdpa") supplies the backends.
    `reference`: the plan's reference variant (RunPlan.reference). Mutates the timings in
    place; a group without the reference gets no gap_to_sdpa.
    """
    groups: dict[str | None, list[CaseTiming]] = {}
    for t in timings:
        groups.setdefault(t.interleave_group, []).append(t)
    for members in groups.values():
        by_variant = {t.variant: t for t in members}
        backends = {v: t for v, t in by_variant.items() if families.get(v) == "sdpa"}
        baseline = by_variant.get(reference)
        fastest = min(backends.values(), key=lambda t: t.median_us) if backends else None
        for t in members:
            if baseline is not None:
                t.gap_to_sdpa = t.median_us / baseline.median_us
            t.gap_to_backends = {v: t.median_us / b.median_us for v, b in sorted(backends.items()) if v != reference}
            if fastest is not None:
                t.fastest_backend = fastest.variant
                t.gap_to_fastest_backend = t.median_us / fastest.median_us
