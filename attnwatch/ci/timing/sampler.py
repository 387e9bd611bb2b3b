"""Warm-up and the interleaved adaptive sampler: the core of every measured latency.

Method. The variants of one group (same shape, dtype, causal) are timed together in
round-robin blocks of `block_calls` calls; the order of the round rotates by one each round
so that no variant always follows the same neighbour. A variant leaves the rotation when

* it has at least `min_samples` calls and IQR/median <= `target_rel_spread` (converged), or
* it reached `max_samples` calls or `time_cap_s` seconds of timing wall time (not converged).

Interleaving makes slow drift (clocks, temperature, other tenants) hit every variant of the
group alike, which is what makes the gap to baseline stable run to run (nvbench and tritonbench time
one variant at a time; the seeds' cross-day baselines are the failure this avoids). After each
block the SM clock's throttle reasons are read; the block's samples are flagged as throttled
when a clock-lowering reason is active, and counted.

Power and clocks (ci/timing/power.py, a run's recipe): with `clock_record` the host polls the
SM clock while each block runs and every sample gets its clock; with `pacing` each call is
preceded by an idle gap (from the call's duration or from NVML's power draw); with `clock_band`
samples off the modal clock are left out of the statistics and counted. The stopping rule
judges the samples the statistics will use.

Cost: per call one L2 flush (a memset of `flush_l2_multiple` x L2) plus the call; one sync and
two NVML reads per block (with a clock record, NVML clock reads for as long as the block runs,
on the host, which waits anyway; with power pacing two more reads per block).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from attnwatch.ci.run_config import TimingConfig
from attnwatch.ci.timing.gpu_state import is_throttling
from attnwatch.ci.timing.power import PacingPolicy, band_keep
from attnwatch.ci.timing.timers import BlockTimer, Flusher
from attnwatch.history.analysis.statistics import summarize


@dataclass
class Subject:
    """One case to time: its key (the case id) and the zero-argument call."""

    key: str
    fn: Callable[[], Any]


@dataclass
class RawMeasurement:
    """What the sampler saw for one subject; statistics come later (ci.timing.derived)."""

    key: str
    timing_mode: str
    samples_us: list[float] = field(default_factory=list)
    converged: bool = False
    timing_wall_s: float = 0.0
    sm_clock_mhz_before: int | None = None
    sm_clock_mhz_after: int | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    throttled_samples: int = 0
    graph_median_us: float | None = None
    graph_note: str | None = None
    error: str | None = None
    # Guard-kernel outcome of this subject's blocks (timers.GuardPolicy), None without a guard:
    # blocks re-timed because the host's enqueue outlasted the guard, and blocks kept although
    # still uncovered after the last attempt (their samples may contain host gaps).
    guard_retimed_blocks: int | None = None
    guard_uncovered_blocks: int | None = None
    # With a clock record (config.clock_record): each sample's SM clock (MHz; None where the
    # block got no reading), and the reference clock of the normalised median.
    clocks_mhz: list[float | None] = field(default_factory=list)
    reference_clock_mhz: float | None = None
    recipe: str | None = None
    band_applied: float = 0.0  # the clock band the statistics apply (ci.timing.power.band_keep); 0: none
    pacing_gap_s: float | None = None  # idle gap inserted before this subject's calls (pacing's cost)


class SubjectFailed(Exception):
    """A subject raised while being timed; carries its key so the caller can attribute it."""

    def __init__(self, key: str, exc: BaseException) -> None:
        self.key = key
        self.exc = exc
        super().__init__(f"{key}: {type(exc).__name__}: {exc}")


def warm_up(fn: Callable[[], Any], config: TimingConfig, timer: BlockTimer, flusher: Flusher) -> None:
    """Calls `fn` `warmup_calls` times and for at least `warmup_min_s`, then synchronizes.

    Compilation and autotuning happen in `prepare` or the first call and so stay here, out of
    the samples; the minimum duration lets an idle GPU's clock ramp up before sampling.
    """
    start = time.perf_counter()
    calls = 0
    while calls < config.warmup_calls or time.perf_counter() - start < config.warmup_min_s:
        flusher.flush()
        fn()
        calls += 1
        if calls >= 10_000:
            break
    timer.synchronize()


def measure_interleaved(
    subjects: list[Subject],
    config: TimingConfig,
    timer: BlockTimer,
    flusher: Flusher,
    monitor: Any,
    on_block: Callable[[str], None] = lambda key: None,
    is_fatal: Callable[[BaseException], bool] = lambda exc: False,
    after_block: Callable[[], None] = lambda: None,
) -> dict[str, RawMeasurement]:
    """Times `subjects` round-robin until each converges or hits its cap (module docstring).

    `on_block(key)` is called before each block (the caller journals a heartbeat naming the
    case in flight). A subject that raises is dropped with its error recorded, unless
    `is_fatal(exc)` says the exception poisoned the process (a CUDA error): then
    `SubjectFailed` propagates so the caller can record the crash and exit. `after_block()`
    runs after each block as part of it (the harness synchronizes the device there, so an
    asynchronous error of the block is charged to the subject that issued it).
    """
    results = {s.key: RawMeasurement(key=s.key, timing_mode=timer.mode) for s in subjects}
    policy = getattr(timer, "policy", None)  # timers written before the guard have none
    if policy is not None:
        for raw in results.values():
            raw.guard_retimed_blocks = raw.guard_uncovered_blocks = 0
    clock = monitor.sm_clock_mhz if config.clock_record and getattr(monitor, "available", False) else None
    reference = _reference_clock(config, monitor) if clock is not None else None
    pacing = PacingPolicy(
        mode=config.pacing,
        duty=config.pacing_duty,
        margin=config.pacing_power_margin,
        min_call_us=config.pacing_min_call_us,
    )
    for s in subjects:
        results[s.key].sm_clock_mhz_before = monitor.sm_clock_mhz()
        results[s.key].recipe = config.recipe
        results[s.key].reference_clock_mhz = reference
        results[s.key].band_applied = config.clock_band if clock is not None else 0.0
        if config.pacing != "none":
            results[s.key].pacing_gap_s = 0.0
    active = list(subjects)
    rnd = 0
    while active:
        shift = rnd % len(active)
        order = active[shift:] + active[:shift]
        rnd += 1
        for subject in order:
            raw = results[subject.key]
            on_block(subject.key)
            t0 = time.perf_counter()
            if policy is not None:
                # The policy counts per timer, across subjects: attribute by difference.
                retimed, uncovered = policy.retimed_blocks, policy.uncovered_blocks
            gap_us = pacing.gap_us(subject.key)
            try:
                if clock is None and gap_us <= 0:
                    block = timer.time_block(subject.fn, config.block_calls, flusher, key=subject.key)
                else:
                    block = timer.time_block(
                        subject.fn, config.block_calls, flusher, key=subject.key, gap_us=gap_us, clock=clock
                    )
                after_block()
            except Exception as exc:  # noqa: BLE001 - any failure of the subject is attributed to it
                if is_fatal(exc):
                    raise SubjectFailed(subject.key, exc) from exc
                raw.error = f"{type(exc).__name__}: {exc}"
                active.remove(subject)
                continue
            raw.timing_wall_s += time.perf_counter() - t0
            if policy is not None:
                raw.guard_retimed_blocks += policy.retimed_blocks - retimed
                raw.guard_uncovered_blocks += policy.uncovered_blocks - uncovered
            reasons = monitor.reasons()
            for reason in reasons:
                if reason not in raw.throttle_reasons:
                    raw.throttle_reasons.append(reason)
            if is_throttling(reasons):
                raw.throttled_samples += len(block)
            raw.samples_us.extend(block)
            if clock is not None:
                clocks = list(getattr(timer, "last_clocks", []) or [])
                raw.clocks_mhz.extend(clocks if len(clocks) == len(block) else [None] * len(block))
            if config.pacing != "none":
                raw.pacing_gap_s = (raw.pacing_gap_s or 0.0) + gap_us * len(block) * 1e-6  # 0.0 from the start
                power_w, limit_w = (
                    (monitor.power_w(), monitor.power_limit_w()) if config.pacing == "power" else (None, None)
                )
                pacing.after_block(block, subject.key, power_w, limit_w, capped="sw_power_cap" in reasons)
            if _finished(raw, config):
                raw.sm_clock_mhz_after = monitor.sm_clock_mhz()
                active.remove(subject)
    return results


def _reference_clock(config: TimingConfig, monitor: Any) -> float | None:
    """f_ref of the clock-normalised median: the declared clock, else the GPU's maximum SM clock."""
    if config.reference_clock_mhz > 0:
        return float(config.reference_clock_mhz)
    top = monitor.max_sm_clock_mhz() if hasattr(monitor, "max_sm_clock_mhz") else None
    return float(top) if top else None


def kept(raw: RawMeasurement) -> tuple[list[float], list[float | None]]:
    """The samples the statistics use and their clocks: all of them, or those inside the clock
    band (ci.timing.power.band_keep); the clocks are empty without a clock record."""
    if raw.band_applied <= 0 or not raw.clocks_mhz:
        return raw.samples_us, raw.clocks_mhz
    keep = band_keep(raw.clocks_mhz, raw.band_applied)
    return ([t for t, k in zip(raw.samples_us, keep) if k], [c for c, k in zip(raw.clocks_mhz, keep) if k])


def _finished(raw: RawMeasurement, config: TimingConfig) -> bool:
    samples = kept(raw)[0]
    n = len(samples)
    if n >= config.min_samples and summarize(samples).rel_spread <= config.target_rel_spread:
        raw.converged = True
        return True
    return len(raw.samples_us) >= config.max_samples or raw.timing_wall_s >= config.time_cap_s
