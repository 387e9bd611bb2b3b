"""What the parent knows about a run so far, rebuilt from the children's journals.

Every journal event (ci/journal.py, the engine's vocabulary in ci/engine/events.py) is applied
in order (`apply`); at the end of each child (`finish_generation`)
a build still in flight is marked crashed or timed out, a case in flight that hung is marked
timed out, and a case in flight when the child crashed becomes `pending_crash` (the caller
decides whether the case caused it: ci/attribution.py). The child's
pytest-benchmark JSON is read if the child lived to write it, else its benchmark entries are
taken from the journal (the child journals each entry as soon as its test ends, in
pytest-benchmark's own `as_dict` layout). A case keeps the first final outcome it gets.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnwatch.ci.attribution import Crash
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.records import failed_build
from attnwatch.history.contract.bundle import CaseOutcome

LOST_STATUSES = ("failed", "crashed", "timeout")


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
        self.correctness: dict[str, list[dict[str, Any]]] = {}
        self.builds: dict[str, dict[str, Any]] = {}
        self.bench_entries: dict[str, dict[str, Any]] = {}
        self.sessions: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.machine_info: dict[str, Any] | None = None
        self.commit_info: dict[str, Any] = {}
        self.benchmark_version: str | None = None
        self.inflight: dict[str, Any] | None = None
        self.current_case: str | None = None
        self.previous_case: str | None = None  # the case whose stages ran just before the current one
        self.fault: dict[str, Any] | None = None  # what a dying child said about its poisoned context
        self.pending_crash: Crash | None = None  # a child died with a case in flight: the caller decides
        self._gen_entries: dict[str, dict[str, Any]] = {}
        self._begun: dict[str, float] = {}

    # -- events ----------------------------------------------------------------------------

    def apply(self, event: dict[str, Any]) -> None:
        kind = event.get("kind")
        case = event.get("case")
        if kind == "session":
            self.sessions.append(event)
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
        elif kind == "bench":
            self._gen_entries[case] = event["entry"]
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
        self.outcomes[case_id] = CaseOutcome(case_id, c.variant, c.shape_id, c.dtype, c.causal, status, error, duration_s)

    # -- end of a child ------------------------------------------------------------------

    def finish_generation(self, benchmark_path: Path, *, rc: int | None, timed_out: bool, log_tail: str, timeout_s: float) -> None:
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
                status, why = "crashed", f"the child died ({describe_exit(rc)}) during {stage}; its log ends: {log_tail[-600:]}"
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
        file_entries = self._read_benchmark_file(benchmark_path)
        # The file is pytest-benchmark's own record; journalled entries fill what it lacks.
        entries = {**self._gen_entries, **(file_entries or {})}
        if file_entries is None and self._gen_entries:
            self.notes.append(f"{benchmark_path.name}: the child died before writing it; its benchmark entries come from the journal")
        for cid, entry in entries.items():
            outcome = self.outcomes.get(cid)
            if outcome is not None and outcome.status == "ok":
                self.bench_entries.setdefault(cid, entry)
        for cid, outcome in self.outcomes.items():
            if outcome.status == "ok" and (cid not in self.bench_entries or cid not in self.timings):
                # An "ok" must come with its record; without one the case is lost, not measured.
                outcome.status, outcome.error = "failed", "reported ok but no benchmark entry or timing was recorded"
        self._gen_entries = {}

    def _read_benchmark_file(self, path: Path) -> dict[str, dict[str, Any]] | None:
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            return None
        if self.machine_info is None:
            self.machine_info = data.get("machine_info") or {}
            self.commit_info = data.get("commit_info") or {}
            self.benchmark_version = data.get("version")
        out = {}
        for entry in data.get("benchmarks", []):
            cid = ((entry.get("extra_info") or {}).get("attnwatch") or {}).get("case_id")
            if cid:
                out[cid] = entry
        return out

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
        return [c for c in self.order if c in self.outcomes and self.outcomes[c].status == "ok" and c in self.bench_entries]

    def ok_kernel_cases(self) -> list[Any]:
        return [self.cases[c].to_case() for c in self.ok_ids()]

    def ordered_outcomes(self) -> list[CaseOutcome]:
        return [self.outcomes[c] for c in self.order if c in self.outcomes]

    def device_properties(self) -> dict[str, Any]:
        """The environment the (last) child journalled, with its device properties."""
        return dict(self.sessions[-1].get("environment") or {}) if self.sessions else {}

    def benchmark_json(self) -> dict[str, Any]:
        """pytest-benchmark's layout, merged over all children, ok cases only, plan order."""
        from importlib.metadata import version

        machine_info = self.machine_info
        if machine_info is None:
            machine_info = {"attnwatch": self.device_properties()}
        return {
            "machine_info": machine_info,
            "commit_info": self.commit_info,
            "benchmarks": [self.bench_entries[c] for c in self.ok_ids()],
            "datetime": _utc_iso(),
            "version": self.benchmark_version or version("pytest-benchmark"),
        }


def _utc_iso() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat()
