"""What timed a stored number, in words: the label every page puts on µs, TFLOPS and gaps.

CI records the timer of every result in `results.timing_mode` (migration 001): `cuda_events`
(a CUDA event pair around each call), `cuda_graph` (CUDA-graph replay), `cpu_wall` (host
wall-clock of a CPU run) or `host` (an imported pytest-benchmark's wall-clock). A page labels
its figures from the rows it shows, so a CPU or host wall-clock time is never captioned as a
GPU kernel time (README: CPU figures are never passed off as GPU ones).
"""

from __future__ import annotations

from typing import Iterable

# timing_mode -> (short tag for a column header, full name for help text and axis titles)
TIMERS = {
    "cuda_events": ("events", "CUDA events"),
    "cuda_graph": ("graph replay", "CUDA-graph replay"),
    "cpu_wall": ("CPU wall clock", "CPU wall clock (host timer, not a GPU time)"),
    "host": ("host wall clock", "host wall clock (pytest-benchmark, not a GPU time)"),
}
UNKNOWN = ("timer not stored", "timer not stored")


def _names(modes: Iterable, which: int) -> list[str]:
    found = dict.fromkeys(m for m in modes if isinstance(m, str) and m)
    return [TIMERS.get(m, (m, m))[which] for m in found]


def timer_tag(modes: Iterable) -> str:
    """The short tag of the timers in `modes` (a column of timing_mode values): one name when
    the rows share a timer, 'mixed: a / b' when not."""
    names = _names(modes, 0)
    if not names:
        return UNKNOWN[0]
    return names[0] if len(names) == 1 else "mixed: " + " / ".join(names)


def timer_name(modes: Iterable) -> str:
    """The full name of the timers in `modes`, for help text and axis titles."""
    names = _names(modes, 1)
    if not names:
        return UNKNOWN[1]
    return names[0] if len(names) == 1 else "mixed: " + " / ".join(names)


def is_gpu_timer(modes: Iterable) -> bool:
    """True when every stored timer in `modes` is a GPU one (events or graph replay)."""
    found = {m for m in modes if isinstance(m, str) and m}
    return bool(found) and found <= {"cuda_events", "cuda_graph"}


def basis(modes: Iterable) -> str:
    """The caption under a table: what TFLOPS and gap to baseline were computed from."""
    if is_gpu_timer(modes):
        return (
            "TFLOPS and gap to baseline are computed by CI from the CUDA-event median (µs), the headline for every "
            "case; for cases under the graph threshold the graph-replay median is shown beside it."
        )
    return (
        f"These figures were timed by {timer_name(modes)}: TFLOPS and gap to baseline are computed by CI from that "
        "median and are not GPU kernel figures."
    )
