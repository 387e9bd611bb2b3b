"""What changed in the static code of a kernel between two binaries: its instruction mix, and where.

Two sides' kernels (history.analysis.sass) are matched by function name. For each kernel whose
instructions differ, the diff counts each opcode on both sides, split by where it sits: inside a
loop (the main loop, found from the back edges) or outside every loop (prologue, epilogue); the
changes are grouped by opcode class (shared load/store, barrier, tensor, ...), and the static
resources (registers, shared, local memory) are compared. Counts, not an alignment of the
listings: a one-line source change reschedules the code around it, so a line diff of SASS shows
dozens of moved instructions where the mix shows the one that was added.

What the diff reads of a kernel is its `KernelMix` (the counts by opcode and place, the number of
loops, the resources): a compare takes it from the binaries it has just read, a stored alert from
the mixes its two runs recorded (bundle sass.json, history.contract.sass_file), so both diff the
same facts with the same code.

`describe` words it as a kernel engineer reads it: "+1 BAR in the loop (0x130-0x1d0); +2
integer outside loops; registers 40 → 32"; padding NOPs are not counted.

A binary holds every kernel of a variant (head dims, dtypes), a profiled call launches one or a
few of them: `launched_only` keeps the diff of the kernels a call launched, so a case's cause
speaks of its own code. The mix is counts: a change of operands only (a shared-memory stride, an
immediate offset) leaves a kernel's mix the same and is not seen here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from attnwatch.history.analysis.kernel_launches import short_kernel_name
from attnwatch.history.analysis.sass import KernelCode, Resources, opcode_class

IN_LOOP, OUTSIDE = "in a loop", "outside loops"
_IGNORED = ("NOP",)
LISTED = 4  # opcode changes named in a description; the rest are counted


@dataclass(frozen=True)
class OpcodeChange:
    opcode: str
    opcode_class: str
    where: str  # IN_LOOP or OUTSIDE
    base: int
    head: int

    @property
    def delta(self) -> int:
        return self.head - self.base


@dataclass
class KernelDiff:
    name: str
    changes: list[OpcodeChange] = field(default_factory=list)
    by_class: dict[str, int] = field(default_factory=dict)  # class -> head - base, over the kernel
    resources: dict[str, tuple[int, int]] = field(default_factory=dict)  # resource -> (base, head), changed only
    loops: tuple[int, int] = (0, 0)  # loops found on (base, head)
    size: tuple[int, int] = (0, 0)  # instructions (NOPs left out) on (base, head)

    @property
    def changed(self) -> bool:
        return bool(self.changes or self.resources or self.loops[0] != self.loops[1])


@dataclass
class BinaryDiff:
    kernels: list[KernelDiff] = field(default_factory=list)  # kernels on both sides that changed
    added: list[str] = field(default_factory=list)  # kernels only the head's binary has
    removed: list[str] = field(default_factory=list)
    same: list[str] = field(default_factory=list)  # kernels on both sides whose code did not change

    @property
    def changed(self) -> bool:
        return bool(self.kernels or self.added or self.removed)

    def names(self) -> set[str]:
        """Every kernel of either side's binary."""
        return {kd.name for kd in self.kernels} | set(self.added) | set(self.removed) | set(self.same)


@dataclass(frozen=True)
class KernelMix:
    """What the diff reads of one kernel's static code (module doc)."""

    name: str
    counts: Mapping[tuple[str, str], int]  # (opcode, IN_LOOP or OUTSIDE) -> instructions, NOPs left out
    loops: int  # back edges found (KernelCode.loops)
    resources: Resources | None = None


Code = KernelCode | KernelMix


def mix(code: KernelCode) -> Counter:
    """(opcode, where) -> count, NOPs left out."""
    depths = code.loop_depths()
    return Counter(
        (ins.opcode, IN_LOOP if depths.get(ins.offset, 0) else OUTSIDE)
        for ins in code.instructions
        if ins.opcode not in _IGNORED
    )


def kernel_mix(code: Code) -> KernelMix:
    """A kernel's code as the diff reads it (a KernelMix passes through)."""
    if isinstance(code, KernelMix):
        return code
    return KernelMix(code.name, dict(mix(code)), len(code.loops()), code.resources)


def diff_kernel(base: Code, head: Code) -> KernelDiff:
    base, head = kernel_mix(base), kernel_mix(head)
    b, h = Counter(base.counts), Counter(head.counts)
    changes = [
        OpcodeChange(op, opcode_class(op), where, b[(op, where)], h[(op, where)])
        for op, where in sorted(set(b) | set(h))
        if b[(op, where)] != h[(op, where)]
    ]
    by_class: Counter = Counter()
    for change in changes:
        by_class[change.opcode_class] += change.delta
    resources = {}
    if base.resources and head.resources:
        for name in ("registers", "shared", "local", "stack"):
            pair = (getattr(base.resources, name), getattr(head.resources, name))
            if pair[0] != pair[1]:
                resources[name] = pair
    changes.sort(key=lambda c: (c.where != IN_LOOP, -abs(c.delta), c.opcode))
    return KernelDiff(
        head.name,
        changes,
        {k: v for k, v in by_class.items() if v},
        resources,
        (base.loops, head.loops),
        (sum(b.values()), sum(h.values())),
    )


def diff_binaries(base: Mapping[str, Code], head: Mapping[str, Code]) -> BinaryDiff:
    """Kernels of both sides (their code or its mix) matched by name; only those that differ are kept."""
    out = BinaryDiff(added=sorted(set(head) - set(base)), removed=sorted(set(base) - set(head)))
    for name in sorted(set(base) & set(head)):
        kd = diff_kernel(base[name], head[name])
        if kd.changed:
            out.kernels.append(kd)
        else:
            out.same.append(name)
    return out


def launched_only(diff: BinaryDiff, launched: Iterable[str]) -> BinaryDiff:
    """The part of `diff` about the kernels a call launched (ncu's names, compared by
    kernel_launches.short_kernel_name): empty when those kernels' code did not change. When no
    kernel of the binaries bears a launched name (a library's kernels, a differently printed
    name), the names cannot be compared and the whole diff is kept."""
    names = {short_kernel_name(name) for name in launched}
    if not names & {short_kernel_name(name) for name in diff.names()}:
        return diff

    def mine(name: str) -> bool:
        return short_kernel_name(name) in names

    return BinaryDiff(
        [kd for kd in diff.kernels if mine(kd.name)],
        [n for n in diff.added if mine(n)],
        [n for n in diff.removed if mine(n)],
        [n for n in diff.same if mine(n)],
    )


def case_code_change(diff: BinaryDiff | None, launched: Iterable[str]) -> str | None:
    """The static-code part of one case's cause: the diff of the kernels its calls launched
    (`launched_only`), described; None when there is no diff or those kernels did not change."""
    if diff is None:
        return None
    mine = launched_only(diff, launched)
    return describe_binaries(mine) if mine.changed else None


def describe(kd: KernelDiff) -> str:
    """One line: the opcode changes (loop ones first), then the resources that moved."""
    parts = [f"{c.delta:+d} {c.opcode} {c.where}" for c in kd.changes[:LISTED]]
    if len(kd.changes) > LISTED:
        parts.append(f"{len(kd.changes) - LISTED} more opcode changes")
    if kd.loops[0] != kd.loops[1]:
        parts.append(f"loops {kd.loops[0]} → {kd.loops[1]}")
    parts += [f"{name} {b} → {h}" for name, (b, h) in kd.resources.items()]
    return "; ".join(parts) if parts else "same instruction mix"


def describe_binaries(diff: BinaryDiff) -> str:
    parts = [f"{kd.name}: {describe(kd)}" for kd in diff.kernels]
    parts += [f"new kernel {name}" for name in diff.added] + [f"kernel {name} gone" for name in diff.removed]
    return " | ".join(parts) if parts else "the binaries' kernels have the same code"
