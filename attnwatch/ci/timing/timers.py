"""Timing one block of calls: CUDA events on a GPU, host wall-clock on a CPU.

Method (docs/design.md "Measurement recipe"): before every call the L2 is flushed by writing a
buffer several times its size (`L2Flusher`), outside the timed region; each call is then
bracketed by its own pair of CUDA events on the current stream, so a sample is the device
time of exactly one call, launch gaps included but not the flush. The block is synchronized
once at its end (the cost of a sync is paid per block, not per call), which also surfaces an
asynchronous CUDA error inside the block whose case issued it. On a CPU the sample is
`time.perf_counter_ns` around the call (`cpu_wall`): CPU caches are not flushed.

Host gaps. A start event is enqueued before the call; if the GPU reaches it while the host is
still dispatching the call (Python, a backend context manager, a Triton launcher: tens of µs),
the sample measures host dispatch, not the kernel. On an H200 run at commit 3225df5 this
inflated 10-20 µs SDPA and Triton cases to p90s of 60-150 µs while their CUDA-graph replays
read 7-16 µs. So each block is enqueued behind a guard kernel (`torch.cuda._sleep`, a device
spin of a given cycle count) that keeps the stream busy until the whole block is queued, the
technique nvbench calls a blocking kernel. An event after the guard tells whether it outlasted
the host's enqueue; if not, the block is re-timed with a longer guard (`GuardPolicy`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable, Protocol

from attnwatch.ci.timing.power import assign_clocks


class Flusher(Protocol):
    def flush(self) -> None: ...


class NoFlush:
    """Nothing to flush (CPU runs)."""

    nbytes = 0

    def flush(self) -> None:
        return None


class L2Flusher:
    """Evicts the GPU's L2 by zero-filling a device buffer of `nbytes` (>= 2x L2).

    `release` and `allocate` move the buffer: the engine gives it a new placement for every
    group it times, each round of a compare anew (ci/engine/rounds.py), because each timed
    call starts with L2 full of the buffer's dirty lines, and a placement fixed for the life
    of a process is an offset no round varies (on the H200 the buffer's placement moved a
    17 µs SDPA median by 0.45%, `scripts/flush_placement_check.py` at cd63d4e; the `fixed_flush`
    arm of `scripts/process_offset_check.py` asks the same across processes)."""

    def __init__(self, device: Any, nbytes: int) -> None:
        self.nbytes = int(nbytes)
        self.device = device
        self._buffer: Any = None
        self.allocate()

    def allocate(self) -> None:
        import torch

        self._buffer = torch.empty(max(self.nbytes // 4, 1), dtype=torch.int32, device=self.device)

    def release(self) -> None:
        self._buffer = None

    def flush(self) -> None:
        if self._buffer is None:
            raise RuntimeError("L2Flusher.flush after release: allocate() first")
        self._buffer.zero_()


class BlockTimer(Protocol):
    mode: str
    policy: "GuardPolicy | None"  # the guard's counters (CUDA events); None where no guard runs

    last_clocks: list[float | None]  # per call of the last block, with a clock reader; else empty

    def time_block(
        self,
        fn: Callable[[], Any],
        calls: int,
        flusher: Flusher,
        key: object = None,
        gap_us: float = 0.0,
        clock: "Callable[[], int | None] | None" = None,
    ) -> list[float]: ...

    def renew_streams(self) -> None: ...

    def synchronize(self) -> None: ...


class GuardPolicy:
    """How long the guard kernel holds the stream, per subject (pure logic, testable without a GPU).

    Each key (the subject being timed; None for a caller that names none) has its own guard,
    starting at `initial_us`. After a covered block the next guard is `growth` x the longest
    host enqueue among the subject's last `window` first attempts (at least `floor_us`); after
    an uncovered block it is `growth` x the larger of the guard and that block's enqueue time,
    and the block is timed again. Every guard stays at most `max_us`; `max_attempts` bounds the
    re-timing of one block, and a block still uncovered after that is kept and counted in
    `uncovered_blocks`.

    Why per subject: the guard is GPU time spent spinning before every block. One shared guard
    that only grew was set by the slowest enqueue any case ever had (a first call, a many-op
    variant) and then charged to every later block of the process: on the H200 (`main` runs of
    2026-11-23) blocks of ten ~20 µs calls cost 8-16 ms of wall time, ten times their GPU work.
    Why first attempts only: a block's first attempt follows another subject's block (the
    round-robin), and enqueues slower than its immediate re-timing; a guard sized from the
    re-timings failed the next first attempt again, and on the H200 (2026-11-23, commit 2b32cb7)
    an A/A compare re-timed blocks 8,454 times for 20,534 blocks kept.
    """

    def __init__(
        self,
        initial_us: float = 1000.0,
        growth: float = 2.0,
        max_us: float = 50_000.0,
        max_attempts: int = 4,
        floor_us: float = 200.0,
        window: int = 8,
    ) -> None:
        self.initial_us = initial_us
        self.growth = growth
        self.max_us = max_us
        self.max_attempts = max_attempts
        self.floor_us = min(floor_us, initial_us)
        self.window = window
        self.uncovered_blocks = 0
        self.retimed_blocks = 0
        self._guards: dict[object, float] = {}
        self._first_enqueues: dict[object, deque[float]] = {}

    def guard_us(self, key: object = None) -> float:
        """The guard the next block of `key` starts with."""
        return self._guards.get(key, self.initial_us)

    def after_block(self, covered: bool, enqueue_us: float, attempt: int, key: object = None) -> bool:
        """Record a block's outcome for `key`; True if it must be timed again."""
        if attempt == 0:
            self._first_enqueues.setdefault(key, deque(maxlen=self.window)).append(enqueue_us)
        if covered:
            longest = max(self._first_enqueues.get(key) or [enqueue_us])
            self._guards[key] = min(self.max_us, max(self.floor_us, self.growth * longest))
            return False
        self._guards[key] = min(self.max_us, self.growth * max(self.guard_us(key), enqueue_us))
        if attempt + 1 < self.max_attempts:
            self.retimed_blocks += 1
            return True
        self.uncovered_blocks += 1
        return False


def spin_cycles_per_us(torch: Any, tries: int = 5) -> float:
    """Cycles per microsecond of `torch.cuda._sleep`, the device spin of the guard kernel.

    The spin counts SM clock cycles, so this is the SM clock as the timed blocks will see it:
    ~100 ms of spinning first brings an idle GPU's clock up (a rate read while it ramps is too
    low), then the fastest of `tries` 1 ms spins timed with events is taken. Another process's
    work on the GPU (the other side's worker starting up beside this one) can only lengthen a
    timed spin; read once, such a spin gave a rate so low that every guard ran short and, on
    the H200 (2026-11-23, commit 62dbcd0), 2,964 blocks of one worker were timed twice.
    """
    cycles = 2_000_000
    torch.cuda._sleep(200_000_000)  # loads the kernel and raises the clock
    rates = []
    for _ in range(tries):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        rates.append(cycles / max(start.elapsed_time(end) * 1000.0, 1.0))
    return max(rates)


class CudaEventTimer:
    """Per-call CUDA-event timing behind a guard kernel; returns microseconds.

    With `streams` > 1, successive blocks go to successive streams of a fixed pool (the guard,
    flushes, calls and events of one block all on its stream; a block is synchronized before
    the next starts, so nothing overlaps). Why: the launch cost a call pays depends on the
    stream it is issued on. On the H200 (2026-11-23, scripts/process_offset_check.py) a stream
    kept a per-launch offset of about +-100-200 ns for its whole life, shared by every kernel on
    it: a one-launch call read 3.55-3.65 µs on one process's stream and 3.81-4.10 µs on
    another's, four launches per call four times that. A process that times everything on
    one stream carries that offset in every median, as a bias no round of a compare varies
    (0.36-0.52% between processes at 17 µs, F test p <= 0.009 in five series); with a new
    stream per round the between-process part was no longer significant (F 0.3-1.5). A pool
    spreads every case's samples over several streams, so its median averages the offsets
    instead of inheriting one: with a pool of 8 the between-process part at 17 µs fell from
    0.44-0.52% to 0.21-0.25% and the round-to-round part from 0.31-0.37% to 0.21-0.24%.
    torch hands out streams round robin from a pool of 32 per device and priority, so a pool of
    32 (ci/run_config.toml) spans every stream the process has: five fresh `main` processes then
    agreed within 1% on every case, where a pool of 8 left nine small cases 1-2.3% apart.
    """

    mode = "cuda_events"
    last_clocks: list[float | None] = []

    def __init__(self, max_calls: int, policy: GuardPolicy | None = None, streams: int = 1) -> None:
        import torch

        if streams < 1:
            raise ValueError("CudaEventTimer: streams must be >= 1")
        self._torch = torch
        self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(max_calls)]
        self._ends = [torch.cuda.Event(enable_timing=True) for _ in range(max_calls)]
        self._guard_done = torch.cuda.Event()
        self.policy = policy or GuardPolicy()
        self._cycles_per_us = spin_cycles_per_us(torch)
        self._stream_count = streams
        self._streams: list[Any] = []
        self._next_stream = 0
        self.renew_streams()

    def renew_streams(self) -> None:
        """Take a new pool of streams: the engine does so on every call, each round of a compare
        (ci/engine/group.py), so that what is left of the pool's offset after averaging varies
        from round to round, where the round-level interval sees it, instead of staying with
        the process."""
        if self._stream_count > 1:
            self._streams = [self._torch.cuda.Stream() for _ in range(self._stream_count)]
            self._next_stream = 0

    def time_block(
        self,
        fn: Callable[[], Any],
        calls: int,
        flusher: Flusher,
        key: object = None,
        gap_us: float = 0.0,
        clock: Callable[[], int | None] | None = None,
    ) -> list[float]:
        """`calls` timed calls of `fn` behind the guard of `key` (GuardPolicy: one guard per subject),
        on the pool's next stream when there is a pool. With `gap_us` > 0 each call (its flush
        included) is preceded by a one-thread device spin of that length, outside the events:
        the pacing gap (ci/timing/power.py). With `clock` (an NVML SM-clock read) the host polls
        it while the block runs, instead of one blocking wait, and `last_clocks` holds each
        call's clock (power.assign_clocks)."""
        if calls > len(self._starts):
            raise ValueError(f"block of {calls} calls exceeds the {len(self._starts)} events allocated")
        if not self._streams:
            return self._time_block(fn, calls, flusher, key, gap_us, clock)
        stream = self._streams[self._next_stream]
        self._next_stream = (self._next_stream + 1) % len(self._streams)
        stream.wait_stream(self._torch.cuda.current_stream())  # the caller's pending work (inputs) first
        with self._torch.cuda.stream(stream):
            return self._time_block(fn, calls, flusher, key, gap_us, clock)

    def _time_block(
        self,
        fn: Callable[[], Any],
        calls: int,
        flusher: Flusher,
        key: object,
        gap_us: float,
        clock: Callable[[], int | None] | None,
    ) -> list[float]:
        attempt = 0
        gap_cycles = int(gap_us * self._cycles_per_us)
        while True:
            self._torch.cuda._sleep(int(self.policy.guard_us(key) * self._cycles_per_us))
            self._guard_done.record()
            t0 = time.perf_counter()
            for i in range(calls):
                if gap_cycles > 0:
                    self._torch.cuda._sleep(gap_cycles)
                flusher.flush()
                self._starts[i].record()
                fn()
                self._ends[i].record()
            enqueue_us = (time.perf_counter() - t0) * 1e6
            covered = not self._guard_done.query()  # guard still running: no idle gap in the block
            self.last_clocks = self._wait(calls, clock)
            if not self.policy.after_block(covered, enqueue_us, attempt, key):
                return [self._starts[i].elapsed_time(self._ends[i]) * 1000.0 for i in range(calls)]
            attempt += 1

    def _wait(self, calls: int, clock: Callable[[], int | None] | None) -> list[float | None]:
        """Wait for the block's last call; with a clock reader, poll it meanwhile and attribute
        each reading to the first call not yet finished (its end event not reached)."""
        if clock is None:
            self._ends[calls - 1].synchronize()
            return []
        readings: list[tuple[int, float]] = []
        first = 0
        while first < calls:
            while first < calls and self._ends[first].query():
                first += 1
            if first < calls:
                try:
                    mhz = clock()
                except Exception:  # noqa: BLE001 - a failed NVML read is a missing clock, not a failed case
                    mhz = None
                if mhz:
                    readings.append((first, float(mhz)))
        return assign_clocks(calls, readings)

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()


class CpuWallTimer:
    """Host wall-clock per call (`cpu_wall`); returns microseconds."""

    mode = "cpu_wall"
    policy = None  # nothing is enqueued ahead of the host: no guard, no host-gap counters
    last_clocks: list[float | None] = []  # a CPU has no SM clock

    def renew_streams(self) -> None:
        return None  # no streams on a CPU

    def time_block(
        self,
        fn: Callable[[], Any],
        calls: int,
        flusher: Flusher,
        key: object = None,
        gap_us: float = 0.0,
        clock: Callable[[], int | None] | None = None,
    ) -> list[float]:
        """`gap_us`: the pacing gap, slept on the host before each call; `clock` is unused."""
        out = []
        for _ in range(calls):
            if gap_us > 0:
                time.sleep(gap_us * 1e-6)
            flusher.flush()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1000.0)
        return out

    def synchronize(self) -> None:
        return None
