"""The correctness suite: every available variant passes it, and it can fail.

CPU shapes are tiny (2-core CI) and include odd lengths (77, 129), S = 1 and D = 60; fp16 and bf16
run natively on CPU (torch 2.13 CPU has fp16/bf16 matmul and softmax, no upcast); Triton variants
run them under Triton's CPU interpreter when there is no GPU. The `gpu`
parametrization runs every `main` shape (docs/design.md "Shapes") plus S = 777 and D = 60 on CUDA.
Each variant runs on its operator's shapes (kernels.operators): RMSNorm's CPU rows include widths
that are not powers of two (200, 1000) and a single row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attnwatch.kernels import registry
from attnwatch.kernels.availability import skip_reason
from attnwatch.kernels.cases import DTYPES, Case
from attnwatch.kernels.correctness import (
    CheckResult,
    ToleranceFileError,
    UnsupportedCase,
    check_case,
    compare,
    load_tolerances,
)
from attnwatch.kernels.inputs import make_inputs, make_output, softmax_scale
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.registry import Prepared, Variant
from attnwatch.kernels.rmsnorm.shapes import adhoc_rows_shape
from attnwatch.kernels.shapes import SHAPES, adhoc_shape, shape_set

REPO_ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
SEEDS = (0, 1, 2)
# Odd lengths (77, 129, 777), S = 1, and a head dim that is not a multiple of 8 (60): each
# variant must either declare such a case unsupported or get it right.
CPU_SHAPES = [
    adhoc_shape(1, 2, 77, 64),
    adhoc_shape(2, 1, 129, 128),
    adhoc_shape(1, 3, 1, 64),
    adhoc_shape(1, 1, 33, 60),
    adhoc_rows_shape(8, 200),
    adhoc_rows_shape(33, 1000),
    adhoc_rows_shape(1, 4096),
]
GPU_SHAPES = shape_set("main") + [
    adhoc_shape(2, 4, 777, 64),
    adhoc_shape(1, 4, 777, 128),
    adhoc_shape(1, 2, 77, 60),
    adhoc_rows_shape(4097, 5120),
    adhoc_rows_shape(1, 7168),
]


def _make_case(name: str, shape, dtype: str, mode) -> Case:
    """Attention's case of a causal flag, another operator's of its mode."""
    operator = registry.get(name).operator
    if operator == "attention":
        return Case(name, shape, dtype, bool(mode))
    return Case(name, shape, dtype, mode=mode, operator=operator)


def _cases(shapes):
    """Every variant on each shape of its operator's shape type, in each dtype and mode."""
    for variant in registry.all_variants():
        op = get_operator(variant.operator)
        modes = (False, True) if op.name == "attention" else op.modes
        for shape in shapes:
            if not isinstance(shape, op.shape_type):
                continue
            for dtype in DTYPES:
                for mode in modes:
                    case = _make_case(variant.name, shape, dtype, mode)
                    yield pytest.param(variant.name, case, id=case.id)


def _assert_all_pass(results: list[CheckResult], request=None) -> None:
    if request is not None:  # the measured errors travel in the junit report (any junit family)

        def record_property(name, value):
            request.node.user_properties.append((name, value))

        finite = [r for r in results if r.max_abs_err is not None]
        record_property("max_abs_err", max((r.max_abs_err for r in finite), default=None))
        record_property("rel_err", max((r.rel_err for r in finite), default=None))
        record_property("tolerance_used", max((r.tolerance_used or 0.0 for r in finite), default=None))
        record_property("passed", sum(r.passed for r in results))
    assert [r.seed for r in results] == list(SEEDS)
    for r in results:
        assert r.passed, f"{r.case_id} seed {r.seed}: {r.error} (max_abs_err={r.max_abs_err}, rel_err={r.rel_err})"
        assert r.nonfinite == 0 and r.violations == 0 and r.calls == 2
        # |ref| < 8 for attention's N(0, 1) values; RMSNorm's y = x/rms(x)*w reaches ~20
        bound = 8 if r.case_id.split("/")[3] in ("causal", "noncausal") else 32
        assert r.max_abs_err is not None and r.max_abs_err <= r.atol + r.rtol * bound
        assert r.tolerance_used is not None and 0 <= r.tolerance_used <= 1


def _interpreted(name: str) -> bool:
    """A Triton variant on a machine without CUDA: its CPU cases run under Triton's interpreter,
    which must be switched on (TRITON_INTERPRET=1) before Triton is imported: in a child."""
    return (
        registry.get(name).family == "triton"
        and not torch.cuda.is_available()
        and os.environ.get("TRITON_INTERPRET") != "1"
    )


_INTERPRETER_CHILD = textwrap.dedent("""
    import json, sys
    from attnwatch.kernels.availability import skip_reason
    from attnwatch.kernels.cases import Case
    from attnwatch.kernels.correctness import check_case
    from attnwatch.kernels.rmsnorm.shapes import adhoc_rows_shape
    from attnwatch.kernels.shapes import adhoc_shape
    rows = {}
    for name, operator, dims, dtype, mode, seeds in json.loads(sys.argv[1]):
        if operator == "attention":
            case = Case(name, adhoc_shape(*dims), dtype, mode)
        else:
            case = Case(name, adhoc_rows_shape(*dims), dtype, mode=mode, operator=operator)
        reason = skip_reason(name, case)
        rows[case.id] = {"skip": reason} if reason else {
            "results": [r.to_dict() for r in check_case(name, case, "cpu", tuple(seeds))]}
    print("RESULT " + json.dumps(rows))
""")


@pytest.fixture(scope="module")
def interpreter_checks() -> dict:
    """Every CPU case of every interpreted variant, checked in one TRITON_INTERPRET=1 child
    (one Triton import for all of them); keyed by case id."""
    cases = [
        [name, c.operator, _dims(c), c.dtype, c.causal if c.operator == "attention" else c.mode, SEEDS]
        for p in _cases(CPU_SHAPES)
        for name, c in [p.values]
        if _interpreted(name)
    ]
    if not cases:
        return {}
    done = subprocess.run(
        [sys.executable, "-c", _INTERPRETER_CHILD, json.dumps(cases)],
        cwd=REPO_ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def _dims(case: Case) -> list[int]:
    s = case.shape
    return [s.batch, s.heads, s.seq_len, s.head_dim] if case.operator == "attention" else [s.rows, s.hidden]


def _from_child(row: dict) -> list[CheckResult]:
    return [
        CheckResult(**{**r, "worst_index": tuple(r["worst_index"]) if r["worst_index"] else None})
        for r in row["results"]
    ]


@pytest.mark.parametrize(("name", "case"), list(_cases(CPU_SHAPES)))
def test_available_variant_passes_on_cpu(name, case, request):
    if _interpreted(name):  # Triton without a GPU: the interpreter runs the same case
        row = request.getfixturevalue("interpreter_checks")[case.id]
        if row.get("skip"):
            pytest.skip(f"under TRITON_INTERPRET=1: {row['skip']}")
        _assert_all_pass(_from_child(row), request)
        return
    reason = skip_reason(name, case)
    if reason:
        pytest.skip(reason)
    _assert_all_pass(check_case(name, case, CPU, SEEDS), request)


@pytest.mark.gpu
@pytest.mark.parametrize(("name", "case"), list(_cases(GPU_SHAPES)))
def test_available_variant_passes_on_gpu(name, case, request):
    reason = skip_reason(name, case)
    if reason:
        pytest.skip(reason)
    _assert_all_pass(check_case(name, case, torch.device("cuda"), SEEDS), request)


# ------------------------------------------------------------ the suite can fail


def _correct(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _test_variant(name: str, build) -> Variant:
    """A test-only variant (never registered): `build(q, k, v, out, case)` returns fn."""

    def prepare(case, device, seed):
        q, k, v = make_inputs(case, device, seed)
        out = make_output(case, device)
        return Prepared(fn=build(q, k, v, out, case), q=q, k=k, v=v, out=out)

    return Variant(name, "test", "deliberately wrong", prepare=prepare)


def _no_scale(q, k, v, out, case):
    def fn():
        out.copy_(torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=case.causal, scale=1.0))
        return out

    return fn


def _last_row_unwritten(q, k, v, out, case):
    def fn():
        out[:, :, :-1].copy_(_correct(q, k, v, case.causal)[:, :, :-1])
        return out

    return fn


def _nan_output(q, k, v, out, case):
    def fn():
        out.copy_(_correct(q, k, v, case.causal))
        out[0, 0, 3, 5] = float("nan")
        out[0, 0, 4, 0] = float("inf")
        return out

    return fn


def _ignores_causal(q, k, v, out, case):
    def fn():
        out.copy_(_correct(q, k, v, False))
        return out

    return fn


def _causal_off_by_one(q, k, v, out, case):
    s = q.shape[2]
    hidden = torch.ones(s, s, dtype=torch.bool).triu_(2)  # query i also sees key i + 1

    def fn():
        scores = (q.float() @ k.float().transpose(-1, -2)) * softmax_scale(q.shape[-1])
        scores.masked_fill_(hidden, float("-inf"))
        out.copy_(torch.softmax(scores, -1) @ v.float())
        return out

    return fn


def _accumulates(q, k, v, out, case):
    """Right on the first call only: adds into the (poisoned) buffer afterwards."""
    state = {"calls": 0}

    def fn():
        state["calls"] += 1
        if state["calls"] == 1:
            out.copy_(_correct(q, k, v, case.causal))
        else:
            out.add_(_correct(q, k, v, case.causal))
        return out

    return fn


def _raises(q, k, v, out, case):
    def fn():
        raise RuntimeError("illegal memory access (simulated)")

    return fn


def _wrong_dtype(q, k, v, out, case):
    return lambda: _correct(q, k, v, case.causal).float()


def _wrong_shape(q, k, v, out, case):
    return lambda: _correct(q, k, v, case.causal).transpose(1, 2).contiguous()


def _modifies_input(q, k, v, out, case):
    def fn():
        out.copy_(_correct(q, k, v, case.causal))
        q[0, 0, 0, 0] += 1.0
        return out

    return fn


WRONG = {
    "no_scale": (_no_scale, "elements outside"),
    "last_row_unwritten": (_last_row_unwritten, "NaN/Inf (or unwritten)"),
    "nan_output": (_nan_output, "NaN/Inf"),
    "ignores_causal": (_ignores_causal, "elements outside"),
    "causal_off_by_one": (_causal_off_by_one, "elements outside"),
    "accumulates": (_accumulates, "call 2"),
    "raises": (_raises, "call 1: RuntimeError: illegal memory access"),
    "wrong_dtype": (_wrong_dtype, "dtype torch.float32"),
    "wrong_shape": (_wrong_shape, "has shape"),
    "modifies_input": (_modifies_input, "modified its input(s) q"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wrong", sorted(WRONG))
def test_a_wrong_variant_fails_every_seed(wrong, dtype):
    build, message = WRONG[wrong]
    variant = _test_variant(f"test_{wrong}", build)
    case = Case(variant.name, adhoc_shape(1, 2, 77, 64), dtype, causal=True)
    results = check_case(variant, case, CPU, SEEDS)
    assert len(results) == 3
    for r in results:
        assert not r.passed, f"{wrong} passed seed {r.seed}"
        assert r.error and message in r.error, r.error


def test_failure_points_at_the_unwritten_row():
    variant = _test_variant("test_row", _last_row_unwritten)
    case = Case(variant.name, adhoc_shape(2, 2, 129, 64), "fp16", causal=False)
    result = check_case(variant, case, CPU, seeds=(0,))[0]
    assert result.nonfinite == 2 * 2 * 64 and result.violations == 2 * 2 * 64
    assert result.worst_index is not None and result.worst_index[2] == 128
    assert result.max_abs_err is not None and result.max_abs_err < 1e-2  # the written part is right


def test_the_correct_test_variant_passes():
    """Control for the wrong variants: the same scaffolding with the right math passes."""

    def build(q, k, v, out, case):
        def fn():
            out.copy_(_correct(q, k, v, case.causal))
            return out

        return fn

    variant = _test_variant("test_right", build)
    for causal in (False, True):
        _assert_all_pass(check_case(variant, Case(variant.name, adhoc_shape(1, 2, 77, 64), "bf16", causal), CPU, SEEDS))


def test_a_library_may_return_a_strided_view_of_the_right_values():
    """SDPA's memory-efficient backend returns a (B, S, H, D)-strided view: that is its layout,
    not an error, as long as the logical (B, H, S, D) values are right."""

    def build(q, k, v, out, case):
        def fn():
            bshd = _correct(q, k, v, case.causal).transpose(1, 2).contiguous()
            return bshd.transpose(1, 2)

        return fn

    def prepare(case, device, seed):
        q, k, v = make_inputs(case, device, seed)
        return Prepared(fn=build(q, k, v, None, case), q=q, k=k, v=v, out=None)

    variant = Variant("test_strided", "test", "strided view", prepare=prepare)
    _assert_all_pass(check_case(variant, Case(variant.name, adhoc_shape(1, 3, 77, 64), "fp16", True), CPU, SEEDS))


def test_tolerance_used_is_the_margin_of_a_pass():
    ref = torch.tensor([0.0, 2.0], dtype=torch.float64).view(1, 1, 1, 2)
    out = torch.tensor([0.001, 2.004], dtype=torch.float64).view(1, 1, 1, 2)
    cmp = compare(out, ref, atol=0.002, rtol=0.002)  # allowances 0.002 and 0.006
    assert cmp.violations == 0 and cmp.tolerance_used == pytest.approx(0.004 / 0.006)


def test_failing_prepare_is_a_result_not_an_exception():
    def prepare(case, device, seed):
        raise OSError("cubin not found")

    variant = Variant("test_prepare", "test", "broken build", prepare=prepare)
    results = check_case(variant, Case(variant.name, adhoc_shape(1, 1, 8, 64), "fp16", False), CPU, SEEDS)
    assert [r.passed for r in results] == [False] * 3
    assert results[0].error == "prepare: OSError: cubin not found"


def test_unavailable_or_unsupported_case_is_a_skip_with_its_reason():
    def unsupported(case):
        return "head dim 40 has no tile" if case.shape.head_dim == 40 else None

    variant = Variant("test_unsupported", "test", "d", prepare=lambda c, d, s: None, unsupported=unsupported)
    with pytest.raises(UnsupportedCase, match="unsupported: head dim 40 has no tile"):
        check_case(variant, Case(variant.name, adhoc_shape(1, 1, 8, 40), "fp16", False), CPU)
    needs_gpu = Variant("test_gpu_only", "test", "d", prepare=lambda c, d, s: None, needs=frozenset({"cuda"}))
    if not torch.cuda.is_available():
        with pytest.raises(UnsupportedCase, match="unavailable: needs a CUDA device"):
            check_case(needs_gpu, Case(needs_gpu.name, adhoc_shape(1, 1, 8, 64), "fp16", False), CPU)


def test_case_of_another_variant_is_refused():
    with pytest.raises(ValueError, match="not a case of variant"):
        check_case("sdpa", Case("torch_3op", adhoc_shape(1, 1, 8, 64), "fp16", False), CPU)


# ------------------------------------------------------------ large logits (opt-in stress)


def _no_max_subtraction(q, k, v, out, case):
    """exp(scores) / sum without the running maximum: right for small logits only."""
    s = q.shape[2]
    hidden = torch.ones(s, s, dtype=torch.bool).triu_(1)

    def fn():
        scores = (q.float() @ k.float().transpose(-1, -2)) * softmax_scale(q.shape[-1])
        if case.causal:
            scores.masked_fill_(hidden, float("-inf"))
        weights = torch.exp(scores)
        out.copy_((weights / weights.sum(-1, keepdim=True)) @ v.float())
        return out

    return fn


@pytest.mark.parametrize("dtype", DTYPES)
def test_missing_max_subtraction_passes_normal_inputs_but_fails_large_logits(dtype):
    variant = _test_variant("test_no_max", _no_max_subtraction)
    case = Case(variant.name, adhoc_shape(1, 2, 77, 64), dtype, causal=True)
    _assert_all_pass(check_case(variant, case, CPU, SEEDS))  # the gap the stress profile closes
    stressed = check_case(variant, case, CPU, SEEDS, profile="large_logits")
    assert all(not r.passed and r.nonfinite > 0 and r.profile == "large_logits" for r in stressed)


@pytest.mark.parametrize("name", ["sdpa", "sdpa_flash", "sdpa_math"])
def test_cpu_sdpa_backends_subtract_the_max(name):
    for dtype in DTYPES:
        case = Case(name, adhoc_shape(1, 2, 77, 64), dtype, causal=True)
        _assert_all_pass(check_case(name, case, CPU, SEEDS, profile="large_logits"))


# Variants that keep the scores in fp32 and subtract the row maximum (the fused online
# softmax kernels, and SDPA's math backend, which upcasts fp16/bf16 to fp32 by default): they
# must survive large logits. The unfused paths (torch_3op, cutlass_3k_*) round the scores to
# the input dtype first and are expected to exceed the tolerance; they are not listed.
FP32_SOFTMAX = (
    "sdpa",
    "sdpa_flash",
    "sdpa_efficient",
    "sdpa_cudnn",
    "sdpa_math",
    "cuda_scalar",
    "cuda_wmma",
    "cuda_wmma_cpasync",
    "triton_fa2",
    "fa4_sm90",
)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [SHAPES["h100_small"], adhoc_shape(2, 4, 777, 128)], ids=lambda s: s.id)
@pytest.mark.parametrize("name", FP32_SOFTMAX)
def test_fp32_softmax_variants_survive_large_logits_on_gpu(name, shape, dtype, causal, request):
    if name not in {v.name for v in registry.all_variants()}:
        pytest.skip(f"{name} is not registered")
    case = Case(name, shape, dtype, causal)
    reason = skip_reason(name, case)
    if reason:
        pytest.skip(reason)
    _assert_all_pass(check_case(name, case, torch.device("cuda"), SEEDS, profile="large_logits"), request)


def test_unknown_input_profile_is_refused():
    with pytest.raises(ValueError, match="unknown input profile 'huge'"):
        check_case("sdpa", Case("sdpa", adhoc_shape(1, 1, 8, 64), "fp16", False), CPU, (0,), profile="huge")


# ------------------------------------------------------------ comparison and tolerances


def test_compare_counts_nan_and_inf_and_never_passes_them():
    ref = torch.zeros(1, 1, 4, 2, dtype=torch.float64)
    out = torch.zeros(1, 1, 4, 2, dtype=torch.float16)
    out[0, 0, 1, 1] = float("nan")
    out[0, 0, 2, 0] = float("-inf")
    cmp = compare(out, ref, atol=1.0, rtol=1.0)
    assert cmp.nonfinite == 2 and cmp.violations == 2 and cmp.max_abs_err == 0.0
    everything_nan = compare(torch.full_like(out, float("nan")), ref, 1.0, 1.0)
    assert everything_nan.nonfinite == 8 and everything_nan.max_abs_err is None


def test_compare_relative_error_is_the_norm_ratio():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64).view(1, 1, 1, 2)
    out = torch.tensor([3.0, 4.5], dtype=torch.float32).view(1, 1, 1, 2)
    cmp = compare(out, ref, atol=0.1, rtol=0.05)
    assert cmp.rel_err == pytest.approx(0.5 / 5.0) and cmp.max_abs_err == pytest.approx(0.5)
    assert cmp.violations == 1 and cmp.worst_index == (0, 0, 0, 1)


def test_tolerance_table_has_a_reason_per_dtype():
    table = load_tolerances()
    assert set(DTYPES) <= set(table)
    for tol in table.values():
        assert tol.reason and 0 < tol.atol < 0.1 and 0 < tol.rtol < 0.1
    assert table["bf16"].atol > table["fp16"].atol  # bf16 has 3 fewer mantissa bits


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("[dtype.fp16]\natol = 1e-3\nrtol = 1e-3\n", "dtype.fp16.reason"),
        ("[dtype.fp16]\natol = -1\nrtol = 1e-3\nreason = 'x'\n", "dtype.fp16.atol"),
        ("[dtype.fp16]\natol = 1e-3\nrtol = 'loose'\nreason = 'x'\n", "dtype.fp16.rtol"),
        ("[dtype.fp16]\natol = 1e-3\nrtol = 1e-3\nreason = 'x'\nslack = 2\n", "unknown field(s) slack"),
        ("[dtype.fp16\natol = 1e-3\n", "not valid TOML"),
        ("title = 'no tables'\n", "[dtype.<name>] tables missing"),
    ],
)
def test_malformed_tolerance_file_names_file_and_field(tmp_path, text, field):
    path = tmp_path / "tolerances.toml"
    path.write_text(text)
    with pytest.raises(ToleranceFileError) as info:
        load_tolerances(path)
    assert str(path) in str(info.value) and field in str(info.value)


def test_check_results_serialise_to_the_bundle_record_fields():
    result = check_case("sdpa", Case("sdpa", adhoc_shape(1, 1, 16, 64), "fp16", True), CPU, seeds=(7,))[0]
    record = result.to_dict()
    json.dumps(record)
    for key in ("case_id", "seed", "max_abs_err", "rel_err", "atol", "rtol", "passed", "nonfinite", "error"):
        assert key in record
    assert record["case_id"] == "sdpa/b1_h1_s16_d64/fp16/causal" and record["seed"] == 7
