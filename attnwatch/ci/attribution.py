"""Who caused a crash: the case in flight, or something that ran before it?

A measuring process dies (a poisoned CUDA context, an abort, a segfault) while case X is in
flight. Usually X caused it. But a CUDA kernel's fault is reported asynchronously, at the next
call that synchronizes, and a kernel that writes out of bounds into another live allocation
faults nobody until a later kernel reads what it overwrote. So "in flight" is a suspicion, not
a verdict: on an H200, `cuda_wmma` lost its case to an illegal address in 2 of 4 `main` runs,
yet never alone, under memcheck or in 12 graph sessions (issue 11).

The rule (applied by ci/supervisor.py and the compare workers alike, through `CrashAttribution`):

1. The harness synchronizes the device at the end of every stage of every case
   (ci/suites/case_setup.py), so an asynchronous error of X's own work surfaces in X's stage.
2. The first crash of X is followed by an isolated re-run: X alone in a fresh process with
   CUDA_LAUNCH_BLOCKING=1 (every launch synchronous, so the launch that faults reports it),
   through the stages it reached. If X crashes alone, it is the cause:
   outcome `crashed`, error "crashed (attributed by isolated re-run): ...".
3. If X runs alone without error, the crash cannot be attributed: a note says
   "crash of unknown origin" with the stage and the case the process ran just before X, and X
   is measured again (its one retry) in a fresh process. A crash that does not recur thus
   costs nothing but time, and X's outcome is its real measurement.
4. If X crashes again in its retry, it is recorded `crashed` with the error
   "crash of unknown origin: ..." (it does not crash alone, it does crash in this run): the
   case is lost, and the record says it was not attributed.

Hangs (a timeout) are not re-run: a second hang would cost another full hang limit.
`Crash` and `Decision` are plain records; the probe (how X is re-run alone) is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

ATTRIBUTED = "crashed (attributed by isolated re-run)"
UNKNOWN_ORIGIN = "crash of unknown origin"
MAX_ERROR = 900  # characters of each error kept in an outcome (outcomes are capped downstream)


@dataclass(frozen=True)
class Crash:
    """A process died with `case_id` in flight in `stage`; `error` is what it said or its exit."""

    case_id: str
    stage: str
    error: str
    predecessor: str | None = None  # the case whose stage the process ran just before
    where: str = ""  # e.g. "head worker, round 3" or "child 2"


@dataclass(frozen=True)
class ProbeResult:
    """The isolated re-run of one case: did it crash, and what did it say?"""

    crashed: bool
    error: str | None = None
    seconds: float = 0.0
    inconclusive: str | None = None  # the re-run could not run the case (why); says nothing about it


@dataclass(frozen=True)
class Decision:
    """`retry`: measure the case again; otherwise record it with `status` and `error`."""

    retry: bool
    status: str | None = None
    error: str | None = None
    note: str | None = None  # for the run's notes (both kinds of decision may carry one)


def _cut(text: str | None) -> str:
    text = (text or "").strip()
    return text if len(text) <= MAX_ERROR else text[:MAX_ERROR] + " …"


@dataclass
class CrashAttribution:
    """Per run (or per compare side): remembers which cases already used their retry."""

    retried: dict[str, Crash] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    probes: int = 0

    def decide(self, crash: Crash, probe: Callable[[str, str], ProbeResult]) -> Decision:
        """The outcome of `crash`; `probe(case_id, stage)` re-runs the case alone."""
        where = f" ({crash.where})" if crash.where else ""
        first = self.retried.get(crash.case_id)
        if first is not None:
            note = (
                f"{UNKNOWN_ORIGIN}: {crash.case_id} crashed again during {crash.stage}{where}; its first crash "
                f"(during {first.stage}) was not reproduced alone; recorded as crashed, not attributed"
            )
            self.notes.append(note)
            return Decision(
                False,
                "crashed",
                f"{UNKNOWN_ORIGIN}: crashed during {crash.stage} in two processes "
                f"but not alone; last error: {_cut(crash.error)}",
                note,
            )
        self.probes += 1
        result = probe(crash.case_id, crash.stage)
        if result.crashed:
            return Decision(
                False,
                "crashed",
                f"{ATTRIBUTED}: during {crash.stage}: {_cut(crash.error)}; alone: {_cut(result.error)}",
            )
        self.retried[crash.case_id] = crash
        before = f"; the process had just run {crash.predecessor}" if crash.predecessor else ""
        alone = (
            f"its isolated re-run was inconclusive ({_cut(result.inconclusive)[:200]})"
            if result.inconclusive
            else "it ran alone without error (CUDA_LAUNCH_BLOCKING=1)"
        )
        note = (
            f"{UNKNOWN_ORIGIN} during {crash.stage} of {crash.case_id}{where}: {alone}{before}; "
            f"measured again. Error: {_cut(crash.error)[:300]}"
        )
        self.notes.append(note)
        return Decision(True, note=note)
