"""One side of a compare (base or head): its warm worker, restarted when it dies.

`Side.measure(cases, round)` asks the side's worker (ci/workers) to time the cases now and
returns one `CaseRound` per case. The worker is started once and kept for the whole compare.
When it dies (ci/workers/client.WorkerDied):

* the cases it already reported keep their results;
* the case in flight is judged by ci/attribution.py: re-run alone in a fresh process; a case
  that crashes alone is recorded `crashed` (attributed); one that does not is measured again
  once (its one retry) and the crash is noted as of unknown origin; a hang is `timeout`;
* a fresh worker is started and asked for the cases not yet reported.

A case recorded `crashed` or `timeout` is final for the side: later rounds return the same
record without asking a worker (a side with a lost round is not compared: ci/compare/analysis).
A worker that dies while building variant V is restarted with V's build marked failed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from attnwatch.ci.attribution import Crash, CrashAttribution
from attnwatch.ci.compare.rounds import CaseRound
from attnwatch.ci.engine.events import by_variant
from attnwatch.ci.plan import PlannedCase, RunPlan
from attnwatch.ci.run_config import configured
from attnwatch.ci.workers.client import WorkerDied, WorkerProcess, WorkerSpec, probe_case


@dataclass
class SideTimes:
    """Where a side's wall time went (seconds), for the compare's cost breakdown."""

    startup_s: float = 0.0  # process start + imports, every worker started (ready - spawn - builds)
    build_s: float = 0.0
    build_by_variant: dict[str, float] = field(default_factory=dict)  # build_s by variant: which compile it went to
    fingerprint_s: float = 0.0  # the worker's fingerprints of its variants (ci/fingerprint), after its builds
    correctness_s: float = 0.0
    prepare_s: float = 0.0  # memory placement, inputs and warm-up, every round
    placement_s: float = 0.0  # the placement part of prepare_s (each group's spacer and flush buffer)
    warmup_s: float = 0.0  # the warm-up part of prepare_s
    warmup_by_variant: dict[str, float] = field(default_factory=dict)  # warmup_s by variant
    timing_s: float = 0.0  # interleaved timing, every round
    requests_s: float = 0.0  # wall time of the measure requests (all of the above but start-up/builds)
    probe_s: float = 0.0  # isolated re-runs after crashes
    workers_started: int = 0


@dataclass
class Side:
    name: str
    spec: WorkerSpec
    commit_sha: str = ""
    max_restarts: int = configured("max_child_restarts")
    log: Callable[[str], None] = print
    attribution: CrashAttribution = field(default_factory=CrashAttribution)
    final: dict[str, CaseRound] = field(default_factory=dict)
    times: SideTimes = field(default_factory=SideTimes)
    environment: dict = field(default_factory=dict)
    kernels_path: str = ""
    harness_api_version: int | None = None  # of the side's kernels, as its worker loaded them (ci/kernels_api.py)
    builds: list[dict] = field(default_factory=list)
    fingerprints: dict[str, dict] = field(
        default_factory=dict
    )  # variant -> its fingerprint, as the first worker made it
    restarts: int = 0
    # The case ids its worker checks for correctness (ci/compare/select.head_checks); None: every case.
    checks: set[str] | None = None
    _worker: WorkerProcess | None = None
    _counted: WorkerProcess | None = None
    _idle_deaths: int = 0
    _banked: dict = field(default_factory=dict)
    _current: dict = field(default_factory=dict)

    # -- the worker --------------------------------------------------------------------------

    def start(self) -> WorkerProcess:
        """Start a worker without waiting for it (both sides start in parallel); returns it."""
        if self._worker is None:
            self._worker = WorkerProcess(self.spec, f"{self.name}-{self.times.workers_started}").start()
            self.times.workers_started += 1
        return self._worker

    def ready(self) -> None:
        """Wait until the worker has started and built (a side that cannot start fails its
        cases when first asked, in `measure`)."""
        try:
            self._ready_worker()
        except WorkerDied:
            pass

    def _ready_worker(self) -> WorkerProcess:
        """The worker, started and built; a worker dying during a build fails that build."""
        while True:
            worker = self.start()
            try:
                ready = worker.wait_ready(self._count_build)
            except WorkerDied as died:
                self._worker = None
                self._count_restart(f"start-up: {died.error}")
                variant = died.build
                if variant is None:
                    raise
                self.spec.failed_builds[variant] = f"build crashed: {died.error}"[:1000]
                continue
            if not self.kernels_path:
                self.environment, self.kernels_path = ready.get("environment") or {}, ready.get("kernels_path", "")
                self.harness_api_version = ready.get("harness_api_version")
                self.builds = list(ready.get("builds") or [])
                self.fingerprints = dict(ready.get("fingerprints") or {})
            if worker is not self._counted:  # each worker's start-up is counted once
                build, prints = float(ready.get("build_s") or 0.0), float(ready.get("fingerprint_s") or 0.0)
                self.times.build_s += build
                self.times.fingerprint_s += prints
                self.times.startup_s += max(
                    0.0, float(ready.get("sent_at") or 0.0) - worker.spawned_at - build - prints
                )
                self._counted = worker
            return worker

    def _count_build(self, message: dict) -> None:
        """A worker's `build` event (ci/engine/group.py build_all): its wall seconds, by variant."""
        if message.get("kind") != "build":
            return
        variant = (message.get("record") or {}).get("variant")
        if variant:
            spent = float(message.get("wall_s") or 0.0)
            self.times.build_by_variant[variant] = self.times.build_by_variant.get(variant, 0.0) + spent

    def _count_restart(self, why: str) -> None:
        self.restarts += 1
        self.log(f"compare: {self.name} worker restarted ({why[:200]})")
        if self.restarts > self.max_restarts:
            raise WorkerDied(
                rc=None,
                timed_out=False,
                case=None,
                stage=None,
                predecessor=None,
                error=f"gave up after {self.max_restarts} worker restarts; last: {why[:500]}",
            )

    def stop(self) -> None:
        """Ask the worker to stop without waiting (close() then waits, so sides stop in parallel)."""
        if self._worker is not None:
            self._worker.stop()

    def close(self, deadline: float | None = None) -> None:
        """Stop the worker, killing it at `deadline` (ci/workers/client.WorkerProcess.close)."""
        if self._worker is not None:
            self._worker.close(deadline)
            self._worker = None

    # -- measuring ---------------------------------------------------------------------------

    def measure(self, cases: list[PlannedCase], round_index: int, sampling: dict) -> dict[str, CaseRound]:
        """One CaseRound per case: measured now, or the side's final record for a lost case."""
        out = {c.case_id: self.final[c.case_id] for c in cases if c.case_id in self.final}
        pending = [c for c in cases if c.case_id not in out]
        by_id = {c.case_id: c for c in cases}
        while pending:
            try:
                worker = self._ready_worker()
            except WorkerDied as died:  # no worker starts at all: every pending case is lost
                for case in pending:
                    out[case.case_id] = self._lost(
                        case, "failed", f"the {self.name} worker could not start: {died.error}"
                    )
                break

            checks: dict[str, list] = {}  # a case's correctness records arrive before its result

            def on_message(message: dict) -> None:
                if message.get("kind") == "correctness" and message.get("case") in by_id:
                    checks[message["case"]] = list(message.get("records") or [])
                elif message.get("kind") == "result" and message.get("case") in by_id:
                    out[message["case"]] = self._case_round(
                        by_id[message["case"]], message, checks.pop(message["case"], [])
                    )
                elif message.get("kind") == "done":
                    self._stage_seconds(message.get("seconds") or {})

            started = time.monotonic()
            try:
                worker.request(
                    {
                        "op": "measure",
                        "round": round_index,
                        "cases": [c.case_id for c in pending],
                        "sampling": sampling,
                        "check": None if self.checks is None else sorted(self.checks),
                    },
                    on_message,
                )
            except WorkerDied as died:
                self._worker = None
                self._banked = self._current  # a dead worker's stage seconds stay counted
                give_up = self._after_death(died, by_id, out, round_index)
                try:
                    self._count_restart(died.error)
                except WorkerDied as gave_up:
                    give_up = gave_up.error
                if give_up:
                    for case in pending:
                        if case.case_id not in out:
                            out[case.case_id] = self._lost(case, "failed", give_up)
            finally:
                self.times.requests_s += time.monotonic() - started
            pending = [c for c in pending if c.case_id not in out]
        return out

    def _stage_seconds(self, seconds: dict) -> None:
        """A worker reports its cumulative stage seconds with every `done`; add dead workers' too."""
        self._current = {k: self._banked.get(k, 0.0) + float(seconds.get(k, 0.0)) for k in {*self._banked, *seconds}}
        get = lambda *keys: sum(self._current.get(k, 0.0) for k in keys)  # noqa: E731
        self.times.correctness_s = get("correctness")
        self.times.prepare_s = get("placement", "prepare", "warmup")
        self.times.placement_s = get("placement")
        self.times.warmup_s = get("warmup")
        self.times.warmup_by_variant = by_variant(self._current, "warmup")
        self.times.timing_s = get("timing")

    def _after_death(self, died: WorkerDied, by_id: dict[str, PlannedCase], out: dict, round_index: int) -> str | None:
        """Judge the case in flight; a reason to give up on the request when no case was."""
        case_id = died.case if died.case in by_id and died.case not in out else None
        if case_id is None:
            self._idle_deaths += 1
            if self._idle_deaths >= 2:  # not a case's doing, and not passing: stop paying for restarts
                return f"the {self.name} worker died twice with no case in flight; last: {died.error}"
            self.log(f"compare: {self.name} worker died between cases ({died.error[:200]}); asking a fresh one")
            return None
        self._idle_deaths = 0
        if died.timed_out:
            out[case_id] = self._lost(by_id[case_id], "timeout", died.error)
            return None
        crash = Crash(
            case_id,
            died.stage or "unknown",
            died.error,
            died.predecessor,
            f"{self.name} worker, round {round_index + 1}",
        )
        decision = self.attribution.decide(crash, self._probe)
        if decision.note:
            self.log(f"compare: {decision.note}")
        if not decision.retry:
            out[case_id] = self._lost(by_id[case_id], decision.status or "crashed", decision.error or died.error)
        return None

    def _probe(self, case_id: str, stage: str):
        """The isolated re-run: a fresh worker whose plan holds this case only (one build)."""
        spec = replace(
            self.spec, plan=self.spec.plan.with_cases([c for c in self.spec.plan.cases if c.case_id == case_id])
        )
        result = probe_case(spec, case_id, stage, f"{self.name}-probe-{self.attribution.probes}")
        self.times.probe_s += result.seconds
        return result

    def _lost(self, case: PlannedCase, status: str, error: str) -> CaseRound:
        record = CaseRound(
            case.case_id,
            case.variant,
            case.shape_id,
            case.dtype,
            case.causal,
            status,
            error=error[:2000],
            operator=case.operator,
        )
        self.final[case.case_id] = record
        return record

    @staticmethod
    def _case_round(case: PlannedCase, message: dict, records: list) -> CaseRound:
        """The round's record of a case from its `result` and the `correctness` records checked
        in this round (ci/engine/events.py)."""
        correct = all(bool(r.get("passed")) for r in records) if records else None
        worst = lambda key: max((float(r[key]) for r in records if isinstance(r.get(key), (int, float))), default=None)  # noqa: E731
        failing = next((r.get("error") for r in records if not r.get("passed") and r.get("error")), None)
        return CaseRound(
            case.case_id,
            case.variant,
            case.shape_id,
            case.dtype,
            case.causal,
            str(message.get("status", "failed")),
            samples_us=[float(v) for v in message.get("samples_us") or []],
            gap_to_baseline=(message.get("timing") or {}).get("gap_to_baseline"),
            baseline_variant=(message.get("timing") or {}).get("baseline_variant"),
            correct=correct,
            max_abs_err=worst("max_abs_err"),
            rel_err=worst("rel_err"),
            error=message.get("error") or failing,
            timing=message.get("timing"),
            checks=[r for r in records if isinstance(r, dict)],
            operator=case.operator,
        )


def side_spec(
    plan: RunPlan,
    name: str,
    checkout: Path | None,
    work_dir: Path,
    *,
    extra_sys_path: list[str],
    extra_env: dict[str, str],
    startup_timeout_s: float,
    build_timeout_s: float,
    case_timeout_s: float | None,
    python: str,
) -> WorkerSpec:
    return WorkerSpec(
        plan=plan,
        side=name,
        checkout=checkout,
        work_dir=work_dir / name,
        python=python,
        extra_sys_path=list(extra_sys_path),
        extra_env=dict(extra_env),
        startup_timeout_s=startup_timeout_s,
        build_timeout_s=build_timeout_s,
        case_timeout_s=case_timeout_s,
    )
