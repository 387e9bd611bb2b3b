"""The measuring child's logic: resolve, build, check and time the cases of the plan.

Runs inside the pytest child (`ci/suites/test_bench.py`), never in the parent. The first test
of an interleave group calls `GroupMeasurer.result(case)`, which measures the whole group
(every variant of one shape/dtype/causal) round-robin and caches the results; each test then
reports its own case to pytest-benchmark. The stages of a case (resolve, correctness, prepare)
are ci.suites.case_setup's, shared with the compare workers.

Fault handling here, the parent does the rest (ci/runner.py, ci/attribution.py):
* a variant that raises a Python error loses its case: outcome `failed` with the error;
* every stage ends with a device synchronization, so an asynchronous CUDA error surfaces in
  the stage (and case) that issued the work;
* a CUDA error poisons this process's context (every later call would fail), so the child
  journals a `fault` naming the case and stage and exits at once; the parent decides what the
  case's outcome is (an isolated re-run tells whether the case causes the crash) and restarts
  a fresh child for the remaining cases;
* an abort or a hang cannot be handled here: the journal's last `begin`/`beat` names the
  case, and the parent handles it the same way.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import import_module
from typing import Any, Iterator

from attnwatch.ci.journal import JournalWriter
from attnwatch.ci.kernels_api import kernels_api
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import TimingConfig
from attnwatch.ci.suites.case_setup import (
    CaseSetup,
    device_monitor,
    is_poisoning,
    open_device,
    variant_availability,
)
from attnwatch.ci.timing.derived import apply_gaps, case_timing
from attnwatch.ci.timing.engine import Subject, SubjectFailed, measure_interleaved, warm_up
from attnwatch.ci.timing.graphs import graph_replay_us

CRASH_EXIT_CODE = 70


@dataclass
class CaseResult:
    status: str  # ok (timed), failed, skipped, unsupported
    error: str | None = None
    timing: dict[str, Any] | None = None
    fn: Any = None
    started: float = field(default_factory=time.time)


class GroupMeasurer:
    """Session-scoped: device, timer, flusher, monitor and the per-group result cache."""

    def __init__(self, plan: RunPlan, journal: JournalWriter) -> None:
        self.plan = plan
        self.journal = journal
        self.config = TimingConfig.from_dict(plan.timing)
        for module in plan.extra_variant_modules:
            import_module(module)
        self.device, self.flusher, self.timer = open_device(plan, self.config)
        self.setup = CaseSetup(plan, self.device, self.config)
        self.monitor = device_monitor(plan, self.device)
        # Probe the machine (nvcc, CuPy, Triton) now, inside the start-up allowance, rather
        # than in the first case, whose hang limit is meant for the kernel.
        kernels_api().capabilities()
        self.families = self.setup.families
        self.build_failures = self.setup.build_failures
        self._results: dict[str, CaseResult] = {}
        self._by_group: dict[str, list[PlannedCase]] = {}
        self._cases = {c.case_id: c for c in plan.cases}
        for case in plan.cases:
            self._by_group.setdefault(case.group, []).append(case)

    def case(self, case_id: str) -> PlannedCase:
        return self._cases[case_id]

    # -- journalling helpers -------------------------------------------------------------

    @contextmanager
    def phase(self, case_id: str, phase: str) -> Iterator[None]:
        """Journal the phase; a poisoning CUDA error is journalled as a crash and ends the child."""
        self.journal.write("begin", case=case_id, phase=phase)
        try:
            yield
            self.setup.device_sync()  # an asynchronous error of this stage surfaces here, not later
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised unless fatal
            if is_poisoning(exc):
                self.crash(case_id, f"{phase}: {type(exc).__name__}: {exc}")
            raise

    def crash(self, case_id: str, error: str) -> None:
        """The context is poisoned: journal the fault (the parent decides the outcome) and exit."""
        self.journal.write("fault", case=case_id, error=error)
        os._exit(CRASH_EXIT_CODE)

    def outcome(self, case: PlannedCase, status: str, error: str | None = None) -> None:
        started = self._results[case.case_id].started if case.case_id in self._results else time.time()
        self.journal.write("outcome", case=case.case_id, status=status, error=error, duration_s=time.time() - started)

    # -- builds ----------------------------------------------------------------------------

    def build_all(self) -> None:
        """Build every planned, available variant once; a failed build fails its cases."""
        from attnwatch.ci.records import build_record, failed_build

        for name in dict.fromkeys(c.variant for c in self.plan.cases):
            try:
                variant = kernels_api().get(name)
            except KeyError:
                continue  # reported per case
            self.families[name] = variant.family
            if variant.build is None or not self.plan.build or not variant_availability(variant)[0]:
                continue
            self.journal.write("build_begin", variant=name)
            started = time.perf_counter()
            try:
                record = build_record(variant.build())
            except Exception as exc:  # noqa: BLE001 - a build error is data, not a crash
                if is_poisoning(exc):
                    self.journal.write("build", record=asdict(failed_build(name, str(exc))))
                    os._exit(CRASH_EXIT_CODE)
                record = failed_build(name, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
            self.journal.write("build", record=asdict(record))
            if not record.ok:
                self.build_failures[name] = record.error or "build failed"

    # -- measuring -----------------------------------------------------------------------

    def result(self, case: PlannedCase) -> CaseResult:
        if case.case_id not in self._results:
            self._release_other_groups(case.group)
            self._measure_group(self._by_group[case.group])
        return self._results[case.case_id]

    def _release_other_groups(self, group: str) -> None:
        """Drop the callables (and so the device tensors) of groups already reported."""
        for other in self._by_group:
            if other != group:
                for c in self._by_group[other]:
                    if c.case_id in self._results:
                        self._results[c.case_id].fn = None

    def _resolve(self, case: PlannedCase) -> tuple[Any, CaseResult | None]:
        resolved, early = self.setup.resolve(case)
        return resolved, (CaseResult(*early) if early is not None else None)

    def _measure_group(self, cases: list[PlannedCase]) -> None:
        subjects: list[Subject] = []
        for case in cases:
            resolved, early = self._resolve(case)
            if early is not None:
                self._results[case.case_id] = early
                continue
            variant, kcase = resolved
            self._results[case.case_id] = CaseResult("ok")
            try:
                if self.plan.correctness:
                    with self.phase(case.case_id, "correctness"):
                        self._check(case, variant, kcase)
                with self.phase(case.case_id, "prepare"):
                    fn = self.setup.prepare_rotation(variant, kcase, case, self.plan.timing_seed)
                with self.phase(case.case_id, "warmup"):
                    warm_up(fn, self.config, self.timer, self.flusher)
            except Exception as exc:  # noqa: BLE001 - the variant's error costs its case only
                self._results[case.case_id] = CaseResult("failed", f"{type(exc).__name__}: {exc}")
                continue
            self._results[case.case_id].fn = fn
            subjects.append(Subject(case.case_id, fn))
        if subjects:
            self._time(subjects, cases)

    def input_set_count(self, case: PlannedCase) -> int:
        return self.setup.input_set_count(case)

    def _time(self, subjects: list[Subject], cases: list[PlannedCase]) -> None:
        by_id = {c.case_id: c for c in cases}
        group = cases[0].group
        self.journal.write("begin", case=subjects[0].key, phase="timing", group=group)
        try:
            raws = measure_interleaved(
                subjects, self.config, self.timer, self.flusher, self.monitor,
                on_block=lambda key: self.journal.write("beat", case=key),
                is_fatal=is_poisoning,
                after_block=self.setup.device_sync,
            )
        except SubjectFailed as failed:
            self.crash(failed.key, f"timing: {type(failed.exc).__name__}: {failed.exc}")
            raise  # unreachable: crash() exits
        timings = []
        for subject in subjects:
            raw = raws[subject.key]
            if raw.error or not raw.samples_us:
                self._results[subject.key] = CaseResult("failed", raw.error or "no samples")
                continue
            median = sorted(raw.samples_us)[len(raw.samples_us) // 2]
            if self.plan.device_kind == "cuda" and median < self.config.graph_threshold_us:
                with self.phase(subject.key, "graph"):
                    raw.graph_median_us, raw.graph_note = graph_replay_us(
                        subject.fn, self.flusher, self.config.graph_calls, self.config.graph_replays)
            case = by_id[subject.key]
            timing = case_timing(case, raw, f"{group}#{os.getpid()}",
                                 self.setup.kernel_configs.get(subject.key, (None, None)))
            timings.append((timing, raw))
        apply_gaps([t for t, _ in timings], self.families, self.plan.reference)
        for timing, raw in timings:
            data = asdict(timing)
            self._results[timing.case_id].timing = data
            self.journal.write("measured", case=timing.case_id, timing=data, samples=raw.samples_us,
                               graph_note=raw.graph_note)

    def _check(self, case: PlannedCase, variant: Any, kcase: Any) -> None:
        """Correctness on fresh inputs per seed (kernels.correctness), journalled as records."""
        self.journal.write("correctness", case=case.case_id, records=self.setup.check(case, variant, kcase))
