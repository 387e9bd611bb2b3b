"""A long-lived measuring worker: `python -m ci.workers.server --plan P --in-fd R --out-fd W`.

One worker per side of a compare lives for the whole compare: it imports torch and the side's
`kernels` once, builds every planned variant once (`ready`), then answers requests on its
input channel (ci/workers/protocol.py) until told to stop or its parent goes away:

* `{"op": "measure", "round": r, "cases": [ids], "sampling": {...}}`: for each interleave
  group among the cases: correctness the first time a case is seen, then fresh inputs for this
  round (seed timing_seed + SEED_STRIDE*r; the previous round's tensors freed and the device's
  cached blocks and the L2-flush buffer released first, so each round draws a new allocation
  placement for both, and a new pool of timing streams, whose launch-cost offsets the
  round-level interval then sees: ci/compare/measure.py), warm-up,
  and interleaved timing with the round's sampling overrides. One `result` message per case (samples, the
  CaseTiming, the correctness records checked this round), then `done`.
* `{"op": "probe", "case": id, "stage": s}`: the isolated re-run of ci/attribution.py: the
  case alone through every stage up to `s`, the device synchronized after each; `probe_result`.
* `{"op": "shutdown"}`.

While working it sends `begin` (case, stage) and `beat` (case, one per timed block), so the
parent knows the case in flight and whether the worker is alive. Compilation happens once per
process (kernels cache it); inputs are new each round. Launch configurations come from the
recorded table where it has the problem (kernels/triton/choices.toml: both sides alike), and
are tuned again each round where it does not (`forget_tuned_choices`).

A CUDA error that poisons the context is sent as `fault` (case, stage, error) and the worker
exits at once with CRASH_EXIT_CODE; the parent starts a fresh one. A Python error of a variant
costs its case this round only (`result` with status `failed`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from contextlib import contextmanager
from dataclasses import asdict
from importlib import import_module
from pathlib import Path
from typing import Any, Iterator

from attnwatch.ci.kernels_api import kernels_api, kernels_dir
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
from attnwatch.ci.workers.protocol import ChannelClosed, Reader, send

CRASH_EXIT_CODE = 70
SEED_STRIDE = 1000  # round r's inputs use seeds timing_seed + 1000*r + j: never another round's
SPACER_STEPS = 64  # before each group's inputs, a spacer of 0..63 x 256 KiB shifts their placement
SPACER_STEP_BYTES = 256 * 1024
STAGES = ("correctness", "prepare", "warmup", "timing", "graph", "host_timing")


class Worker:
    """The warm state of one side: plan, device, timer, flusher, setup, and what it has seen."""

    def __init__(self, plan: RunPlan, out_fd: int, failed_builds: dict[str, str]) -> None:
        self.plan = plan
        self.out_fd = out_fd
        self.config = TimingConfig.from_dict(plan.timing)
        for module in plan.extra_variant_modules:
            import_module(module)
        self.device, self.flusher, self.timer = open_device(plan, self.config)
        self.setup = CaseSetup(plan, self.device, self.config)
        self.setup.build_failures.update(failed_builds)
        self.monitor = device_monitor(plan, self.device)
        kernels_api().capabilities()
        self.cases = {c.case_id: c for c in plan.cases}
        self.checked: set[str] = set()
        self.seconds = {stage: 0.0 for stage in STAGES}

    def emit(self, kind: str, **fields: Any) -> None:
        send(self.out_fd, {"kind": kind, **fields})

    @contextmanager
    def stage(self, case_id: str, stage: str) -> Iterator[None]:
        """Announce the stage; synchronize at its end; a poisoning error ends the process."""
        self.emit("begin", case=case_id, stage=stage)
        started = time.perf_counter()
        try:
            yield
            self.setup.device_sync()
        except Exception as exc:  # noqa: BLE001 - classified: fatal ends the process, else re-raised
            if is_poisoning(exc):
                self.fault(case_id, stage, exc)
            raise
        finally:
            self.seconds[stage] += time.perf_counter() - started

    def fault(self, case_id: str, stage: str, exc: BaseException) -> None:
        try:
            self.emit("fault", case=case_id, stage=stage, error=f"{stage}: {type(exc).__name__}: {exc}")
        finally:
            os._exit(CRASH_EXIT_CODE)

    # -- builds ----------------------------------------------------------------------------

    def build_all(self) -> list[dict[str, Any]]:
        """Build every planned, available variant once (ci.records' build records); a failed
        build fails its cases."""
        from attnwatch.ci.records import build_record, failed_build

        records = []
        for name in dict.fromkeys(c.variant for c in self.plan.cases):
            try:
                variant = kernels_api().get(name)
            except KeyError:
                continue  # reported per case
            self.setup.families[name] = variant.family
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
                    self.emit("fault", case=None, stage="build", variant=name, error=str(exc))
                    os._exit(CRASH_EXIT_CODE)
                record = failed_build(name, f"{type(exc).__name__}: {exc}", time.perf_counter() - started)
            records.append(asdict(record))
            self.emit("build", record=records[-1], wall_s=time.perf_counter() - started)
            if not record.ok:
                self.setup.build_failures[name] = record.error or "build failed"
        return records

    # -- measuring -----------------------------------------------------------------------

    def _spacer(self, round_index: int, group: str) -> Any:
        """Release cached device blocks and the flush buffer, hold a pseudo-random spacer and
        allocate the flush buffer after it (CUDA only): the group's inputs and the buffer every
        timed call starts from both get a new placement this round."""
        if self.plan.device_kind != "cuda":
            return None
        import torch

        self.flusher.release()
        torch.cuda.empty_cache()
        steps = random.Random(f"{self.plan.timing_seed}/{round_index}/{group}").randrange(SPACER_STEPS)
        spacer = torch.empty(steps * SPACER_STEP_BYTES, dtype=torch.uint8, device=self.device) if steps else None
        self.flusher.allocate()
        return spacer

    def _ready_case(self, case: PlannedCase, seed: int, config: TimingConfig, correctness: list) -> Any:
        """Resolve, check (once), prepare and warm up; the callable, or a result message's fields."""
        resolved, early = self.setup.resolve(case)
        if early is not None:
            return {"status": early[0], "error": early[1]}
        variant, kcase = resolved
        try:
            if self.plan.correctness and case.case_id not in self.checked:
                with self.stage(case.case_id, "correctness"):
                    correctness.extend(self.setup.check(case, variant, kcase))
                self.checked.add(case.case_id)
            with self.stage(case.case_id, "prepare"):
                fn = self.setup.prepare_rotation(variant, kcase, case, seed)
            with self.stage(case.case_id, "warmup"):
                warm_up(fn, config, self.timer, self.flusher)
        except Exception as exc:  # noqa: BLE001 - the variant's error costs its case this round
            return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        return fn

    def measure(self, request: dict[str, Any]) -> None:
        round_index = int(request.get("round", 0))
        forget_tuned_choices()
        self.timer.renew_streams()  # a new stream pool per round: its leftover offset varies by round
        config = self.config.with_overrides(**(request.get("sampling") or {}))
        seed = self.plan.timing_seed + SEED_STRIDE * round_index
        groups: dict[str, list[PlannedCase]] = {}
        for case_id in request["cases"]:
            case = self.cases[case_id]
            groups.setdefault(case.group, []).append(case)
        warm_config = config
        for group, cases in groups.items():
            spacer = self._spacer(round_index, group)
            subjects = []
            for case in cases:
                correctness: list = []
                ready = self._ready_case(case, seed, warm_config, correctness)
                warm_config = config.with_overrides(warmup_min_s=0.0)  # clocks are up after the first
                if isinstance(ready, dict):
                    self.emit("result", case=case.case_id, correctness=correctness or None, **ready)
                    continue
                subjects.append((Subject(case.case_id, ready), correctness))
            if subjects:
                self._time(group, subjects, config, round_index)
            del subjects, spacer
        self.emit("done", seconds=self.seconds)

    def _time(self, group: str, subjects: list, config: TimingConfig, round_index: int) -> None:
        keys = [s.key for s, _ in subjects]
        self.emit("begin", case=keys[0], stage="timing")
        started = time.perf_counter()
        try:
            raws = measure_interleaved(
                [s for s, _ in subjects], config, self.timer, self.flusher, self.monitor,
                on_block=lambda key: self.emit("beat", case=key, stage="timing"),
                is_fatal=is_poisoning, after_block=self.setup.device_sync)
        except SubjectFailed as failed:
            self.fault(failed.key, "timing", failed.exc)
            raise  # unreachable: fault() exits
        finally:
            self.seconds["timing"] += time.perf_counter() - started
        timings = []
        for key in keys:
            raw = raws[key]
            if not raw.error and raw.samples_us:
                timings.append(case_timing(self.cases[key], raw, f"{group}#round{round_index}",
                                           self.setup.kernel_configs.get(key, (None, None))))
        apply_gaps(timings, self.setup.families, self.plan.reference)
        by_case = {t.case_id: t for t in timings}
        for subject, correctness in subjects:
            raw = raws[subject.key]
            timing = by_case.get(subject.key)
            fields: dict[str, Any] = {"status": "ok", "samples_us": raw.samples_us}
            if raw.error or not raw.samples_us:
                fields = {"status": "failed", "error": raw.error or "no samples"}
            # The whole CaseTiming goes to the parent: the round's bundle stores it (ci/compare/bundles.py).
            self.emit("result", case=subject.key, correctness=correctness or None,
                      gap_to_sdpa=timing.gap_to_sdpa if timing else None, timing=asdict(timing) if timing else None,
                      converged=raw.converged, throttled_samples=raw.throttled_samples, **fields)

    # -- the isolated re-run ---------------------------------------------------------------

    def probe(self, request: dict[str, Any]) -> None:
        """The case alone through every stage up to the one it crashed in (ci/attribution.py)."""
        case = self.cases[request["case"]]
        last = request.get("stage") if request.get("stage") in STAGES else "timing"
        wanted = STAGES[:STAGES.index(last) + 1]
        config = self.config.with_overrides(min_samples=3 * self.config.block_calls,
                                            max_samples=3 * self.config.block_calls, time_cap_s=1.0)
        correctness: list = []
        ready = self._ready_case(case, self.plan.timing_seed, config, correctness)
        if isinstance(ready, dict):
            self.emit("probe_result", case=case.case_id, **ready)
            return
        error = None
        try:
            with self.stage(case.case_id, "timing"):
                raw = measure_interleaved([Subject(case.case_id, ready)], config, self.timer, self.flusher,
                                          self.monitor, is_fatal=is_poisoning,
                                          after_block=self.setup.device_sync)[case.case_id]
                error = raw.error
            if "graph" in wanted and self.plan.device_kind == "cuda":
                from attnwatch.ci.timing.graphs import graph_replay_us

                with self.stage(case.case_id, "graph"):
                    graph_replay_us(ready, self.flusher, self.config.graph_calls, self.config.graph_replays)
            if "host_timing" in wanted:
                with self.stage(case.case_id, "host_timing"):
                    for _ in range(3):
                        self.flusher.flush()
                        ready()
                        self.setup.device_sync()
        except SubjectFailed as failed:
            self.fault(case.case_id, "timing", failed.exc)
        except Exception as exc:  # noqa: BLE001 - a Python error alone is not a crash
            error = f"{type(exc).__name__}: {exc}"
        self.emit("probe_result", case=case.case_id, status="ok" if error is None else "failed", error=error)


def forget_tuned_choices() -> None:
    """Make the side's kernels decide their launch choices again for this round.

    A recorded choice (kernels/triton/choices.toml) comes back the same on both sides. A choice
    an autotuner makes in the process (a problem the table lacks) would otherwise be fixed for
    the whole compare on each side, so a near-tie that flips between the two workers reads as a
    difference between the revisions (kernels/triton/tuner.py, `forget_choices`), asked through
    the side's harness API (ci/kernels_api.py)."""
    kernels_api().forget_tuned_choices()


def serve(worker: Worker, in_fd: int) -> int:
    reader = Reader(in_fd)
    while True:
        try:
            message = reader.read()
        except ChannelClosed:
            return 0  # the parent is gone: nothing to answer
        op = message.get("op") if message else None
        if op == "measure":
            worker.measure(message)
        elif op == "probe":
            worker.probe(message)
        elif op == "shutdown":
            return 0
        else:
            worker.emit("error", error=f"unknown op {op!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="attnwatch compare worker (started by ci.workers.client)")
    p.add_argument("--plan", required=True, type=Path)
    p.add_argument("--in-fd", required=True, type=int)
    p.add_argument("--out-fd", required=True, type=int)
    p.add_argument("--side", default="", help="which side this worker measures (for its log)")
    p.add_argument("--failed-builds", default="{}", help="JSON {variant: error}: builds not to try again")
    args = p.parse_args(argv)
    started = time.perf_counter()
    try:
        send(args.out_fd, {"kind": "hello", "pid": os.getpid(), "side": args.side})
        worker = Worker(RunPlan.load(args.plan), args.out_fd, json.loads(args.failed_builds))
        imported = time.perf_counter()
        builds = worker.build_all()
        built = time.perf_counter()
        from attnwatch.ci.environment import capture_environment

        environment = asdict(capture_environment(probe_device=worker.plan.device_kind == "cuda"))
        worker.emit("ready", pid=os.getpid(), kernels_path=str(kernels_dir()),
                    harness_api_version=kernels_api().HARNESS_API_VERSION, environment=environment, builds=builds,
                    startup_s=imported - started, build_s=built - imported, sent_at=time.time())
        return serve(worker, args.in_fd)
    except ChannelClosed:
        return 0


if __name__ == "__main__":
    sys.exit(main())
