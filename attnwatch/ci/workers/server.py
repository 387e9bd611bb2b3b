"""A long-lived measuring worker: `python -m attnwatch.ci.workers.server --plan P --in-fd R --out-fd W`.

The compare's side of the engine (ci/engine/group.py). One worker per side lives for the whole
compare: it imports torch and the side's `kernels` once, builds every planned variant once and
fingerprints each (ci/fingerprint/variant.py; the parent selects what to measure from them)
(`ready`), then answers requests on its input channel (ci/workers/protocol.py) until told to
stop or its parent goes away:

* `{"op": "measure", "round": r, "cases": [ids], "sampling": {...}, "check": [ids] | null}`:
  `Engine.measure` of the cases as round r with the round's sampling overrides: fresh inputs,
  a new placement and stream pool, launch choices tuned again (ci/engine/rounds.py),
  correctness the first time a case is seen (only the `check` ones, when given); the engine's events (`begin`, `beat`, `correctness`, one `result` per case:
  ci/engine/events.py) go to the parent as they happen, then `done` with the seconds spent
  per stage so far.
* `{"op": "probe", "case": id, "stage": s}`: the isolated re-run of ci/attribution.py (of a
  compare side or of `attnwatch run`'s child): `Engine.probe`, answered `probe_result`.
* `{"op": "shutdown"}`.

A fault ends the worker with CRASH_EXIT_CODE (ci/engine/events.py) after the engine sent it;
the parent starts a fresh one.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from attnwatch.ci.engine.group import Engine
from attnwatch.ci.plan import RunPlan
from attnwatch.ci.workers.protocol import ChannelClosed, Reader, send


class Worker:
    """The engine of one side and the pipe its events leave by."""

    def __init__(self, plan: RunPlan, out_fd: int, failed_builds: dict[str, str]) -> None:
        self.out_fd = out_fd
        self.engine = Engine(plan, self.emit, failed_builds)

    def emit(self, kind: str, **fields: Any) -> None:
        send(self.out_fd, {"kind": kind, **fields})

    def measure(self, request: dict[str, Any]) -> None:
        cases = [self.engine.cases[case_id] for case_id in request["cases"]]
        check = request.get("check")  # None: every case the plan checks
        self.engine.measure(cases, int(request.get("round", 0)), request.get("sampling") or {}, check=check)
        self.emit("done", seconds=self.engine.seconds)

    def probe(self, request: dict[str, Any]) -> None:
        self.emit("probe_result", case=request["case"], **self.engine.probe(request["case"], request.get("stage")))


def serve(worker: Worker, in_fd: int) -> int:
    reader = Reader(in_fd)
    while True:
        try:
            message = reader.read()
        except ChannelClosed:
            return 0  # the parent is gone: nothing to answer
        op = message.get("op")
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
        builds = worker.engine.build_all()
        built = time.perf_counter()
        from attnwatch.ci.environment import capture_environment
        from attnwatch.ci.kernels_api import kernels_api, kernels_dir

        from attnwatch.ci.fingerprint.variant import plan_fingerprints

        environment = asdict(capture_environment(probe_device=worker.engine.plan.device_kind == "cuda"))
        before = time.perf_counter()
        fingerprints = plan_fingerprints(worker.engine.plan, builds, environment)  # ci/compare/select.py
        worker.emit(
            "ready",
            pid=os.getpid(),
            kernels_path=str(kernels_dir()),
            harness_api_version=kernels_api().HARNESS_API_VERSION,
            environment=environment,
            builds=builds,
            fingerprints=fingerprints,
            fingerprint_s=time.perf_counter() - before,
            startup_s=imported - started,
            build_s=built - imported,
            sent_at=time.time(),
        )
        return serve(worker, args.in_fd)
    except ChannelClosed:
        return 0


def exit_now(code: int) -> None:
    """End the process without the interpreter's teardown: every result has been sent, and
    unloading torch took the whole of the parent's grace (ci/workers/client.py CLOSE_GRACE_S; a
    CPU compare's parent sampled waiting 0.53 s there), after which the worker was killed anyway."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
