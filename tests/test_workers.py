"""The long-lived compare worker (ci/workers): its wire format, and real workers on this CPU
answering several requests from one warm process, failing one case at a time, and dying in a
way the parent can attribute (fault, abort, silence)."""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import pytest

from attnwatch.ci.plan import RunPlan, plan_cases
from attnwatch.ci.run_config import timing_config
from attnwatch.ci.workers.client import WorkerDied, WorkerProcess, WorkerSpec
from attnwatch.ci.workers.protocol import (
    MAX_MESSAGE_BYTES,
    ChannelClosed,
    ProtocolError,
    Reader,
    encode,
    send,
)
from attnwatch.kernels.shapes import SHAPES

FAULTS = str(Path(__file__).resolve().parent / "fault_variants")
REPO_ROOT = Path(__file__).resolve().parent.parent


# -- the wire format ----------------------------------------------------------------------------


def test_messages_round_trip_through_partial_writes():
    r, w = os.pipe()
    try:
        data = encode({"kind": "result", "samples_us": [1.5, 2.5]}) + encode({"kind": "done"})
        reader = Reader(r)
        os.write(w, data[:3])  # not even a whole header
        assert reader.read(timeout_s=0.05) is None
        os.write(w, data[3:10])
        assert reader.read(timeout_s=0.05) is None  # header complete, body not
        os.write(w, data[10:])
        assert reader.read(timeout_s=1) == {"kind": "result", "samples_us": [1.5, 2.5]}
        assert reader.read(timeout_s=1) == {"kind": "done"}
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize(
    "raw, message",
    [
        (struct.pack(">I", MAX_MESSAGE_BYTES + 1), "exceeds"),
        (struct.pack(">I", 3) + b"[1]", "not an object"),
        (struct.pack(">I", 2) + b"\xff\xfe", "not UTF-8 JSON"),
    ],
)
def test_broken_messages_are_protocol_errors(raw, message):
    r, w = os.pipe()
    try:
        os.write(w, raw)
        with pytest.raises(ProtocolError, match=message):
            Reader(r).read(timeout_s=1)
    finally:
        os.close(r)
        os.close(w)


def test_end_of_file_and_a_closed_reader():
    r, w = os.pipe()
    os.close(w)
    with pytest.raises(ChannelClosed):
        Reader(r).read(timeout_s=1)
    os.close(r)
    r, w = os.pipe()
    os.close(r)
    with pytest.raises(ChannelClosed):
        send(w, {"kind": "x"})
    os.close(w)


# -- real workers on this CPU -------------------------------------------------------------------


def _spec(tmp_path, variants, *, checkout=None, case_timeout_s=60.0, causal=(False,)) -> WorkerSpec:
    cases = plan_cases(variants, [SHAPES["cpu_tiny"]], ["fp16"], list(causal))
    timing = timing_config("cpu").with_overrides(min_samples=6, max_samples=12, time_cap_s=0.2)
    plan = RunPlan(
        cases=cases,
        timing=timing.to_dict(),
        device_kind="cpu",
        correctness=True,
        correctness_seeds=[0],
        extra_variant_modules=["attnwatch_fault_variants"],
    )
    return WorkerSpec(
        plan=plan,
        side="head",
        checkout=checkout,
        work_dir=tmp_path / "work",
        extra_sys_path=[FAULTS],
        startup_timeout_s=120.0,
        case_timeout_s=case_timeout_s,
    )


def _results(worker: WorkerProcess, cases: list[str], round_index: int) -> dict[str, dict]:
    """Each case's `result`, with the `correctness` records sent before it (None: not checked)."""
    seen: dict[str, dict] = {}
    checks: dict[str, list] = {}

    def on_message(m: dict) -> None:
        if m.get("kind") == "correctness":
            checks[m["case"]] = m["records"]
        elif m.get("kind") == "result":
            seen[m["case"]] = {**m, "correctness": checks.pop(m["case"], None)}

    done = worker.request({"op": "measure", "round": round_index, "cases": cases}, on_message)
    assert done["kind"] == "done"
    return seen


def test_one_warm_worker_answers_several_rounds(tmp_path):
    """Built and checked once, then timed on request: same process, correctness only the first
    time a case is seen, fresh samples every round."""
    spec = _spec(tmp_path, ["sdpa", "t_ok"], causal=(False, True))
    ids = [c.case_id for c in spec.plan.cases]
    worker = WorkerProcess(spec, "w").start()
    try:
        ready = worker.wait_ready()
        assert ready["kernels_path"] == str((REPO_ROOT / "kernels").resolve())
        first = _results(worker, ids, 0)
        second = _results(worker, ids[:2], 1)  # a later round may ask for fewer cases
        assert worker.alive and worker.proc.pid == ready["pid"]
    finally:
        worker.close()
    assert set(first) == set(ids) and set(second) == set(ids[:2])
    assert all(r["status"] == "ok" and len(r["samples_us"]) >= 6 for r in (*first.values(), *second.values()))
    assert all(r["correctness"] and r["correctness"][0]["passed"] for r in first.values())
    assert all(r["correctness"] is None for r in second.values())
    assert first["t_ok/cpu_tiny/fp16/noncausal"]["timing"]["gap_to_baseline"] > 0
    assert first[ids[0]]["timing"]["interleave_group"] == f"cpu_tiny/fp16/noncausal#{ready['pid']}.0"
    assert second[ids[0]]["timing"]["interleave_group"] == f"cpu_tiny/fp16/noncausal#{ready['pid']}.1"
    assert first["sdpa/cpu_tiny/fp16/noncausal"]["samples_us"] != second["sdpa/cpu_tiny/fp16/noncausal"]["samples_us"]


def test_worker_imports_the_kernels_of_its_side(tmp_path):
    """Each side runs its own revision's kernels: a worker for another checkout imports them."""
    other = tmp_path / "base"
    shutil.copytree(REPO_ROOT / "kernels", other / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    worker = WorkerProcess(_spec(tmp_path, ["sdpa"], checkout=other), "w").start()
    try:
        assert worker.wait_ready()["kernels_path"] == str((other / "kernels").resolve())
    finally:
        worker.close()


def test_a_python_error_costs_its_case_and_the_worker_lives_on(tmp_path):
    spec = _spec(tmp_path, ["t_ok", "t_raise", "t_raise_timed"])
    ids = [c.case_id for c in spec.plan.cases]
    worker = WorkerProcess(spec, "w").start()
    try:
        results = _results(worker, ids, 0)
        again = _results(worker, ids[:1], 1)
    finally:
        worker.close()
    status = {cid.split("/")[0]: (r["status"], r.get("error") or "") for cid, r in results.items()}
    assert status["t_ok"][0] == "ok"
    assert status["t_raise"][0] == "failed" and "refuses to prepare" in status["t_raise"][1]
    assert status["t_raise_timed"][0] == "failed" and "failed on call 4" in status["t_raise_timed"][1]
    assert again[ids[0]]["status"] == "ok"


@pytest.mark.parametrize(
    "variant, stage, error",
    [
        ("t_poison", "warmup", "illegal memory access"),
        ("t_abort_timed", "timing", "signal SIGABRT"),
        ("t_async_fault", "timing", "asynchronous, reported at the next synchronization"),
    ],
)
def test_a_dying_worker_names_the_case_and_stage(tmp_path, variant, stage, error):
    spec = _spec(tmp_path, ["t_ok", variant])
    ids = [c.case_id for c in spec.plan.cases]
    worker = WorkerProcess(spec, "w").start()
    reported: dict[str, dict] = {}
    with pytest.raises(WorkerDied) as died:
        worker.request(
            {"op": "measure", "round": 0, "cases": ids},
            lambda m: reported.__setitem__(m["case"], m) if m.get("kind") == "result" else None,
        )
    assert died.value.case == f"{variant}/cpu_tiny/fp16/noncausal" and died.value.stage == stage
    assert error in died.value.error and not died.value.timed_out
    assert died.value.predecessor == "t_ok/cpu_tiny/fp16/noncausal"
    assert not worker.alive


def test_a_silent_worker_is_killed_and_the_case_named(tmp_path):
    spec = _spec(tmp_path, ["t_hang"], case_timeout_s=3.0)
    worker = WorkerProcess(spec, "w").start()
    with pytest.raises(WorkerDied) as died:
        worker.request({"op": "measure", "round": 0, "cases": [spec.plan.cases[0].case_id]})
    assert died.value.timed_out and died.value.case == "t_hang/cpu_tiny/fp16/noncausal"
    assert "no sign of life for 3 s during correctness" in died.value.error
    assert worker.proc.poll() is not None


def test_workers_stopped_together_share_one_grace_before_they_are_killed(tmp_path):
    """A compare stops both sides' workers at once: a worker slow to tear down is killed at one
    shared deadline, not after a grace of its own following the previous one's."""
    import subprocess
    import time

    from attnwatch.ci.workers.client import CLOSE_GRACE_S, close_deadline

    workers = []
    for name in ("base", "head"):
        worker = WorkerProcess(_spec(tmp_path, ["sdpa"]), name)
        worker.proc = subprocess.Popen(["sleep", "30"], start_new_session=True)  # a teardown that never ends
        workers.append(worker)
    started = time.monotonic()
    deadline = close_deadline()
    for worker in workers:
        worker.close(deadline)
    assert time.monotonic() - started < CLOSE_GRACE_S * 1.8
    assert all(w.proc.returncode is not None for w in workers)
