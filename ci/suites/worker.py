"""The measuring child's logic: resolve, build, check and time the cases of the plan.

Runs inside the pytest child (`ci/suites/test_bench.py`), never in the parent. The first test
of an interleave group calls `GroupMeasurer.result(case)`, which measures the whole group
(every variant of one shape/dtype/causal) round-robin and caches the results; each test then
reports its own case to pytest-benchmark.

Fault handling here, the parent does the rest (ci/runner.py):
* a variant that raises a Python error loses its case: outcome `failed` with the error;
* a CUDA error poisons this process's context (every later call would fail), so the child
  journals the case as `crashed` and exits at once; the parent restarts a fresh child for
  the remaining cases;
* an abort or a hang cannot be handled here: the journal's last `begin`/`beat` names the
  case, and the parent marks it.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from importlib import import_module
from typing import Any, Iterator

from ci.journal import JournalWriter
from ci.plan import PlannedCase, RunPlan
from ci.run_config import TimingConfig
from ci.timing.derived import apply_gaps, case_timing
from ci.timing.engine import Subject, SubjectFailed, measure_interleaved, warm_up
from ci.timing.gpu_state import open_monitor
from ci.timing.graphs import graph_replay_us
from ci.timing.timers import CpuWallTimer, CudaEventTimer, L2Flusher, NoFlush

CRASH_EXIT_CODE = 70
# Texts that identify an error after which the CUDA context is unusable (sticky errors).
_POISON_MARKERS = (
    "illegal memory access",
    "illegal address",
    "unspecified launch failure",
    "device-side assert",
    "misaligned address",
    "illegal instruction",
    "CUDA_ERROR_",
    "cudaErrorIllegal",
    "cudaErrorLaunchFailure",
    "AcceleratorError",
    "CUDA error",
)


def is_poisoning(exc: BaseException) -> bool:
    """True when `exc` is a CUDA error that leaves the context unusable (not out-of-memory)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return False
    text = f"{type(exc).__name__}: {exc}"
    return any(marker in text for marker in _POISON_MARKERS)


@dataclass
class CaseResult:
    status: str  # ok (timed), failed, skipped, unsupported
    error: str | None = None
    timing: dict[str, Any] | None = None
    fn: Any = None
    started: float = field(default_factory=time.time)


def variant_availability(variant: Any) -> tuple[bool, str]:
    """kernels' own decision (kernels.availability), made once per process."""
    from kernels.availability import availability

    return availability(variant)


class GroupMeasurer:
    """Session-scoped: device, timer, flusher, monitor and the per-group result cache."""

    def __init__(self, plan: RunPlan, journal: JournalWriter) -> None:
        import torch

        self.plan = plan
        self.journal = journal
        self.config = TimingConfig.from_dict(plan.timing)
        for module in plan.extra_variant_modules:
            import_module(module)
        if plan.device_kind == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("the plan asks for a CUDA run but this process sees no CUDA device")
            self.device = torch.device("cuda", torch.cuda.current_device())
            l2 = torch.cuda.get_device_properties(self.device).L2_cache_size
            self.flusher: Any = L2Flusher(self.device, int(self.config.flush_l2_multiple * l2))
            self.timer: Any = CudaEventTimer(self.config.block_calls)
        else:
            self.device = torch.device("cpu")
            # One intra-op thread: on a shared CI CPU a thread pool's scheduling stalls
            # (tens of ms) swamp a sub-millisecond call; one thread keeps cpu_wall honest.
            torch.set_num_threads(1)
            self.flusher = NoFlush()
            self.timer = CpuWallTimer()
        # Clocks and throttle reasons of the GPU these kernels run on, found by torch's UUID.
        self.monitor = open_monitor(plan.device_kind, self.device.index or 0, **self._identity())
        # Probe the machine (nvcc, CuPy, Triton) now, inside the start-up allowance, rather
        # than in the first case, whose hang limit is meant for the kernel.
        from kernels.availability import capabilities

        capabilities()
        self.families: dict[str, str] = {}
        self.build_failures: dict[str, str] = {}
        self._results: dict[str, CaseResult] = {}
        self._by_group: dict[str, list[PlannedCase]] = {}
        self._cases = {c.case_id: c for c in plan.cases}
        for case in plan.cases:
            self._by_group.setdefault(case.group, []).append(case)

    def _identity(self) -> dict[str, str]:
        if self.device.type != "cuda":
            return {}
        from ci.environment import torch_device_identity

        return torch_device_identity(self.device.index or 0)

    def case(self, case_id: str) -> PlannedCase:
        return self._cases[case_id]

    # -- journalling helpers -------------------------------------------------------------

    @contextmanager
    def phase(self, case_id: str, phase: str) -> Iterator[None]:
        """Journal the phase; a poisoning CUDA error is journalled as a crash and ends the child."""
        self.journal.write("begin", case=case_id, phase=phase)
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - classified below, re-raised unless fatal
            if is_poisoning(exc):
                self.crash(case_id, f"{phase}: {type(exc).__name__}: {exc}")
            raise

    def crash(self, case_id: str, error: str) -> None:
        self.journal.write("outcome", case=case_id, status="crashed", error=error)
        os._exit(CRASH_EXIT_CODE)

    def outcome(self, case: PlannedCase, status: str, error: str | None = None) -> None:
        started = self._results[case.case_id].started if case.case_id in self._results else time.time()
        self.journal.write("outcome", case=case.case_id, status=status, error=error, duration_s=time.time() - started)

    # -- builds ----------------------------------------------------------------------------

    def build_all(self) -> None:
        """Build every planned, available variant once; a failed build fails its cases."""
        from ci.records import build_record, failed_build
        from kernels import registry

        for name in dict.fromkeys(c.variant for c in self.plan.cases):
            try:
                variant = registry.get(name)
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
        from kernels import registry
        from kernels.cases import Case

        try:
            variant = registry.get(case.variant)
        except KeyError as exc:
            return None, CaseResult("skipped", f"variant not in this checkout's registry: {exc}")
        ok, reason = variant_availability(variant)
        if not ok:
            return None, CaseResult("skipped", reason or "unavailable")
        kcase = Case(case.variant, case.shape(), case.dtype, case.causal)
        reason = variant.unsupported(kcase)
        if reason:
            return None, CaseResult("unsupported", reason)
        if case.variant in self.build_failures:
            return None, CaseResult("failed", f"build failed: {self.build_failures[case.variant]}")
        return (variant, kcase), None

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
                    fn = self._prepare_rotation(variant, kcase, case)
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
        """How many input sets to rotate over: `input_sets` when they all fit the byte cap."""
        element = 4 if case.dtype == "fp32" else 2
        per_set = case.shape().min_bytes(element)  # Q, K, V and O once each
        sets = self.config.input_sets
        return sets if sets > 1 and sets * per_set <= self.config.input_sets_max_bytes else 1

    def _prepare_rotation(self, variant: Any, kcase: Any, case: PlannedCase) -> Any:
        """One callable over `input_set_count` prepared input sets (seeds timing_seed + j).

        Successive calls use successive sets, so the per-call samples (and the median) average
        over several independent allocations instead of inheriting one allocation's placement.
        """
        count = self.input_set_count(case)
        fns = [variant.prepare(kcase, self.device, self.plan.timing_seed + j).fn for j in range(count)]
        if count == 1:
            return fns[0]
        state = {"i": 0}

        def rotating() -> Any:
            i = state["i"]
            state["i"] = (i + 1) % count
            return fns[i]()

        return rotating

    def _time(self, subjects: list[Subject], cases: list[PlannedCase]) -> None:
        by_id = {c.case_id: c for c in cases}
        group = cases[0].group
        self.journal.write("begin", case=subjects[0].key, phase="timing", group=group)
        try:
            raws = measure_interleaved(
                subjects, self.config, self.timer, self.flusher, self.monitor,
                on_block=lambda key: self.journal.write("beat", case=key),
                is_fatal=is_poisoning,
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
            timing = case_timing(case, raw, f"{group}#{os.getpid()}")
            timings.append((timing, raw))
        apply_gaps([t for t, _ in timings], self.families)
        for timing, raw in timings:
            data = asdict(timing)
            self._results[timing.case_id].timing = data
            self.journal.write("measured", case=timing.case_id, timing=data, samples=raw.samples_us,
                               graph_note=raw.graph_note)

    def _check(self, case: PlannedCase, variant: Any, kcase: Any) -> None:
        """Correctness on fresh inputs per seed (kernels.correctness), journalled as the bundle's
        records (ci.records converts every field)."""
        from ci.records import correctness_record
        from kernels.correctness import check_case

        results = check_case(variant, kcase, self.device, list(self.plan.correctness_seeds))
        records = [asdict(correctness_record(case, r)) for r in results]
        self.journal.write("correctness", case=case.case_id, records=records)
