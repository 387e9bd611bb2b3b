"""The kernels a case's profiled call launches, and which of them differ between two profiles.

A counter rule says that a call got slower and how (history.analysis.ncu_explain); the kernel
names say which kernel: the one a change added (an unfused step, a copy, a spin), or the one a
library picked instead (a cuDNN engine, a cuBLAS tile), which no counter rule sees when the
count stays the same.

Names are Nsight Compute's demangled names, and ncu does not print a name the same way in
every profile: on an H200 (ncu 2025.3) one profile of torch's masked-fill kernel read
`void at::elementwise_kernel<128, 4, void at::gpu_kernel_impl_nocast<at::<unnamed>::...` and the
next `void native::elementwise_kernel<128, 4, void native::gpu_kernel_impl_nocast<native::...`
(the symbol is `at::native::elementwise_kernel`; docs/benchmarks.md has the profiles). Kernels
are therefore matched by `kernel_key`, the name with every namespace qualifier removed and the
template arguments and parameters kept (they tell one instantiation from another), and shown by
`short_kernel_name`, the bare function name.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

NAMES_SHOWN = 3  # kernels named per side; more are counted
NAME_CHARS = 120  # a shown name longer than this is cut (a cuDNN engine's name is about 100)
# `ns::`, `<unnamed>::`, `(anonymous namespace)::`: a qualifier, wherever it stands in the name
_QUALIFIER = re.compile(r"(?:\b[A-Za-z_]\w*|<unnamed>|\(anonymous namespace\))::")


@dataclass(frozen=True)
class Launch:
    """One kernel of a case's profiled call: ncu's demangled name, its duration in ns, and its
    counters as (name, value) pairs (`launch_counters`), which the exact compare and the rules
    over the kernels both calls launch read."""

    name: str
    duration_ns: float | None = None
    counters: tuple[tuple[str, float], ...] = ()


def launch_counters(metrics) -> tuple[tuple[str, float], ...]:
    """A kernel's numeric counters, sorted by name, as a Launch carries them."""
    return tuple(
        sorted(
            (name, float(value))
            for name, value in metrics.items()
            if isinstance(value, (int, float)) and math.isfinite(value)
        )
    )


def kernel_key(name: str) -> str:
    """What two profiles' names of one kernel have in common: the name without its namespace
    qualifiers (module doc), whitespace as it is."""
    return _QUALIFIER.sub("", name).strip()


def short_kernel_name(name: str) -> str:
    """The bare function name of a demangled signature: qualifiers, return type, template
    arguments and parameters dropped (`void at::native::foo<Half, 4>(int, T)` -> `foo`); a plain
    name (cuDNN, cuBLAS, Triton) comes back as it is; cut at NAME_CHARS."""
    out, depth = [], 0
    for char in kernel_key(name):
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif char == "(" and not depth:
            break
        elif not depth:
            out.append(char)
    short = "".join(out).strip().split(" ")[-1] or name.strip()
    return short if len(short) <= NAME_CHARS else short[: NAME_CHARS - 1] + "…"


def launches_changed(base: Sequence[Launch], head: Sequence[Launch]) -> str | None:
    """The kernels only the head's call launches ("new") and only the base's ("gone"), matched
    by kernel_key with repeats counted, in launch order, each by its short name with its mean
    duration (and how many launches, when more than one); None when both calls launch the
    same kernels."""
    base_keyed = [(kernel_key(launch.name), launch) for launch in base]
    head_keyed = [(kernel_key(launch.name), launch) for launch in head]
    base_count, head_count = Counter(k for k, _ in base_keyed), Counter(k for k, _ in head_keyed)
    parts = []
    sides = (("new", head_count - base_count, head_keyed), ("gone", base_count - head_count, base_keyed))
    for word, extra, keyed in sides:
        keys = list(dict.fromkeys(k for k, _ in keyed if extra[k] > 0))
        if not keys:
            continue
        shown = [_named(key, extra[key], [launch for k, launch in keyed if k == key]) for key in keys[:NAMES_SHOWN]]
        more = sum(extra[key] for key in keys[NAMES_SHOWN:])
        parts.append(f"{word} " + ", ".join(shown) + (f" and {more} more" if more else ""))
    return "; ".join(parts) or None


def _named(key: str, times: int, launches: Sequence[Launch]) -> str:
    """`short (×times, mean µs)` for one kernel, from that side's launches of it."""
    durations = [
        d for d in (launch.duration_ns for launch in launches) if isinstance(d, (int, float)) and math.isfinite(d)
    ]
    facts = ([f"×{times}"] if times > 1 else []) + (
        [f"{sum(durations) / len(durations) / 1000:.3g} µs" + (" each" if times > 1 else "")] if durations else []
    )
    return short_kernel_name(key) + (f" ({', '.join(facts)})" if facts else "")
