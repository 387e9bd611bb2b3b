"""Counters that are exact for a given binary and input, compared exactly, kernel by kernel.

The noisy counters (stall ratios, bytes, occupancy) move between two profiles of one build, so
a rule reads them against their noise (history.analysis.ncu_explain). Some counters do not move
at all: the instructions a call executes, in total and per opcode, and the launch's resources
(registers, shared memory, block, grid, stack) are fixed by the binary, the launch and the
input. Those listed in `exact_counters.toml` (each with its reason) are compared here with `!=`:
a difference of one instruction per call is a fact, stated as one, however small a share of
the total it is (a pull request's one-line change moves the total by 0.1%, well under any
noisy counter's spread).

Kernels of the two calls are paired by `kernel_key` (history.analysis.kernel_launches), the
n-th launch of a kernel on one side with the n-th on the other; launches one side has and the
other does not are what `launches_changed` names.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

from attnwatch.history.analysis.kernel_launches import Launch, kernel_key, short_kernel_name
from attnwatch.toml_reader import read_toml

EXACT_FILE = Path(__file__).resolve().parent / "exact_counters.toml"
INSTANCE_SEPARATOR = "/"  # one instance of an instanced metric: `sass__inst_executed_per_opcode/LDG`
PER_OPCODE = "sass__inst_executed_per_opcode" + INSTANCE_SEPARATOR
INSTRUCTIONS = "smsp__inst_executed.sum"
SHARED_WAVEFRONTS = "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum"
# SASS opcodes that read or write shared memory (their wavefronts are what SHARED_WAVEFRONTS counts)
SHARED_OPCODES = ("LDS", "STS", "LDSM", "STSM", "LDGSTS", "ATOMS", "REDS")
OPCODES_SHOWN = 3


@dataclass(frozen=True)
class ExactCounter:
    metric: str
    label: str
    unit: str
    reason: str
    prefix: bool = False


@dataclass(frozen=True)
class ExactChange:
    """One exact counter of one kernel that differs between the sides (None: the side lacks it)."""

    kernel: str  # the bare function name
    metric: str
    label: str
    base: float | None
    head: float | None

    @property
    def delta(self) -> float:
        return (self.head or 0.0) - (self.base or 0.0)


class ExactCountersError(ValueError):
    """exact_counters.toml is malformed: the message names the file, the entry and the field."""


@lru_cache(maxsize=2)
def _data(path: Path = EXACT_FILE) -> dict:
    return read_toml(path, "exact counters", ExactCountersError)


@lru_cache(maxsize=2)
def inexact_kernels(path: Path = EXACT_FILE) -> tuple[str, ...]:
    """Bare-name prefixes of kernels whose counts were seen to differ between profiles of one build."""
    out = []
    for index, entry in enumerate(_data(path).get("inexact", [])):
        if not str(entry.get("kernel", "")).strip() or not str(entry.get("reason", "")).strip():
            raise ExactCountersError(f"{Path(path).name}: inexact {index}: kernel and reason must be non-empty")
        out.append(str(entry["kernel"]))
    return tuple(out)


@lru_cache(maxsize=2)
def load_exact(path: Path = EXACT_FILE) -> tuple[ExactCounter, ...]:
    data = _data(path)
    out = []
    for index, entry in enumerate(data.get("exact", [])):
        try:
            counter = ExactCounter(
                str(entry["metric"]),
                str(entry["label"]),
                str(entry["unit"]),
                str(entry["reason"]),
                bool(entry.get("prefix", False)),
            )
        except KeyError as exc:
            raise ExactCountersError(
                f"{Path(path).name}: exact {entry.get('metric', index)!r}: missing field {exc}"
            ) from None
        if not counter.metric or not counter.reason.strip():
            raise ExactCountersError(f"{Path(path).name}: exact {index}: metric and reason must be non-empty")
        out.append(counter)
    if not out:
        raise ExactCountersError(f"{Path(path).name}: no [[exact]] entries")
    return tuple(out)


def exact_counter(name: str) -> ExactCounter | None:
    """The entry that makes `name` exact, or None for a noisy counter."""
    return next((c for c in load_exact() if (name.startswith(c.metric) if c.prefix else name == c.metric)), None)


def exact_of(metrics: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """A kernel's exact counters, sorted by name."""
    return tuple(
        sorted(
            (name, float(value))
            for name, value in metrics.items()
            if exact_counter(name) is not None and isinstance(value, (int, float)) and math.isfinite(value)
        )
    )


def compare_exact(base: Sequence[Launch], head: Sequence[Launch]) -> list[ExactChange]:
    """Every exact counter that differs between paired kernels (module doc), in launch order.
    An opcode one side never executed counts 0 there when that side has per-opcode counts."""
    pairs = paired(base, head)
    skip = inexact_kernels()
    out = []
    for b, h in pairs:
        if short_kernel_name(h.name).startswith(skip):
            continue
        bv, hv = dict(exact_of(dict(b.counters))), dict(exact_of(dict(h.counters)))
        opcodes_b = any(n.startswith(PER_OPCODE) for n in bv)
        opcodes_h = any(n.startswith(PER_OPCODE) for n in hv)
        for name in sorted(set(bv) | set(hv), key=_order):
            if name.startswith(PER_OPCODE):
                if not (opcodes_b and opcodes_h):
                    continue
                x, y = bv.get(name, 0.0), hv.get(name, 0.0)
            elif name in bv and name in hv:
                x, y = bv[name], hv[name]
            else:
                continue
            if x != y:
                counter = exact_counter(name)
                assert counter is not None  # exact_of keeps exact counters only
                label = name[len(PER_OPCODE) :] if name.startswith(PER_OPCODE) else counter.label
                out.append(ExactChange(short_kernel_name(h.name), name, label, x, y))
    return out


def describe_exact(changes: Sequence[ExactChange]) -> str:
    """One clause per kernel: `+4,096 instructions executed per call (+0.11%): +2,048 BAR, +2,048
    LDS; registers/thread 128 → 96` (the kernel named when more than one changed)."""
    by_kernel: dict[str, list[ExactChange]] = defaultdict(list)
    for change in changes:
        by_kernel[change.kernel].append(change)
    clauses = []
    for kernel, found in by_kernel.items():
        total = next((c for c in found if c.metric == INSTRUCTIONS), None)
        opcodes = sorted((c for c in found if c.metric.startswith(PER_OPCODE)), key=lambda c: (-abs(c.delta), c.label))
        parts = []
        if total is not None:
            share = f" ({total.delta / total.base:+.2%})" if total.base else ""
            parts.append(f"{_count(total.delta)} instructions executed per call{share}")
        if opcodes:
            shown = ", ".join(f"{_count(c.delta)} {c.label}" for c in opcodes[:OPCODES_SHOWN])
            shown += f" and {len(opcodes) - OPCODES_SHOWN} more opcodes" if len(opcodes) > OPCODES_SHOWN else ""
            if parts:
                parts[0] += f": {shown}"
            else:
                parts.append(f"{shown} executed per call")
        parts += [
            _shared_wavefronts(c, found)
            if c.metric == SHARED_WAVEFRONTS
            else f"{c.label} {_plain(c.base)} → {_plain(c.head)}"
            for c in found
            if c.metric != INSTRUCTIONS and not c.metric.startswith(PER_OPCODE)
        ]
        text = "; ".join(parts)
        clauses.append(f"{kernel}: {text}" if len(by_kernel) > 1 else text)
    return " | ".join(clauses)


def _shared_wavefronts(change: ExactChange, found: Sequence[ExactChange]) -> str:
    """`shared-memory wavefronts 1,000 → 1,250 (+25.0%)`, read as bank conflicts when no
    shared-memory opcode's count changed with it: the same accesses took more (or fewer) passes
    through the banks."""
    text = f"{change.label} {_plain(change.base)} → {_plain(change.head)}"
    if change.base:
        text += f" ({change.delta / change.base:+.1%})"
    # Both come from the exact section (ci/ncu/metrics.toml), so the per-opcode counts were
    # collected with the wavefronts: an unchanged shared opcode is simply absent from `found`.
    shared_moved = any(c.metric.startswith(PER_OPCODE) and c.label.split(".")[0] in SHARED_OPCODES for c in found)
    if not shared_moved:
        more = "more" if change.delta > 0 else "fewer"
        text += f" for the same shared-memory instructions: {more} bank conflicts"
    return text


def paired(base: Sequence[Launch], head: Sequence[Launch]) -> list[tuple[Launch, Launch]]:
    """The kernels both calls launch, paired (module doc), in the head's launch order."""
    keyed: dict[str, list[Launch]] = defaultdict(list)
    for launch in base:
        keyed[kernel_key(launch.name)].append(launch)
    seen: dict[str, int] = defaultdict(int)
    out = []
    for launch in head:
        key = kernel_key(launch.name)
        if seen[key] < len(keyed[key]):
            out.append((keyed[key][seen[key]], launch))
        seen[key] += 1
    return out


def _order(name: str) -> tuple[int, str]:
    return (0 if name == INSTRUCTIONS else 1 if name.startswith(PER_OPCODE) else 2, name)


def _count(delta: float) -> str:
    return f"{int(delta):+,}" if float(delta).is_integer() else f"{delta:+,.1f}"


def _plain(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,.3g}"
