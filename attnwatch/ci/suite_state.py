"""What the parent knows about a run so far, rebuilt from the children's journals.

Every journal event (ci/journal.py, the engine's vocabulary in ci/engine/events.py) is applied
in order (`apply`); at the end of each child (`finish_generation`)
a build still in flight is marked crashed or timed out, a case in flight that hung is marked
timed out, and a case in flight when the child crashed becomes `pending_crash` (the caller
decides whether the case caused it: ci/attribution.py). A case keeps the first final outcome
it gets, and an "ok" without its timing and samples is lost (ci.case_records.checked_outcome).

The parent keeps one copy of each result, from the journal: a case's CaseTiming and samples
from its `result` event, pytest-benchmark's entry of its host timing from its `bench` event
(written as soon as its test ends, in pytest-benchmark's own `as_dict` layout, naming the case
in `extra_info["attnwatch_case"]`). The child's pytest-benchmark file repeats those entries; of
it only the header is read (machine_info, commit_info, version), if the child lived to write it.
`case_records` hands them to the one assembler (ci.bundle_assembly).
"""

from __future__ import annotations

import signal
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnwatch.ci.attribution import Crash
from attnwatch.ci.case_records import LOST_STATUSES, CaseRecords, checked_outcome
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.records import failed_build
from attnwatch.history.contract.bundle import CaseOutcome
from attnwatch.history.contract.checks import read_json_file
from attnwatch.history.errors import BundleError


def describe_exit(rc: int | None) -> str:
    """'exit status 3' or 'signal SIGABRT'."""
    if rc is None:
        return "no exit status"
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


class SuiteState:
    def __init__(self, cases: list[PlannedCase]) -> None:
        self.cases = {c.case_id: c for c in cases}
        self.order = [c.case_id for c in cases]
        self.outcomes: dict[str, CaseOutcome] = {}
        self.timings: dict[str, dict[str, Any]] = {}
        self.samples: dict[str, list[float]] = {}
        self.sample_clocks: dict[str, list[float | None]] = {}  # with a clock-recording recipe
        self.correctness: dict[str, list[dict[str, Any]]] = {}
        self.builds: dict[str, dict[str, Any]] = {}
        self.fingerprints: dict[str, dict[str, Any]] = {}  # variant -> fingerprint, as the first child took it
        self.host_entries: dict[str, dict[str, Any]] = {}  # pytest-benchmark's entry per case
        self.sessions: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.benchmark_header: dict[str, Any] = {}  # machine_info, commit_info, version of the first file read
        self.inflight: dict[str, Any] | None = None
        self.current_case: str | None = None
        self.previous_case: str | None = None  # the case whose stages ran just before the current one
        self.fault: dict[str, Any] | None = None  # what a dying child said about its poisoned context
        self.pending_crash: Crash | None = None  # a child died with a case in flight: the caller decides
        self._begun: dict[str, float] = {}

    # -- events ----------------------------------------------------------------------------

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        case: Any = event.get("case")  # a case id (str) in every event about a case
        if kind == "session":
            self.sessions.append(event)
        elif kind == "fingerprints":
            for name, fingerprint in (event.get("fingerprints") or {}).items():
                self.fingerprints.setdefault(name, fingerprint)
        elif kind == "build_begin":
            self.inflight = {"kind": "build", "variant": event["variant"], "stage": "build"}
        elif kind == "build":
            record = event["record"]
            self.builds.setdefault(record["variant"], record)
            self.inflight = None
        elif kind in ("begin", "beat"):
            self.inflight = {"kind": "case", "case": case, "stage": event.get("stage", "timing")}
            if case != self.current_case:
                self.previous_case = self.current_case
            self.current_case = case
            self._begun.setdefault(case, event.get("t", 0.0))
        elif kind == "correctness":
            self.correctness[case] = event["records"]
        elif kind == "result":  # the case's status is its `outcome`, after host timing
            if event.get("status") == "ok" and event.get("timing") is not None:
                self.timings[case] = event["timing"]
                self.samples[case] = event["samples_us"]
                if event.get("clocks_mhz"):
                    self.sample_clocks[case] = event["clocks_mhz"]
        elif kind == "bench":
            self.host_entries[case] = event["entry"]
        elif kind == "outcome":
            self._set_outcome(case, event["status"], event.get("error"), event.get("duration_s"))
            if self.inflight and self.inflight.get("case") == case:
                self.inflight = None
        elif kind == "fault":
            self.fault = {"case": case, "error": event.get("error")}
            if case is not None and (self.inflight is None or self.inflight.get("case") != case):
                stage = event.get("stage") or (self.inflight or {}).get("stage", "timing")
                self.inflight = {"kind": "case", "case": case, "stage": stage}
        elif kind == "note":
            self.notes.append(f"{case}: {event.get('text')}" if case else str(event.get("text")))

    def _set_outcome(self, case_id: str, status: str, error: str | None, duration_s: float | None = None) -> None:
        if case_id in self.outcomes or case_id not in self.cases:
            return
        c = self.cases[case_id]
        self.outcomes[case_id] = CaseOutcome(
            case_id, c.variant, c.shape_id, c.dtype, c.causal, status, error, duration_s, operator=c.operator
        )

    # -- end of a child ------------------------------------------------------------------

    def finish_generation(
        self, benchmark_path: Path, *, rc: int | None, timed_out: bool, log_tail: str, timeout_s: float
    ) -> None:
        if self.inflight is not None:
            stage = self.inflight["stage"]
            said = (self.fault or {}).get("error")
            if timed_out:
                status, why = "timeout", f"no sign of life for {timeout_s:g} s during {stage}; the child was killed"
                if self.inflight["kind"] == "build":
                    why = f"no sign of life during {stage}; the child was killed"
            elif said:
                status, why = "crashed", f"{said}; the child then exited ({describe_exit(rc)})"
            else:
                status, why = (
                    "crashed",
                    f"the child died ({describe_exit(rc)}) during {stage}; its log ends: {log_tail[-600:]}",
                )
            if self.inflight["kind"] == "build":
                variant = self.inflight["variant"]
                self.builds.setdefault(variant, asdict(failed_build(variant, f"build {status}: {why}")))
                for case in self.remaining():
                    if case.variant == variant:
                        self._set_outcome(case.case_id, status, f"build {status}: {why}")
            elif timed_out:
                self._set_outcome(self.inflight["case"], status, why)
            else:  # a crash: whether the case caused it is decided by the caller (ci/attribution.py)
                previous = self.previous_case if self.previous_case != self.inflight["case"] else None
                self.pending_crash = Crash(self.inflight["case"], stage, why, previous)
        self.inflight = None
        self.fault = None
        if not self.benchmark_header:
            self.benchmark_header = _benchmark_header(benchmark_path)
        for cid, outcome in self.outcomes.items():
            self.outcomes[cid] = checked_outcome(outcome, self.timings.get(cid), self.samples.get(cid))

    def take_crash(self) -> Crash | None:
        """The crash of the last child, if it died with a case in flight (once)."""
        crash, self.pending_crash = self.pending_crash, None
        return crash

    def record(self, case_id: str, status: str, error: str | None) -> None:
        """Set a case's final outcome from outside the journal (a crash's attribution)."""
        self._set_outcome(case_id, status, error)

    # -- queries -------------------------------------------------------------------------

    def remaining(self) -> list[PlannedCase]:
        return [self.cases[c] for c in self.order if c not in self.outcomes]

    def fail_remaining(self, error: str) -> None:
        for case in self.remaining():
            self._set_outcome(case.case_id, "failed", error)

    def lost_cases(self) -> list[CaseOutcome]:
        return [o for o in self.outcomes.values() if o.status in LOST_STATUSES]

    def ok_ids(self) -> list[str]:
        return [c for c in self.order if c in self.outcomes and self.outcomes[c].status == "ok"]

    def ok_kernel_cases(self) -> list[Any]:
        return [self.cases[c].to_case() for c in self.ok_ids()]

    def ordered_outcomes(self) -> list[CaseOutcome]:
        return [self.outcomes[c] for c in self.order if c in self.outcomes]

    def device_properties(self) -> dict[str, Any]:
        """The environment the (last) child journalled, with its device properties."""
        return dict(self.sessions[-1].get("environment") or {}) if self.sessions else {}

    def case_records(self) -> list[CaseRecords]:
        """Each case with an outcome, in plan order, with the one copy of its records."""
        return [
            CaseRecords(
                self.outcomes[c],
                self.timings.get(c),
                self.samples.get(c),
                self.host_entries.get(c),
                self.correctness.get(c, []),
                self.sample_clocks.get(c),
            )
            for c in self.order
            if c in self.outcomes
        ]


def _benchmark_header(path: Path) -> dict[str, Any]:
    """machine_info, commit_info and version of a child's pytest-benchmark file; {} when the child
    died before writing it (the assembler then records the device properties the child journalled)."""
    if not path.is_file():
        return {}
    try:
        data, _ = read_json_file(path, allow_constants=True)  # pytest-benchmark's file: it writes NaN/Infinity
    except (OSError, BundleError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {key: data.get(key) for key in ("machine_info", "commit_info", "version")}
