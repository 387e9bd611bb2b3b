"""The engine: build, check and time the cases of a plan, one interleave group at a time.

One `Engine` per measuring process (the run child, a compare worker). It imports the plan's
variant modules, opens the device (L2 flusher, block timer with its guard kernel and stream
pool, clock monitor: ci/suites/case_setup.py, ci/timing), then on request:

* `build_all`: every planned, available variant once; a failed build fails its cases;
* `measure(cases, round)`: per interleave group of the cases, after the round's renewals
  (ci/engine/rounds.py: seeds, placement spacer, stream pool, tuned choices): each case
  resolved, checked for correctness the first time this process sees it, prepared over
  rotating input sets and warmed up (the first case of the call for `warmup_min_s`, so the
  clocks leave idle; the rest, with clocks up, for `warmup_calls`); then the group timed
  round-robin by the adaptive sampler (ci/timing/sampler.py); a case whose median is under
  `graph_threshold_us` also timed as CUDA-graph replays the first time this process times it
  (a side figure, ci/timing/graphs.py: once per case, like its correctness check); then
  CaseTiming and gaps (ci/timing/derived.py). Every case's `result` is emitted as it is known;
* `probe(case, stage)`: the isolated re-run of ci/attribution.py.

Faults: every stage ends with a device synchronization, so an asynchronous CUDA error
surfaces in the stage (and case) that issued it; a Python error of a variant costs its case
in this call (`failed`); a CUDA error that poisons the context is emitted as `fault` and the
process exits at once with CRASH_EXIT_CODE (every later call would fail); its parent decides
what the case's outcome is and starts a fresh process. Events: ci/engine/events.py.

Interleave group id: `<group>#<pid>.<round>`, one per timed group: gaps are taken inside one
(ci/timing/derived.py, `apply_gaps`), and a re-run in a fresh process or another round of a
compare never shares one.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Collection, Iterator

from attnwatch.ci.engine.events import CRASH_EXIT_CODE, BY_VARIANT_STAGES, STAGES, Emit, variant_stage_key
from attnwatch.ci.engine.rounds import forget_tuned_choices, round_seed, spacer
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import TimingConfig
from attnwatch.ci.suites.case_setup import (
    CaseSetup,
    device_monitor,
    is_poisoning,
    open_device,
    variant_availability,
)
from attnwatch.ci.timing.derived import KernelRan, apply_gaps, case_timing
from attnwatch.ci.timing.sampler import RawMeasurement, Subject, SubjectFailed, kept, measure_interleaved, warm_up
from attnwatch.ci.timing.graphs import graph_replay_us
from attnwatch.ci.kernels_api import kernels_api
from attnwatch.ci.variant_modules import load_specs
from attnwatch.history.analysis.statistics import median


@dataclass
class CaseResult:
    """One case's measurement in one call; `message()` is its `result` event."""

    status: str  # ok (timed), failed, skipped, unsupported
    error: str | None = None
    timing: dict[str, Any] | None = None  # history.contract.bundle.CaseTiming as a dict, gaps filled
    samples_us: list[float] = field(default_factory=list)
    # Each sample's SM clock (MHz; None where its block got no reading), with a clock record
    # (the run's recipe, ci/timing/power.py); empty otherwise.
    clocks_mhz: list[float | None] = field(default_factory=list)
    converged: bool = False
    throttled_samples: int = 0
    graph_note: str | None = None
    fn: Any = None  # the prepared callable, while the caller keeps it (the run child's host timing)
    started: float = field(default_factory=time.time)

    def message(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "error": self.error,
            "timing": self.timing,
            "samples_us": self.samples_us,
            "clocks_mhz": self.clocks_mhz,
            "converged": self.converged,
            "throttled_samples": self.throttled_samples,
            "graph_note": self.graph_note,
        }


def interleave_id(group: str, round_index: int) -> str:
    """The id of one timed group of one process and call (module docstring)."""
    return f"{group}#{os.getpid()}.{round_index}"


class Engine:
    """The warm state of one measuring process: plan, device, timer, flusher, setup, and what
    it has seen (cases checked, cases graph-timed), with seconds spent per stage."""

    def __init__(self, plan: RunPlan, emit: Emit, failed_builds: dict[str, str] | None = None) -> None:
        self.plan = plan
        self.emit = emit
        self.config = TimingConfig.from_dict(plan.timing)
        load_specs(plan.extra_variant_modules)
        self.device, self.flusher, self.timer = open_device(plan.device_kind, self.config)
        self.setup = CaseSetup(plan, self.device, self.config)
        self.setup.build_failures.update(failed_builds or {})
        self.monitor = device_monitor(plan.device_kind, self.device)
        # Probe the machine (nvcc, CuPy, Triton) now, inside the start-up allowance, rather
        # than in the first case, whose hang limit is meant for the kernel.
        kernels_api().capabilities()
        self.cases = {c.case_id: c for c in plan.cases}
        self.checked: set[str] = set()
        self.to_check: set[str] | None = None  # measure(check=...): None checks every case
        self.graphed: set[str] = set()
        self.seconds = {stage: 0.0 for stage in STAGES}

    # -- stages and faults -------------------------------------------------------------------

    @contextmanager
    def stage(self, case_id: str, stage: str, **fields: Any) -> Iterator[None]:
        """Announce the stage; synchronize at its end; a poisoning error ends the process."""
        self.emit("begin", case=case_id, stage=stage, **fields)
        started = time.perf_counter()
        try:
            yield
            self.setup.device_sync()  # an asynchronous error of this stage surfaces here, not later
        except SubjectFailed as failed:  # the sampler names the subject that raised
            if is_poisoning(failed.exc):
                self.fault(failed.key, stage, failed.exc)
            raise
        except Exception as exc:  # noqa: BLE001 - classified: fatal ends the process, else re-raised
            if is_poisoning(exc):
                self.fault(case_id, stage, exc)
            raise
        finally:
            spent = time.perf_counter() - started
            self.seconds[stage] += spent
            if stage in BY_VARIANT_STAGES:  # also by variant: which kernel a side's warm-up is spent on
                key = variant_stage_key(stage, case_id)
                self.seconds[key] = self.seconds.get(key, 0.0) + spent

    def fault(self, case_id: str | None, stage: str, exc: BaseException, **fields: Any) -> None:
        """The context is poisoned: say so (the parent decides the outcome) and exit at once."""
        try:
            self.emit("fault", case=case_id, stage=stage, error=f"{stage}: {type(exc).__name__}: {exc}", **fields)
        finally:
            os._exit(CRASH_EXIT_CODE)

    # -- builds ------------------------------------------------------------------------------

    def build_all(self) -> list[dict[str, Any]]:
        """Build every planned, available variant once (ci.records' build records); a failed
        build fails its cases; a build the parent already saw fail is not tried again."""
        from attnwatch.ci.records import build_record, failed_build

        records = []
        for name in dict.fromkeys(c.variant for c in self.plan.cases):
            try:
                variant = kernels_api().get(name)
            except KeyError:
                continue  # reported per case
            if name in self.setup.build_failures:
                continue
            if variant.build is None or not self.plan.build or not variant_availability(variant)[0]:
                continue
            self.emit("build_begin", variant=name)
            started = time.perf_counter()
            try:
                record = build_record(variant.build())
            except Exception as exc:  # noqa: BLE001 - a build error is data, not a crash
                if is_poisoning(exc):
                    self.fault(None, "build", exc, variant=name)
                record = failed_build(name, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
            records.append(asdict(record))
            self.emit("build", record=records[-1], wall_s=time.perf_counter() - started)
            if not record.ok:
                self.setup.build_failures[name] = record.error or "build failed"
        return records

    # -- measuring ---------------------------------------------------------------------------

    def measure(
        self,
        cases: list[PlannedCase],
        round_index: int = 0,
        sampling: dict[str, Any] | None = None,
        keep_callables: bool = False,
        check: Collection[str] | None = None,
    ) -> dict[str, CaseResult]:
        """Measure `cases` now, group by group (module docstring); one CaseResult per case.

        `sampling` overrides the plan's timing settings for this call (a compare's per-round
        caps). With `keep_callables` the ok results keep their prepared callable (and so
        their inputs) after the call; otherwise each group's are freed before the next
        group's placement is drawn. `check`: the case ids to check for correctness (None: every
        case, as the plan says); a compare checks only the head's changed variants
        (ci/compare/select.head_checks)."""
        self.to_check = None if check is None else set(check)
        forget_tuned_choices()
        self.timer.renew_streams()
        config = self.config.with_overrides(**(sampling or {}))
        seed = round_seed(self.plan.timing_seed, round_index)
        groups: dict[str, list[PlannedCase]] = {}
        for case in cases:
            groups.setdefault(case.group, []).append(case)
        results: dict[str, CaseResult] = {}
        warm_config = config
        for group, members in groups.items():
            with self.stage(members[0].case_id, "placement"):
                held = spacer(self.device, self.flusher, self.plan.timing_seed, round_index, group)
            subjects = []
            for case in members:
                result = results[case.case_id] = self._ready(case, seed, warm_config)
                warm_config = config.with_overrides(warmup_min_s=0.0)  # clocks are up after the first
                if result.fn is None:
                    self.emit("result", case=case.case_id, **result.message())
                else:
                    subjects.append(Subject(case.case_id, result.fn))
            if subjects:
                self._time(group, subjects, config, round_index, results)
            if not keep_callables:
                for subject in subjects:
                    results[subject.key].fn = None
            del subjects, held
        return results

    def _ready(self, case: PlannedCase, seed: int, config: TimingConfig) -> CaseResult:
        """Resolve, check (the first time), prepare and warm up: ok with its callable, or why not."""
        resolved, early = self.setup.resolve(case)
        if early is not None:
            return CaseResult(*early)
        variant, kcase = resolved
        result = CaseResult("ok")
        try:
            if self.plan.correctness and case.case_id not in self.checked and self._asked_to_check(case.case_id):
                with self.stage(case.case_id, "correctness"):
                    records = self.setup.check(case, variant, kcase)
                self.checked.add(case.case_id)
                self.emit("correctness", case=case.case_id, records=records)
            with self.stage(case.case_id, "prepare"):
                fn = self.setup.prepare_rotation(variant, kcase, case, seed)
            with self.stage(case.case_id, "warmup"):
                warm_up(fn, config, self.timer, self.flusher)
        except Exception as exc:  # noqa: BLE001 - the variant's error costs its case in this call
            return CaseResult("failed", f"{type(exc).__name__}: {exc}", started=result.started)
        result.fn = fn
        return result

    def _asked_to_check(self, case_id: str) -> bool:
        return self.to_check is None or case_id in self.to_check

    def _time(
        self,
        group: str,
        subjects: list[Subject],
        config: TimingConfig,
        round_index: int,
        results: dict[str, CaseResult],
    ) -> None:
        """Time the group's subjects interleaved; graph replay; CaseTiming and gaps; emit results."""
        with self.stage(subjects[0].key, "timing", group=group):
            raws = measure_interleaved(
                subjects,
                config,
                self.timer,
                self.flusher,
                self.monitor,
                on_block=lambda key: self.emit("beat", case=key, stage="timing"),
                is_fatal=is_poisoning,
                after_block=self.setup.device_sync,
            )
        timed: list[tuple[Any, RawMeasurement]] = []
        for subject in subjects:
            raw, result = raws[subject.key], results[subject.key]
            if raw.error or not raw.samples_us:
                result.status, result.error, result.fn = "failed", raw.error or "no samples", None
                continue
            self._graph(subject, raw, config)
            timed.append(
                (
                    case_timing(
                        self.cases[subject.key],
                        raw,
                        interleave_id(group, round_index),
                        self.setup.kernels_ran.get(subject.key, KernelRan()),
                    ),
                    raw,
                )
            )
        apply_gaps([t for t, _ in timed], self.plan.baselines, self.plan.references)
        for timing, raw in timed:
            result = results[timing.case_id]
            result.timing, (result.samples_us, result.clocks_mhz) = asdict(timing), kept(raw)  # what its statistics use
            result.converged, result.throttled_samples, result.graph_note = (
                raw.converged,
                raw.throttled_samples,
                raw.graph_note,
            )
        for subject in subjects:
            self.emit("result", case=subject.key, **results[subject.key].message())

    def _graph(self, subject: Subject, raw: RawMeasurement, config: TimingConfig) -> None:
        """CUDA-graph replay of a launch-bound case, the first time this process times it."""
        if self.plan.device_kind != "cuda" or subject.key in self.graphed:
            return
        if median(raw.samples_us) >= config.graph_threshold_us:
            return
        self.graphed.add(subject.key)
        try:
            with self.stage(subject.key, "graph"):
                raw.graph_median_us, raw.graph_note = graph_replay_us(
                    subject.fn, self.flusher, config.graph_calls, config.graph_replays
                )
        except Exception as exc:  # noqa: BLE001 - a side figure: its Python error costs it, not the case
            raw.graph_median_us, raw.graph_note = None, f"graph replay failed: {type(exc).__name__}: {exc}"

    # -- the isolated re-run -----------------------------------------------------------------

    def probe(self, case_id: str, stage: str | None) -> dict[str, Any]:
        """The case alone through every stage up to the one it crashed in (ci/attribution.py):
        {status, error}; a crash of the case ends the process as in any stage."""
        case = self.cases[case_id]
        last = stage if stage in STAGES else "timing"
        wanted = STAGES[: STAGES.index(last) + 1]
        config = self.config.with_overrides(
            min_samples=3 * self.config.block_calls, max_samples=3 * self.config.block_calls, time_cap_s=1.0
        )
        ready = self._ready(case, self.plan.timing_seed, config)
        if ready.fn is None:
            return {"status": ready.status, "error": ready.error}
        fn, error = ready.fn, None
        try:
            with self.stage(case_id, "timing"):
                error = measure_interleaved(
                    [Subject(case_id, fn)],
                    config,
                    self.timer,
                    self.flusher,
                    self.monitor,
                    is_fatal=is_poisoning,
                    after_block=self.setup.device_sync,
                )[case_id].error
            if "graph" in wanted and self.plan.device_kind == "cuda":
                with self.stage(case_id, "graph"):
                    graph_replay_us(fn, self.flusher, config.graph_calls, config.graph_replays)
            if "host_timing" in wanted:
                with self.stage(case_id, "host_timing"):
                    for _ in range(3):
                        self.flusher.flush()
                        fn()
                        self.setup.device_sync()
        except Exception as exc:  # noqa: BLE001 - a Python error alone is not a crash
            error = f"{type(exc).__name__}: {exc}"
        return {"status": "ok" if error is None else "failed", "error": error}
