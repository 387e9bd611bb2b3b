"""What a producer holds of one planned case, and the rule that an "ok" comes with its record.

`attnwatch run` (ci.suite_state, from its children's journals) and `attnwatch compare` (from
its workers' rounds) both end with one CaseRecords per planned case, as the measuring process
reported them (JSON objects), and hand them to the one assembler, ci.bundle_assembly. A case
reported ok whose timing or samples never arrived is lost, not measured: `checked_outcome` is
that rule, the one place it is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from attnwatch.history.contract.bundle import CaseOutcome

LOST_STATUSES = ("failed", "crashed", "timeout")
NO_RECORD = "reported ok but no timing or samples were recorded"


@dataclass
class CaseRecords:
    outcome: CaseOutcome
    timing: dict[str, Any] | None = None  # the CaseTiming, as the measuring process reported it
    samples: list[float] | None = None  # per-call latencies (µs)
    host_entry: dict[str, Any] | None = None  # pytest-benchmark's entry (`attnwatch run`; compare times no host)
    checks: list[dict[str, Any]] = field(default_factory=list)  # CorrectnessRecord objects
    clocks: list[float | None] | None = None  # each sample's SM clock (MHz), with a clock-recording recipe

    def checked(self) -> CaseRecords:
        """These records with the outcome `checked_outcome` gives them."""
        return dataclasses.replace(self, outcome=checked_outcome(self.outcome, self.timing, self.samples))


def checked_outcome(outcome: CaseOutcome, timing: dict | None, samples: list[float] | None) -> CaseOutcome:
    """An ok outcome without its timing and samples becomes "failed" (NO_RECORD); any other is kept."""
    if outcome.status == "ok" and not (timing and samples):
        return dataclasses.replace(outcome, status="failed", error=NO_RECORD)
    return outcome


def outcomes_status(outcomes: list[CaseOutcome]) -> str:
    """A run's status: complete (nothing lost), partial (some lost, some measured), failed (nothing measured)."""
    if not any(o.status in LOST_STATUSES for o in outcomes):
        return "complete"
    return "partial" if any(o.status == "ok" for o in outcomes) else "failed"
