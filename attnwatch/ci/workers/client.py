"""The parent's handle on one worker process (ci/workers/server.py): start, ask, watch, stop.

The parent never touches CUDA. `WorkerProcess.start` writes the plan, opens two pipes, and
starts `python -m attnwatch.ci.workers.server` in a session of its own with the side's `kernels` first on
its PYTHONPATH (ci/child_env.py) and its output in a log file. Every message the worker sends
goes through `_track`, which remembers the case and stage in flight (and the case before it),
so that when the worker dies the parent can say which case it was working on.

`WorkerDied` is raised when the worker exits, closes its channel, breaks the protocol, or stays
silent past the limit of what it is doing (start-up, a build, a case); the process group is
killed first, so nothing it started survives it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NoReturn

from attnwatch.ci.attribution import ProbeResult
from attnwatch.ci.child_env import child_env
from attnwatch.ci.plan import RunPlan
from attnwatch.ci.run_config import case_timeout, configured
from attnwatch.ci.suite_state import describe_exit
from attnwatch.ci.workers.protocol import ChannelClosed, ProtocolError, Reader, send

LOG_TAIL_CHARS = 1500


class WorkerDied(Exception):
    """The worker is gone. `case`/`stage`: what it was doing; `error`: what it said, if anything."""

    def __init__(
        self,
        *,
        rc: int | None,
        timed_out: bool,
        case: str | None,
        stage: str | None,
        predecessor: str | None,
        error: str,
        build: str | None = None,
    ) -> None:
        self.rc, self.timed_out, self.case, self.stage = rc, timed_out, case, stage
        self.predecessor, self.error, self.build = predecessor, error, build
        super().__init__(error)


@dataclass
class WorkerSpec:
    """How to start a worker for one side (time limits not given: ci/run_config.toml, the case's by the plan's device kind)."""

    plan: RunPlan
    side: str
    checkout: Path | None  # the side's checkout (holding kernels/); None: this checkout
    work_dir: Path
    python: str = sys.executable
    extra_sys_path: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    failed_builds: dict[str, str] = field(default_factory=dict)
    startup_timeout_s: float = configured("startup_timeout_s")
    build_timeout_s: float = configured("build_timeout_s")
    case_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.case_timeout_s is None:
            self.case_timeout_s = case_timeout(self.plan.device_kind)


CLOSE_GRACE_S = 0.5  # a stopped worker's interpreter teardown before it is killed (its results are all sent)


def close_deadline() -> float:
    """When workers asked to stop now are killed if still running (WorkerProcess.close)."""
    return time.monotonic() + CLOSE_GRACE_S


class WorkerProcess:
    def __init__(self, spec: WorkerSpec, name: str) -> None:
        self.spec = spec
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.reader: Reader | None = None
        self._to_worker: int | None = None
        self.log_path = Path(spec.work_dir) / f"{name}.log"
        self.case: str | None = None
        self.stage: str | None = None
        self.predecessor: str | None = None
        self.build: str | None = None
        self.fault: dict[str, Any] | None = None
        self.ready: dict[str, Any] | None = None
        self.spawned_at = 0.0  # wall clock (time.time()), comparable with the worker's `sent_at`

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> "WorkerProcess":
        work = Path(self.spec.work_dir)
        work.mkdir(parents=True, exist_ok=True)
        plan_path = self.spec.plan.save(work / f"{self.name}-plan.json")
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        cmd = [
            self.spec.python,
            "-m",
            "attnwatch.ci.workers.server",
            "--plan",
            str(plan_path),
            "--in-fd",
            str(to_child_r),
            "--out-fd",
            str(from_child_w),
            "--side",
            self.spec.side,
            "--failed-builds",
            json.dumps(self.spec.failed_builds),
        ]
        env = child_env(
            work,
            self.spec.checkout,
            self.spec.extra_sys_path,
            {"ATTNWATCH_SIDE": self.spec.side, **self.spec.extra_env},
        )
        self.spawned_at = time.time()
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                cwd=str(work),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(to_child_r, from_child_w),
                start_new_session=True,
            )
        os.close(to_child_r)
        os.close(from_child_w)
        self._to_worker = to_child_w
        self.reader = Reader(from_child_r)
        return self

    def wait_ready(self, on_message: Callable[[dict], None] = lambda m: None) -> dict[str, Any]:
        """Follow start-up and builds until `ready`; returns it."""
        while self.ready is None:
            message = self._next(self._startup_limit())
            on_message(message)
            if message.get("kind") == "ready":
                self.ready = message
        return self.ready

    def request(
        self,
        message: dict[str, Any],
        on_message: Callable[[dict], None] = lambda m: None,
        final: tuple[str, ...] = ("done",),
    ) -> dict[str, Any]:
        """Send one request; pass every reply to `on_message` until a `final` kind arrives."""
        if self.ready is None:
            self.wait_ready()
        assert self._to_worker is not None and self.spec.case_timeout_s is not None  # started; __post_init__ set it
        try:
            send(self._to_worker, message)
        except ChannelClosed:
            self._died(timed_out=False)
        while True:
            reply = self._next(self.spec.case_timeout_s)
            on_message(reply)
            if reply.get("kind") in final:
                return reply

    def stop(self) -> None:
        """Ask the worker to stop (it has nothing to save: its results are all sent)."""
        if self.proc is not None and self.proc.poll() is None and self._to_worker is not None:
            try:
                send(self._to_worker, {"op": "shutdown"})
            except ChannelClosed:
                pass

    def close(self, deadline: float | None = None) -> None:
        """Ask the worker to stop; kill it if it has not by `deadline` (time.monotonic(); default
        CLOSE_GRACE_S from now) for its interpreter teardown. Workers stopped together share one
        deadline (close_deadline), so each does not add its own grace to the caller's wall time."""
        if self.proc is None:
            return
        self.stop()
        try:
            self.proc.wait(
                timeout=max(0.0, (deadline if deadline is not None else close_deadline()) - time.monotonic())
            )
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def kill(self) -> None:
        """SIGKILL the worker's process group and release the pipes."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()
        for fd in (self._to_worker, self.reader.fd if self.reader else None):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._to_worker = None
        self.reader = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.reader is not None

    # -- reading ---------------------------------------------------------------------------

    def _startup_limit(self) -> float:
        if self.build is not None:
            return self.spec.build_timeout_s
        return self.spec.startup_timeout_s

    def _next(self, silence_s: float) -> dict[str, Any]:
        assert self.reader is not None, "read from a worker that is not running"
        try:
            message = self.reader.read(timeout_s=silence_s)
        except (ChannelClosed, ProtocolError, OSError):
            self._died(timed_out=False)
        if message is None:
            self._died(timed_out=True)
        self._track(message)
        return message

    def _track(self, message: dict[str, Any]) -> None:
        kind = message.get("kind")
        if kind in ("begin", "beat"):
            if message.get("case") != self.case:
                self.predecessor = self.case if self.case is not None else self.predecessor
            self.case, self.stage = message.get("case"), message.get("stage", "timing")
        elif kind == "build_begin":
            self.build = message.get("variant")
        elif kind == "build":
            self.build = None
        elif kind == "fault":
            self.fault = message
        elif kind in ("result", "probe_result") and message.get("case") == self.case:
            self.predecessor, self.case, self.stage = self.case, None, None

    def _died(self, *, timed_out: bool) -> NoReturn:
        """Kill what is left of the worker and raise WorkerDied describing it."""
        if self.proc is not None and self.proc.poll() is None and not timed_out:
            try:
                self.proc.wait(timeout=5.0)  # it closed the channel: let it finish exiting
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        rc = self.proc.returncode if self.proc is not None else None
        if self.fault is not None:
            error = str(self.fault.get("error"))
        elif timed_out:
            limit = self.spec.case_timeout_s if self.ready else self._startup_limit()
            error = f"no sign of life for {limit:g} s during {self.stage or ('build' if self.build else 'start-up')}; the worker was killed"
        else:
            error = (
                f"the worker died ({describe_exit(rc)}) during {self.stage or ('build' if self.build else 'start-up')}"
            )
        tail = self.log_tail()
        if tail and not timed_out:
            error += f"; its log ends: {tail[-600:]}"
        case = self.fault.get("case") if self.fault and self.fault.get("case") else self.case
        stage = self.fault.get("stage") if self.fault and self.fault.get("stage") else self.stage
        raise WorkerDied(
            rc=rc,
            timed_out=timed_out,
            case=case,
            stage=stage,
            predecessor=self.predecessor,
            error=error,
            build=self.build or (self.fault or {}).get("variant"),
        )

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:].strip()
        except OSError:
            return ""


def probe_case(spec: WorkerSpec, case_id: str, stage: str, name: str) -> ProbeResult:
    """Run one case alone in a fresh worker with CUDA_LAUNCH_BLOCKING=1 (ci/attribution.py).

    A Python error of the case (status failed) is not a crash: the case ran alone without
    poisoning anything. Only the worker dying (or going silent) with the case in flight is; a
    worker that dies before reaching the case says nothing about it (inconclusive).
    """
    started = time.monotonic()
    probe_spec = WorkerSpec(**{**spec.__dict__, "extra_env": {**spec.extra_env, "CUDA_LAUNCH_BLOCKING": "1"}})
    worker = WorkerProcess(probe_spec, name).start()
    try:
        worker.request({"op": "probe", "case": case_id, "stage": stage}, final=("probe_result",))
        return ProbeResult(False, seconds=time.monotonic() - started)
    except WorkerDied as died:
        if died.case != case_id:
            return ProbeResult(
                False,
                seconds=time.monotonic() - started,
                inconclusive=f"the re-run died before reaching the case: {died.error}",
            )
        return ProbeResult(True, died.error, time.monotonic() - started)
    finally:
        worker.close()
