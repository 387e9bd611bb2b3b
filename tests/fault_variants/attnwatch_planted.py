"""A planted slowdown of a known size, for checking that compare catches one (never in the registry).

`t_planted` is `sdpa` followed by a calibrated amount of extra work, on both sides of a compare,
so the two sides differ only in that amount: in the head worker (ATTNWATCH_SIDE=head, set by
ci/workers/client.py) the extra work is ATTNWATCH_PLANTED_SLOWDOWN (default 0.03) times the
base composite's own median. How:

* GPU: after the SDPA call, a `torch.cuda._sleep` spin (a device loop of a given cycle count).
  Both sides spin, the base for 1 µs, so both have the same launch structure and only the spin
  length differs. Once per case and process the head sizes its extra spin by measurement: five
  spin lengths timed side by side with the harness's own timer (guard kernel, L2 flushed before
  each call) and a straight line fitted through their medians (`_calibrated_spin`). The
  realized slowdown is what the compare's base and head medians say.
* CPU: after the call, a busy-wait of slowdown x (the call's median host time).

Imported by a compare worker through `--variant-module attnwatch_planted --variant-path tests/fault_variants`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch

from attnwatch.kernels import registry
from attnwatch.kernels.registry import Prepared, Variant, register

WRAPPED = "sdpa"
_calibrated: dict[str, dict] = {}  # case id -> the spin and how it was calibrated (GPU); the call's median (CPU)


def planted_slowdown() -> float:
    if os.environ.get("ATTNWATCH_SIDE") != "head":
        return 0.0
    return float(os.environ.get("ATTNWATCH_PLANTED_SLOWDOWN", "0.03"))


def _with_spin(inner, cycles: int):
    def fn():
        out = inner()
        torch.cuda._sleep(cycles)
        return out

    return fn


def _medians(fns, timer, flusher, calls: int) -> list[float]:
    """Medians of `fns` as the harness times them: its warm-up, then its interleaved sampler
    (ci.timing.sampler: round-robin blocks behind the guard kernel, 4 x L2 flushed before each
    call), exactly `calls` calls each."""
    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NullMonitor

    config = timing_config("cuda").with_overrides(
        min_samples=calls, max_samples=calls, time_cap_s=60.0, target_rel_spread=-1.0
    )
    for fn in fns:
        warm_up(fn, config, timer, flusher)
    raws = measure_interleaved([Subject(str(i), fn) for i, fn in enumerate(fns)], config, timer, flusher, NullMonitor())
    return [statistics.median(raws[str(i)].samples_us) for i in range(len(fns))]


FIT_MULTIPLES = (0.0, 0.5, 1.0, 1.5, 2.0)  # extra spins measured, in multiples of the first guess
FIT_REPEATS = 3  # interleaved passes over them, 400 calls each per pass


def _calibrated_spin(inner, slowdown: float) -> dict:
    """Spin cycles (1 µs, plus the head's extra) that make the composite `slowdown` slower as the
    harness measures it, from a straight line fitted to measurements.

    How: five extra spins (0 to 2x the first guess, slowdown x median x the spin's rate) are timed
    side by side with the harness's timer, three interleaved passes; the composite's median is
    fitted by least squares as intercept + slope x extra cycles, and the extra is the one the line
    puts at (1 + slowdown) x intercept. Why a fit: scaling one guess by one measured ratio chased
    noise. On the H200 (2026-11-23, c57d880) the in-process head/base ratio of ~20 µs composites
    read 1.8%, 3.4%, 3.9% in three successive 600-call measurements, so the extra spins chosen for
    one case were 1,023 to 1,963 cycles in three compares, and the compares read +0.8% to +3.6%.
    Five spin lengths x 1,200 calls pin the line down, and its slope shows whether a spin's cycles
    add to the composite at the nominal rate (1 / cycles_per_us µs each) or not. What a compare
    reads still carries the offset between its two worker processes (docs/benchmarks/compare.md, "The PR
    check on the H200")."""
    import numpy as np

    from attnwatch.ci.timing.timers import CudaEventTimer, L2Flusher, spin_cycles_per_us

    device = torch.device("cuda", torch.cuda.current_device())
    flusher = L2Flusher(device, 4 * torch.cuda.get_device_properties(device).L2_cache_size)
    timer = CudaEventTimer(10)
    per_us = spin_cycles_per_us(torch)
    base = int(per_us)  # 1 µs on both sides
    info = {"cycles_per_us": per_us, "base_spin_cycles": base}
    if slowdown <= 0:
        return {**info, "spin_cycles": base}
    guess = slowdown * _medians([_with_spin(inner, base)], timer, flusher, calls=200)[0] * per_us
    extras = [int(m * guess) for m in FIT_MULTIPLES]
    xs, ys = [], []
    for _ in range(FIT_REPEATS):
        medians = _medians([_with_spin(inner, base + e) for e in extras], timer, flusher, calls=400)
        xs += extras
        ys += medians
    slope, intercept = (float(v) for v in np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1))
    extra = slowdown * intercept / slope if slope > 0 else guess
    return {
        **info,
        "spin_cycles": base + int(extra),
        "composite_median_us": intercept,
        "fit_us_per_cycle": slope,
        "nominal_us_per_cycle": 1.0 / per_us,
        "first_guess_cycles": int(guess),
        "fit_points": [[x, round(y, 4)] for x, y in zip(xs, ys)],
    }


def _gpu(case, inner, slowdown: float):
    if case.id not in _calibrated:
        _calibrated[case.id] = _calibrated_spin(inner, slowdown)
        # into the worker's log (workers/<side>/*.log): what this process planted, to set beside what the compare read
        print(
            f"t_planted calibration {case.id} side={os.environ.get('ATTNWATCH_SIDE')}: {json.dumps(_calibrated[case.id])}",
            file=sys.stderr,
            flush=True,
        )
    info = _calibrated[case.id]
    return _with_spin(inner, info["spin_cycles"]), info


def _cpu(case, inner, slowdown: float):
    if case.id not in _calibrated:
        samples = []
        for _ in range(15):
            t0 = time.perf_counter()
            inner()
            samples.append(time.perf_counter() - t0)
        _calibrated[case.id] = {"call_median_us": statistics.median(samples) * 1e6}
    call_us = _calibrated[case.id]["call_median_us"]
    extra_s = slowdown * call_us / 1e6

    def fn():
        out = inner()
        until = time.perf_counter() + extra_s
        while time.perf_counter() < until:
            pass
        return out

    return fn, {"call_median_us": call_us, "extra_us": extra_s * 1e6}


def _prepare(case, device, seed):
    inner = registry.get(WRAPPED).prepare(case, device, seed)
    slowdown = planted_slowdown()
    fn, info = (_gpu if device.type == "cuda" else _cpu)(case, inner.fn, slowdown)
    return Prepared(
        fn=fn, q=inner.q, k=inner.k, v=inner.v, out=inner.out, info={**inner.info, **info, "planted_slowdown": slowdown}
    )


register(
    Variant(
        name="t_planted",
        family="test",
        prepare=_prepare,
        description=f"{WRAPPED} + a calibrated extra ATTNWATCH_PLANTED_SLOWDOWN in the head worker",
        unsupported=lambda case: registry.get(WRAPPED).unsupported(case),
    )
)
