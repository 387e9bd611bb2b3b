"""Timing one block of calls: CUDA events on a GPU, host wall-clock on a CPU.

Method (DESIGN.md "Measurement recipe"): before every call the L2 is flushed by writing a
buffer several times its size (`L2Flusher`), outside the timed region; each call is then
bracketed by its own pair of CUDA events on the current stream, so a sample is the device
time of exactly one call, launch gaps included but not the flush. The block is synchronized
once at its end (the cost of a sync is paid per block, not per call), which also surfaces an
asynchronous CUDA error inside the block whose case issued it. On a CPU the sample is
`time.perf_counter_ns` around the call (`cpu_wall`): CPU caches are not flushed.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Protocol


class Flusher(Protocol):
    def flush(self) -> None: ...


class NoFlush:
    """Nothing to flush (CPU runs)."""

    nbytes = 0

    def flush(self) -> None:
        return None


class L2Flusher:
    """Evicts the GPU's L2 by zero-filling a device buffer of `nbytes` (>= 2x L2)."""

    def __init__(self, device: Any, nbytes: int) -> None:
        import torch

        self.nbytes = int(nbytes)
        self._buffer = torch.empty(max(self.nbytes // 4, 1), dtype=torch.int32, device=device)

    def flush(self) -> None:
        self._buffer.zero_()


class BlockTimer(Protocol):
    mode: str

    def time_block(self, fn: Callable[[], Any], calls: int, flusher: Flusher) -> list[float]: ...

    def synchronize(self) -> None: ...


class CudaEventTimer:
    """Per-call CUDA-event timing; returns microseconds."""

    mode = "cuda_events"

    def __init__(self, max_calls: int) -> None:
        import torch

        self._torch = torch
        self._starts = [torch.cuda.Event(enable_timing=True) for _ in range(max_calls)]
        self._ends = [torch.cuda.Event(enable_timing=True) for _ in range(max_calls)]

    def time_block(self, fn: Callable[[], Any], calls: int, flusher: Flusher) -> list[float]:
        if calls > len(self._starts):
            raise ValueError(f"block of {calls} calls exceeds the {len(self._starts)} events allocated")
        for i in range(calls):
            flusher.flush()
            self._starts[i].record()
            fn()
            self._ends[i].record()
        self._ends[calls - 1].synchronize()
        return [self._starts[i].elapsed_time(self._ends[i]) * 1000.0 for i in range(calls)]

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()


class CpuWallTimer:
    """Host wall-clock per call (`cpu_wall`); returns microseconds."""

    mode = "cpu_wall"

    def time_block(self, fn: Callable[[], Any], calls: int, flusher: Flusher) -> list[float]:
        out = []
        for _ in range(calls):
            flusher.flush()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1000.0)
        return out

    def synchronize(self) -> None:
        return None
