"""A planted slowdown of a known size, for checking that compare catches one (never in the registry).

`t_planted` is `sdpa` followed by a calibrated amount of extra work, on both sides of a compare,
so the two sides differ only in that amount: in the head worker (ATTNWATCH_SIDE=head, set by
ci/workers/client.py) the extra work is ATTNWATCH_PLANTED_SLOWDOWN (default 0.03) times the
base composite's own median. How:

* GPU: after the SDPA call, a `torch.cuda._sleep` spin (a device loop of a given cycle count).
  Both sides spin, the base for 1 µs, so both have the same launch structure and only the spin
  length differs. The composite's median M (with the harness's own timer: guard kernel, L2
  flushed before each call) and the spin's cycles per µs are measured once per case and
  process; the head spins slowdown x M longer. The realized slowdown is what the compare's base
  and head medians say.
* CPU: after the call, a busy-wait of slowdown x (the call's median host time).

Imported by a compare worker through `--variant-module attnwatch_planted --variant-path tests/fault_variants`.
"""

from __future__ import annotations

import os
import statistics
import time

import torch

from kernels import registry
from kernels.registry import Prepared, Variant, register

WRAPPED = "sdpa"
_calibrated: dict[str, tuple[float, float]] = {}  # case id -> (composite median us, cycles per us)


def planted_slowdown() -> float:
    if os.environ.get("ATTNWATCH_SIDE") != "head":
        return 0.0
    return float(os.environ.get("ATTNWATCH_PLANTED_SLOWDOWN", "0.03"))


def _cycles_per_us() -> float:
    """The spin's clock rate at the clocks the timed calls run at.

    `torch.cuda._sleep` counts SM clock cycles, so cycles per µs is the SM clock. Measured
    cold (a GPU that was idle between cases ramps up over tens of ms) it came out low, and the
    head's extra spin, sized in cycles, would run short at full clock: on the H200 a planted 3%
    was realized as 2.6-3.0% (2026-11-23), consistent with a rate read below full clock. So the
    clock is driven up by 100 ms of spinning first, and the rate is the median of 5 spins of
    2 ms each."""
    torch.cuda._sleep(200_000_000)  # ~100 ms at ~2 GHz
    rates = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(4_000_000)
        end.record()
        end.synchronize()
        rates.append(4_000_000 / (start.elapsed_time(end) * 1000.0))
    return statistics.median(rates)


def _gpu_median_us(fn, blocks: int = 20) -> float:
    """The composite's median as the harness times it: its own event timer, behind its guard
    kernel, 4 x L2 flushed before each call (ci.timing.timers).

    Timing each call alone with a sync after it, as this did before, let the host's dispatch of
    the call land inside the sample: on the H100 host a 6% plant on ~20 µs cases was sized from
    that and came out at +27% and +54% (2026-11-23)."""
    from ci.timing.timers import CudaEventTimer, L2Flusher

    device = torch.device("cuda", torch.cuda.current_device())
    flusher = L2Flusher(device, 4 * torch.cuda.get_device_properties(device).L2_cache_size)
    timer = CudaEventTimer(10)
    samples = []
    for index in range(blocks + 2):
        block = timer.time_block(fn, 10, flusher, key="planted")
        if index >= 2:  # the first blocks size the guard and warm up
            samples.extend(block)
    return statistics.median(samples)


def _gpu(case, inner, slowdown: float):
    if case.id not in _calibrated:
        per_us = _cycles_per_us()
        base_spin = int(per_us)  # 1 us on both sides
        _calibrated[case.id] = (_gpu_median_us(lambda: (inner(), torch.cuda._sleep(base_spin))), per_us)
    median_us, per_us = _calibrated[case.id]
    spin = int(per_us) + int(slowdown * median_us * per_us)

    def fn():
        out = inner()
        torch.cuda._sleep(spin)
        return out

    return fn, {"composite_median_us": median_us, "spin_cycles": spin, "cycles_per_us": per_us}


def _cpu(case, inner, slowdown: float):
    if case.id not in _calibrated:
        samples = []
        for _ in range(15):
            t0 = time.perf_counter()
            inner()
            samples.append(time.perf_counter() - t0)
        _calibrated[case.id] = (statistics.median(samples) * 1e6, 0.0)
    extra_s = slowdown * _calibrated[case.id][0] / 1e6

    def fn():
        out = inner()
        until = time.perf_counter() + extra_s
        while time.perf_counter() < until:
            pass
        return out

    return fn, {"call_median_us": _calibrated[case.id][0], "extra_us": extra_s * 1e6}


def _prepare(case, device, seed):
    inner = registry.get(WRAPPED).prepare(case, device, seed)
    slowdown = planted_slowdown()
    fn, info = (_gpu if device.type == "cuda" else _cpu)(case, inner.fn, slowdown)
    return Prepared(fn=fn, q=inner.q, k=inner.k, v=inner.v, out=inner.out,
                    info={**inner.info, **info, "planted_slowdown": slowdown})


register(Variant(name="t_planted", family="test", prepare=_prepare,
                 description=f"{WRAPPED} + a calibrated extra ATTNWATCH_PLANTED_SLOWDOWN in the head worker",
                 unsupported=lambda case: registry.get(WRAPPED).unsupported(case)))
