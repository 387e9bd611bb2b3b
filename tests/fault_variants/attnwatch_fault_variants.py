"""Deliberately misbehaving variants for the fault-isolation tests (never in the registry).

Imported by the measuring child only when a test lists this module in
`RunOptions.extra_variant_modules`. Family "test"; all run on a CPU.
"""

from __future__ import annotations

import os
import time

import torch

from attnwatch.kernels.inputs import make_inputs
from attnwatch.kernels.registry import Prepared, Variant, register


def _inputs(case, device, seed):
    return make_inputs(case, device, seed)


def _attention(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _good(case, device, seed):
    q, k, v = _inputs(case, device, seed)
    return Prepared(fn=lambda: _attention(q, k, v, case.causal), q=q, k=k, v=v)


def _slow(case, device, seed):
    """Same function with a deliberate extra pass: measurably slower than `t_ok`."""
    q, k, v = _inputs(case, device, seed)

    def fn():
        _attention(q, k, v, case.causal)
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _raise_in_prepare(case, device, seed):
    raise ValueError("t_raise: this variant refuses to prepare")


def _raise_in_call(case, device, seed):
    q, k, v = _inputs(case, device, seed)
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 3:  # passes warm-up, fails while timed
            raise RuntimeError("t_raise_timed: failed on call 4")
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _abort_in_call(case, device, seed):
    q, k, v = _inputs(case, device, seed)

    def fn():
        os.abort()

    return Prepared(fn=fn, q=q, k=k, v=v)


def _exit_in_prepare(case, device, seed):
    os._exit(3)


def _hang_in_call(case, device, seed):
    """Sleeps for an hour when called; with $ATTNWATCH_TEST_MARKER_DIR set it first leaves a
    `hanging-<case>` file there, so a test can interrupt it once it hangs, not after a guess."""
    q, k, v = _inputs(case, device, seed)
    marker_dir = os.environ.get("ATTNWATCH_TEST_MARKER_DIR")

    def fn():
        if marker_dir:
            open(os.path.join(marker_dir, f"hanging-{case.id.replace('/', '_')}"), "w").close()
        time.sleep(3600)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _poison(case, device, seed):
    q, k, v = _inputs(case, device, seed)

    def fn():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    return Prepared(fn=fn, q=q, k=k, v=v)


def _never_causal(case):
    return "t_noncausal_only: causal masking not implemented" if case.causal else None


for _name, _prepare, _desc in (
    ("t_ok", _good, "torch SDPA"),
    ("t_slow", _slow, "two SDPA calls per call"),
    ("t_raise", _raise_in_prepare, "raises in prepare"),
    ("t_raise_timed", _raise_in_call, "raises on the 4th call"),
    ("t_abort", _abort_in_call, "calls os.abort() when timed"),
    ("t_exit", _exit_in_prepare, "calls os._exit(3) in prepare"),
    ("t_hang", _hang_in_call, "sleeps for an hour when called"),
    ("t_poison", _poison, "raises a CUDA-context-poisoning error"),
):
    register(Variant(name=_name, family="test", description=_desc, prepare=_prepare))

register(
    Variant(name="t_noncausal", family="test", description="non-causal only", prepare=_good, unsupported=_never_causal)
)


BUILD_S = 0.3  # how long t_built's build takes


def _build_slowly():
    """A build that takes BUILD_S and reports ok: what a compile's cost looks like to the worker."""
    from attnwatch.kernels.build_report import BuildReport

    time.sleep(BUILD_S)
    return BuildReport(variant="t_built", ok=True, target="test", compile_seconds=BUILD_S)


register(
    Variant(name="t_built", family="test", description="SDPA with a 0.3 s build", prepare=_good, build=_build_slowly)
)


def _abort_when_timed(case, device, seed):
    """Survives warm-up (3 calls), then aborts inside the interleaved timing loop."""
    q, k, v = _inputs(case, device, seed)
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 3:
            os.abort()
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


register(Variant(name="t_abort_timed", family="test", description="aborts on the 4th call", prepare=_abort_when_timed))


_ILLEGAL_SOURCE = r"""
extern "C" __global__ void write_far(float* p) {
    p[(1ull << 40) + threadIdx.x] = 1.0f;  // far outside any allocation: illegal address
}
"""


def _illegal_address(case, device, seed):
    """GPU only: a real out-of-bounds store that poisons the CUDA context when timed."""
    import cupy

    q, k, v = _inputs(case, device, seed)
    kernel = cupy.RawKernel(_ILLEGAL_SOURCE, "write_far")
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 3:
            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            with stream:
                kernel((1,), (32,), (q.data_ptr(),))
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


register(
    Variant(
        name="t_cuda_illegal",
        family="test",
        description="illegal address on the 4th call (GPU)",
        prepare=_illegal_address,
        needs=frozenset({"cuda", "cupy"}),
    )
)


# -- asynchronous faults (issue 11): errors reported after the call that caused them ----------
#
# A CUDA kernel that faults does not fail its own launch: the error is reported by the next
# call that synchronizes (or by any later call: the context is poisoned). On a CPU this module
# reproduces that: `torch.cpu.synchronize` (the harness's device sync on a CPU, a no-op in
# torch) raises the pending error, as cudaDeviceSynchronize would.

ASYNC_ERROR = (
    "CUDA error: an illegal memory access was encountered (asynchronous, reported at the next synchronization)"
)
_pending = {"error": None}
_corrupted = {"by": None}
_real_cpu_synchronize = torch.cpu.synchronize


def _synchronize_reporting_pending(device=None):
    if _pending["error"]:
        raise RuntimeError(_pending["error"])
    return _real_cpu_synchronize(device)


torch.cpu.synchronize = _synchronize_reporting_pending


def _async_fault(case, device, seed):
    """Returns normally, but from its 4th call on leaves an error for the next sync to report."""
    q, k, v = _inputs(case, device, seed)
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 3:
            _pending["error"] = ASYNC_ERROR
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _corrupt(case, device, seed):
    """Writes out of bounds into memory others use: harmless to itself, fatal to `t_victim`."""
    q, k, v = _inputs(case, device, seed)

    def fn():
        _corrupted["by"] = "t_corrupt"
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _victim(case, device, seed):
    """Correct alone; faults when `t_corrupt` ran before it in the same process."""
    q, k, v = _inputs(case, device, seed)

    def fn():
        if _corrupted["by"]:
            raise RuntimeError("CUDA error: an illegal memory access was encountered (reading corrupted memory)")
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


def _crash_once(case, device, seed):
    """Crashes the first process that times it, never another: a crash that does not recur.

    The first crash leaves a marker file in $ATTNWATCH_TEST_MARKER_DIR (one per case)."""
    q, k, v = _inputs(case, device, seed)
    marker = os.path.join(os.environ.get("ATTNWATCH_TEST_MARKER_DIR", "."), f"crashed-once-{case.id.replace('/', '_')}")
    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        if calls["n"] > 3 and not os.path.exists(marker):
            with open(marker, "w") as fh:
                fh.write("crashed\n")
            raise RuntimeError("CUDA error: an illegal memory access was encountered (once)")
        return _attention(q, k, v, case.causal)

    return Prepared(fn=fn, q=q, k=k, v=v)


for _name, _prepare, _desc in (
    ("t_async_fault", _async_fault, "an asynchronous fault from the 4th call, reported at the next sync"),
    ("t_corrupt", _corrupt, "corrupts memory that t_victim reads (no error of its own)"),
    ("t_victim", _victim, "faults when t_corrupt ran before it"),
    ("t_crash_once", _crash_once, "crashes once per $ATTNWATCH_TEST_MARKER_DIR, then never"),
):
    register(Variant(name=_name, family="test", description=_desc, prepare=_prepare))
