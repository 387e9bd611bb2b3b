"""Inputs, the float64 reference, availability, and the torch/SDPA reference variants."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from attnwatch.kernels import availability as availability_module
from attnwatch.kernels.availability import (
    availability,
    capabilities,
    device_summary,
    runnable_device,
    skip_reason,
)
from attnwatch.kernels.cases import Case
from attnwatch.kernels.inputs import input_profile, make_inputs, make_output, softmax_scale
from attnwatch.kernels.reference import reference_attention
from attnwatch.kernels.registry import Prepared, Variant, get
from attnwatch.kernels.shapes import SHAPES, Shape, adhoc_shape, shape_set
from attnwatch.kernels.variants.sdpa import backend_ops

CPU = torch.device("cpu")
PINNED = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_math": "MATH",
}


def _case(variant="sdpa", b=1, h=2, s=77, d=64, dtype="fp16", causal=False) -> Case:
    return Case(variant, adhoc_shape(b, h, s, d), dtype, causal)


# ---------------------------------------------------------------- inputs


def test_inputs_follow_the_layout_and_are_reproducible_per_seed():
    case = _case(b=2, h=3, s=33, d=64, dtype="bf16")
    q, k, v = make_inputs(case, CPU, seed=5)
    for t in (q, k, v):
        assert t.shape == (2, 3, 33, 64) and t.dtype == torch.bfloat16 and t.is_contiguous()
        assert t.float().std().item() == pytest.approx(1.0, abs=0.1)  # N(0, 1), never zeros
    again = make_inputs(case, CPU, seed=5)
    other = make_inputs(case, CPU, seed=6)
    assert all(torch.equal(a, b) for a, b in zip((q, k, v), again))
    assert not torch.equal(q, other[0])
    assert not torch.equal(q, k) and not torch.equal(k, v)


def test_large_logits_shift_each_score_row_and_keep_its_spread():
    case = _case(b=1, h=2, s=77, d=64, dtype="fp16")
    normal = make_inputs(case, CPU, seed=0)
    q, k, v = make_inputs(case, CPU, seed=0, profile="large_logits")
    assert torch.equal(q, normal[0]) and torch.equal(v, normal[2])
    scores = q.double() @ k.double().transpose(-1, -2) / 8.0
    assert scores.std(-1).mean().item() == pytest.approx(1.0, abs=0.2)  # spread over keys unchanged
    assert (scores.max(-1).values > 88).any() and (scores.max(-1).values < -88).any()  # beyond fp32 exp
    with input_profile("large_logits"):
        assert torch.equal(make_inputs(case, CPU, seed=0)[1], k)
    assert torch.equal(make_inputs(case, CPU, seed=0)[1], normal[1])  # the block ended
    with pytest.raises(ValueError, match="unknown input profile"):
        make_inputs(case, CPU, seed=0, profile="nope")


def test_output_buffer_has_the_input_layout():
    out = make_output(_case(b=2, h=1, s=5, d=128, dtype="fp16"), CPU)
    assert out.shape == (2, 1, 5, 128) and out.dtype == torch.float16 and out.is_contiguous()


def test_softmax_scale_is_inverse_sqrt_head_dim():
    assert softmax_scale(64) == 0.125 and softmax_scale(128) == pytest.approx(1 / math.sqrt(128))


# ---------------------------------------------------------------- reference


def _naive(q, k, v, causal):
    """Row by row, written independently of kernels.reference (python loops, float64)."""
    b, h, s, d = q.shape
    out = torch.empty(b, h, s, d, dtype=torch.float64)
    for bi in range(b):
        for hi in range(h):
            for i in range(s):
                keys = i + 1 if causal else s
                logits = [float(q[bi, hi, i].double() @ k[bi, hi, j].double()) / math.sqrt(d) for j in range(keys)]
                top = max(logits)
                weights = [math.exp(x - top) for x in logits]
                total = sum(weights)
                row = sum(w / total * v[bi, hi, j].double() for j, w in enumerate(weights))
                out[bi, hi, i] = row
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_reference_matches_a_row_by_row_computation(causal):
    q, k, v = make_inputs(_case(b=2, h=2, s=9, d=8, dtype="fp16"), CPU, seed=1)
    ref = reference_attention(q, k, v, causal)
    assert ref.dtype == torch.float64 and ref.shape == q.shape
    torch.testing.assert_close(ref, _naive(q, k, v, causal), rtol=1e-12, atol=1e-12)
    if causal:  # query 0 sees only key 0: its output is exactly v[0]
        torch.testing.assert_close(ref[:, :, 0], v[:, :, 0].double(), rtol=0, atol=0)


def test_reference_chunking_does_not_change_the_result():
    q, k, v = make_inputs(_case(b=3, h=5, s=31, d=16, dtype="bf16"), CPU, seed=2)
    whole = reference_attention(q, k, v, True)
    chunked = reference_attention(q, k, v, True, max_chunk_bytes=1)  # one head per chunk
    assert torch.equal(whole, chunked)


def test_reference_rejects_mismatched_shapes():
    q, k, v = make_inputs(_case(s=8, d=8), CPU, seed=0)
    with pytest.raises(ValueError, match="one \\(B, H, S, D\\) shape"):
        reference_attention(q, k[:, :, :4], v, False)


# ---------------------------------------------------------------- availability


def test_cpu_machine_reports_cuda_variants_unavailable_with_reason():
    if capabilities().cuda:
        pytest.skip("this machine has CUDA")
    for name in ("sdpa_efficient", "sdpa_cudnn"):
        ok, reason = availability(name)
        assert not ok and "CUDA" in reason
        assert skip_reason(name, _case(name)).startswith("unavailable: needs a CUDA device")
    assert runnable_device() == CPU
    assert availability("sdpa") == (True, "")


def test_device_summary_names_torch_and_the_device():
    summary = device_summary()
    assert f"torch {torch.__version__}" in summary
    assert ("cc " in summary) if capabilities().cuda else ("CPU only" in summary)


@pytest.fixture
def fresh_capabilities(monkeypatch):
    """Re-probe under a changed environment, and restore the process's answer afterwards."""
    capabilities.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    capabilities.cache_clear()


def _needs(*needs: str) -> Variant:
    return Variant("needs_probe", "test", "probe", prepare=lambda c, d, s: None, needs=frozenset(needs))


def test_triton_needs_a_gpu_or_the_interpreter(fresh_capabilities):
    if capabilities().cuda or capabilities().triton_version is None:
        pytest.skip("needs a CPU-only machine with triton installed")
    fresh_capabilities.delenv("TRITON_INTERPRET", raising=False)
    capabilities.cache_clear()
    ok, reason = availability(_needs("triton"))
    assert not ok and "TRITON_INTERPRET=1" in reason
    fresh_capabilities.setenv("TRITON_INTERPRET", "1")
    capabilities.cache_clear()
    assert availability(_needs("triton")) == (True, "")
    assert "interpreter" in device_summary()


def test_unknown_need_and_missing_nvcc_are_reasons(fresh_capabilities):
    ok, reason = availability(_needs("quantum"))
    assert not ok and "unknown need 'quantum'" in reason
    fresh_capabilities.setenv("PATH", "")
    capabilities.cache_clear()
    ok, reason = availability(_needs("nvcc", "hopper", "cupy"))
    assert not ok and "needs nvcc" in reason
    if not capabilities().cuda:  # the missing device is one reason, not one per dependent need: Hopper's
        assert reason.count("needs a Hopper GPU") == 1 and reason.count("needs") == 2
        assert "needs a CUDA device" not in reason


def test_availability_is_probed_once_per_process():
    assert capabilities() is capabilities()
    assert availability_module.capabilities.cache_info().hits >= 1


# ---------------------------------------------------------------- SDPA and torch_3op


@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_pin_is_honoured(name):
    """The profiler shows the pinned backend's aten op, and no other backend, ran."""
    variant = get(name)
    case = _case(name, s=65, d=64, dtype="bf16", causal=True)
    if skip_reason(variant, case):
        pytest.skip(skip_reason(variant, case))
    prepared = variant.prepare(case, runnable_device(), 0)
    assert backend_ops(prepared.fn) == [PINNED[name]]


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape_id", [s.id for s in shape_set("main", Shape)])
@pytest.mark.parametrize("name", sorted(PINNED))
def test_each_pin_is_honoured_on_every_main_shape(name, shape_id, dtype, causal):
    variant = get(name)
    case = Case(name, SHAPES[shape_id], dtype, causal)
    if skip_reason(variant, case):
        pytest.skip(skip_reason(variant, case))
    prepared = variant.prepare(case, torch.device("cuda"), 0)
    assert backend_ops(prepared.fn) == [PINNED[name]]


def test_default_dispatch_runs_exactly_one_backend():
    prepared = get("sdpa").prepare(_case("sdpa", dtype="fp16"), runnable_device(), 0)
    ran = backend_ops(prepared.fn)
    assert len(ran) == 1
    assert prepared.info["backend"] == "default dispatch" and prepared.info["dispatched_to"] == ran


def test_default_dispatch_record_leaves_an_outer_profiler_running(monkeypatch):
    from attnwatch.kernels.variants import sdpa as sdpa_module

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as outer:
        asked = get("sdpa").prepare(_case("sdpa", s=8), CPU, 0)  # the dispatcher is asked: no session of its own
        monkeypatch.setattr(sdpa_module, "dispatcher_choice", lambda *args: None)  # a torch that cannot be asked
        prepared = get("sdpa").prepare(_case("sdpa", s=8), CPU, 0)
        prepared.fn()
    assert asked.info["dispatched_to"] == backend_ops(asked.fn)
    assert prepared.info["dispatched_to"].startswith("not recorded")
    assert any(e.name == "aten::scaled_dot_product_attention" for e in outer.events())


DISPATCH_PROBLEMS = [
    dict(b=b, h=h, s=s, d=d, dtype=dtype, causal=causal)
    for (b, h, s, d) in ((1, 2, 1, 64), (2, 3, 77, 64), (1, 2, 128, 128), (1, 1, 33, 256), (2, 2, 64, 80))
    for dtype in ("fp16", "bf16")
    for causal in (False, True)
]


@pytest.mark.parametrize("problem", DISPATCH_PROBLEMS, ids=lambda p: "b{b}h{h}s{s}d{d}/{dtype}/{causal}".format(**p))
def test_the_dispatchers_own_choice_is_the_backend_that_runs(problem):
    """The record asks torch's selection function instead of profiling a call: on every problem
    it names the one backend the profiler then sees run."""
    from attnwatch.kernels.variants.sdpa import dispatcher_choice

    prepared = get("sdpa").prepare(_case("sdpa", **problem), runnable_device(), 0)
    scale = softmax_scale(problem["d"])
    ran = backend_ops(prepared.fn)
    assert dispatcher_choice(prepared.q, prepared.k, prepared.v, problem["causal"], scale) == ran
    assert prepared.info["dispatched_to"] == ran


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("shape_id", [s.id for s in shape_set("main", Shape)])
def test_the_dispatchers_choice_is_what_runs_on_every_main_shape(shape_id, dtype, causal):
    from attnwatch.kernels.variants.sdpa import dispatcher_choice

    case = Case("sdpa", SHAPES[shape_id], dtype, causal)
    if skip_reason(get("sdpa"), case):
        pytest.skip(skip_reason(get("sdpa"), case))
    prepared = get("sdpa").prepare(case, torch.device("cuda"), 0)
    scale = softmax_scale(SHAPES[shape_id].head_dim)
    ran = backend_ops(prepared.fn)
    assert dispatcher_choice(prepared.q, prepared.k, prepared.v, causal, scale) == ran == prepared.info["dispatched_to"]


def test_a_pin_fails_loudly_instead_of_falling_back():
    if capabilities().cuda:
        pytest.skip("on CUDA every backend exists; this checks the CPU refusal")
    prepared = get("sdpa_efficient").prepare(_case("sdpa_efficient"), CPU, 0)
    with pytest.raises(RuntimeError, match="No viable backend"):
        prepared.fn()


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_torch_3op_writes_its_own_buffer_with_the_causal_mask(causal):
    case = _case("torch_3op", b=2, h=2, s=19, d=64, dtype="fp16", causal=causal)
    prepared = get("torch_3op").prepare(case, CPU, 3)
    assert isinstance(prepared, Prepared) and prepared.out is not None
    prepared.out.fill_(float("nan"))
    out = prepared.fn()
    assert out is prepared.out and bool(torch.isfinite(out).all())
    assert prepared.info["kernels"] == (4 if causal else 3)
    ref = reference_attention(prepared.q, prepared.k, prepared.v, causal)
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)
    if causal:  # row 0 attends to key 0 only
        torch.testing.assert_close(out[:, :, 0].double(), prepared.v[:, :, 0].double(), atol=1e-3, rtol=0)


@pytest.mark.parametrize("name", ["sdpa", "sdpa_flash", "sdpa_math", "torch_3op"])
def test_single_token_sequence(name):
    """S = 1: the output is v itself (one key, weight 1), causal or not."""
    case = _case(name, b=1, h=3, s=1, d=128, dtype="fp16", causal=True)
    prepared = get(name).prepare(case, CPU, 0)
    torch.testing.assert_close(prepared.fn(), prepared.v, atol=0, rtol=0)


def test_fp32_is_declared_unsupported_not_crashed():
    for name in ("sdpa", "sdpa_flash", "sdpa_math", "torch_3op"):
        assert "only fp16 and bf16" in get(name).unsupported(_case(name, dtype="fp32"))


def test_under_a_profiler_the_default_dispatch_starts_no_profiler_of_its_own(monkeypatch):
    """The ncu target's environment says a profiler runs the process: sdpa's prepare then starts
    no torch.profiler session (beside Nsight Compute one cost seconds and recorded nothing used)."""
    from attnwatch.ci.ncu.profile import _target_env
    from attnwatch.kernels.capabilities import UNDER_PROFILER_ENV

    started = []
    monkeypatch.setattr(torch.profiler.profile, "__enter__", lambda self: started.append(self) or self)
    monkeypatch.setenv(UNDER_PROFILER_ENV, _target_env(None, Path("."))[UNDER_PROFILER_ENV])
    prepared = get("sdpa").prepare(_case("sdpa", s=8), CPU, 0)
    assert isinstance(prepared.info["dispatched_to"], list) and not started  # the dispatcher was asked
    from attnwatch.kernels.variants import sdpa as sdpa_module

    monkeypatch.setattr(sdpa_module, "dispatcher_choice", lambda *args: None)  # a torch that cannot be asked
    prepared = get("sdpa").prepare(_case("sdpa", s=8), CPU, 0)
    assert prepared.info["dispatched_to"] == "not recorded: running under a profiler" and not started
    monkeypatch.undo()  # the real profiler, and no flag: the dispatch is recorded again
    assert isinstance(get("sdpa").prepare(_case("sdpa", s=8), CPU, 0).info["dispatched_to"], list)


def test_the_default_dispatch_is_profiled_once_per_problem_not_per_preparation(monkeypatch):
    """Where the dispatcher cannot be asked: a compare prepares each case anew every round (four
    input sets each); the choice depends on the problem, not the values, so only its first
    preparation is profiled."""
    from attnwatch.kernels.variants import sdpa as sdpa_module

    monkeypatch.setattr(sdpa_module, "dispatcher_choice", lambda *args: None)
    profiled = []
    real = sdpa_module.backend_ops
    monkeypatch.setattr(sdpa_module, "backend_ops", lambda fn: profiled.append(fn) or real(fn))
    monkeypatch.setattr(sdpa_module, "_DISPATCHED", {})  # whatever this process prepared before
    first = get("sdpa").prepare(_case("sdpa", s=13), CPU, 0)
    again = [get("sdpa").prepare(_case("sdpa", s=13), CPU, seed) for seed in (1, 2, 3)]
    assert len(profiled) == 1 and all(p.info["dispatched_to"] == first.info["dispatched_to"] for p in again)
    get("sdpa").prepare(_case("sdpa", s=13, causal=True), CPU, 0)
    assert len(profiled) == 2  # another problem: profiled once more
