"""CUDA-graph replay timing for launch-bound cases (median below a threshold, e.g. 50 us).

Method. Two graphs are captured on a side stream: G_full = `calls` x (L2 flush, call) and
G_flush = `calls` x (L2 flush). Each replay is timed with a pair of CUDA events; the replays of
the two graphs alternate. The per-call graph time is

    graph_median_us = (median(G_full replays) - median(G_flush replays)) / calls

so it keeps the same L2 state as the headline per-call time (flushed before every call) while
removing the host launch cost between calls. Difference of medians, not median of
differences: the two graphs are independent launches. The headline stays the per-call
event median (`timing_mode="cuda_events"`) for every case, so that every series in the
history has one definition; `graph_median_us` beside it shows how much of a small case is
launch overhead. A variant whose launch cannot be captured (a launch on the legacy default
stream, a host sync inside) gets None and the capture error as a note.
"""

from __future__ import annotations

from typing import Any, Callable

from attnwatch.ci.timing.timers import Flusher
from attnwatch.history.analysis.statistics import median


def graph_replay_us(
    fn: Callable[[], Any], flusher: Flusher, calls: int, replays: int
) -> tuple[float | None, str | None]:
    """(graph_median_us, note); (None, reason) when capture or replay fails non-fatally."""
    import torch

    if calls < 1 or replays < 1:
        return None, "graph timing disabled by configuration"
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm the side stream, as torch's graph docs require
        for _ in range(3):
            flusher.flush()
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    full, flush_only = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(full):
            for _ in range(calls):
                flusher.flush()
                fn()
        with torch.cuda.graph(flush_only):
            for _ in range(calls):
                flusher.flush()
    except RuntimeError as exc:
        torch.cuda.synchronize()
        return None, f"graph capture failed: {exc}"
    full_us: list[float] = []
    flush_us: list[float] = []
    for graph in (full, flush_only):  # one untimed replay each: uploads the graph
        graph.replay()
    torch.cuda.synchronize()
    for _ in range(replays):
        for graph, sink in ((full, full_us), (flush_only, flush_us)):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            sink.append(start.elapsed_time(end) * 1000.0)
    value = (median(full_us) - median(flush_us)) / calls
    return value, None
