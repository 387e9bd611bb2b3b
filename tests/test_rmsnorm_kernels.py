"""RMSNorm, the second operator: its shapes, byte and FLOP model, float64 reference and
tolerances, and its variants (torch, the own Triton kernel, Liger, quack) on a CPU.

The Triton kernel runs under the interpreter in a child started with TRITON_INTERPRET=1
(Triton picks interpreter or compiler when a kernel is decorated, at import), this file run
as a script, as tests/test_triton_fa2.py does.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnwatch.kernels.availability import availability
from attnwatch.kernels.correctness import compare, load_tolerances
from attnwatch.kernels.optional_packages import package_problem
from attnwatch.kernels.rmsnorm import model
from attnwatch.kernels.rmsnorm.records import rmsnorm_case
from attnwatch.kernels.variant import Prepared
from attnwatch.kernels.rmsnorm.shapes import SHAPE_SETS, SHAPES, RowsShape, adhoc_rows_shape, shape_set
from attnwatch.kernels.variants.rmsnorm_liger import RMSNORM_LIGER
from attnwatch.kernels.variants.rmsnorm_quack import RMSNORM_QUACK
from attnwatch.kernels.variants.rmsnorm_torch import RMSNORM_TORCH
from attnwatch.kernels.variants.rmsnorm_triton import RMSNORM_TRITON

REPO_ROOT = Path(__file__).resolve().parent.parent
TOLERANCES = load_tolerances(model.TOLERANCES_PATH)
# (rows, hidden): powers of two, and widths that leave a masked tail in the row block.
CHECK_SHAPES = ((16, 2048), (5, 1000), (3, 5120), (7, 96))


def _check(out, inputs, dtype):
    tol = TOLERANCES[dtype]
    return compare(out, model.reference64(inputs, "fwd"), tol.atol, tol.rtol)


# -- shapes and the model ------------------------------------------------------------------------


def test_shape_sets_name_known_shapes_with_sources():
    for name, ids in SHAPE_SETS.items():
        assert ids and all(i in SHAPES for i in ids), name
    assert len(SHAPE_SETS["pr"]) <= 2 and set(SHAPE_SETS["pr"]) <= set(SHAPE_SETS["main"]) <= set(SHAPE_SETS["nightly"])
    assert all(s.source for s in SHAPES.values())
    assert any(s.hidden & (s.hidden - 1) for s in shape_set("nightly"))  # a non-power-of-two width
    with pytest.raises(KeyError, match="unknown RMSNorm shape set 'huge'"):
        shape_set("huge")


@pytest.mark.parametrize("field, value", [("rows", 0), ("hidden", -1), ("rows", 2.0), ("hidden", True)])
def test_rows_shape_refuses_a_bad_size(field, value):
    sizes = {"rows": 4, "hidden": 8, field: value}
    with pytest.raises(ValueError, match=f"shape 'bad': {field} must be a positive int"):
        RowsShape("bad", **sizes)


def test_flops_and_bytes_are_exact_on_a_small_shape():
    shape = RowsShape("small", 3, 5)
    assert model.flops(shape, "fwd") == 60.0  # 4 per element
    assert model.bytes_moved(shape, "fp16", "fwd") == (2 * 15 + 5) * 2  # x read, y written, w read
    assert model.bytes_moved(shape, "bf16", "fwd") == 70.0
    assert model.bytes_moved(shape, "fp32", "fwd") == 140.0
    with pytest.raises(ValueError, match="unknown mode 'bwd'"):
        model.flops(shape, "bwd")
    with pytest.raises(ValueError, match="unknown dtype 'int8'"):
        model.bytes_moved(shape, "int8", "fwd")


def test_reference64_is_the_formula():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float16)
    w = torch.tensor([1.0, -2.0], dtype=torch.float16)
    y = model.reference64((x, w), "fwd")
    rstd = 1.0 / math.sqrt(12.5 + model.EPS)
    assert y.dtype == torch.float64
    assert y[0].tolist() == pytest.approx([3.0 * rstd, -8.0 * rstd], rel=1e-15)
    assert y[1].tolist() == [0.0, 0.0]  # eps keeps an all-zero row finite


def test_reference64_chunks_agree_with_one_pass(monkeypatch):
    x, w = model.make_inputs(RowsShape("r", 9, 64), "bf16", "fwd", "cpu", 3)
    whole = model.reference64((x, w), "fwd")
    monkeypatch.setattr(model, "REFERENCE_CHUNK_BYTES", 2 * 8 * 64 * 2)  # two rows a chunk
    assert torch.equal(model.reference64((x, w), "fwd"), whole)


def test_inputs_are_seeded_and_rows_differ_in_scale():
    shape = RowsShape("r", 64, 256)
    x, w = model.make_inputs(shape, "fp16", "fwd", "cpu", 5)
    again = model.make_inputs(shape, "fp16", "fwd", "cpu", 5)
    other = model.make_inputs(shape, "fp16", "fwd", "cpu", 6)
    assert torch.equal(x, again[0]) and torch.equal(w, again[1]) and not torch.equal(x, other[0])
    assert x.shape == (64, 256) and w.shape == (256,) and x.dtype == w.dtype == torch.float16
    rms = x.float().square().mean(dim=1).sqrt()
    assert rms.max() / rms.min() > 8  # without scales every rms is ~1 and a skipped norm passes


def test_operator_record_names_baseline_references_and_model():
    from dataclasses import make_dataclass

    fields = [
        "name",
        "modes",
        "baseline",
        "references",
        "bound",
        "flops",
        "bytes",
        "make_inputs",
        "reference64",
        "shape_type",
        "tolerances",
    ]
    op = model.make_operator(make_dataclass("Operator", fields, frozen=True))
    assert (op.name, op.modes, op.baseline, op.bound) == ("rmsnorm", ("fwd",), "rmsnorm_torch", "memory")
    assert op.references == ("rmsnorm_liger", "rmsnorm_quack") and op.shape_type is RowsShape
    assert op.bytes(RowsShape("s", 3, 5), "fp16", "fwd") == 70.0 and op.tolerances == model.TOLERANCES_PATH


def test_records_are_rmsnorm_cases_variants_and_prepared_inputs():
    from attnwatch.kernels.rmsnorm import records

    case = rmsnorm_case("rmsnorm_torch", SHAPES["rms_t4k_h2048"], "fp16")
    assert (case.operator, case.mode) == ("rmsnorm", "fwd")
    assert case.id == "rmsnorm_torch/rms_t4k_h2048/fp16/fwd"
    assert records.variant_record(name="v", family="torch", description="d", prepare=None).operator == "rmsnorm"
    prepared = Prepared(fn=print, inputs=("x", "w"), out="y", config="c", config_source="fixed")
    assert (prepared.inputs, prepared.out, prepared.config, prepared.q) == (("x", "w"), "y", "c", None)


# -- tolerances: what they let through and what they catch ---------------------------------------


def _buggy(x, w, bug):
    x32, w32 = x.float(), w.float()
    rstd = torch.rsqrt(x32.square().mean(-1, keepdim=True) + model.EPS)
    if bug == "no_norm":
        y = x32 * w32
    elif bug == "other_row":
        y = x32 * rstd.roll(1, dims=0) * w32
    elif bug == "no_weight":
        y = x32 * rstd
    elif bug == "fp16_sum":
        y = x32 * torch.rsqrt(x.half().square().sum(-1, keepdim=True).float() / x.shape[1] + model.EPS) * w32
    else:
        raise AssertionError(bug)
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("bug", ["no_norm", "other_row", "no_weight", "fp16_sum"])
def test_tolerances_catch_the_bugs_they_are_for(bug, dtype):
    x, w = model.make_inputs(RowsShape("r", 32, 4096), dtype, "fwd", "cpu", 0)
    cmp = _check(_buggy(x, w, bug), (x, w), dtype)
    assert cmp.violations > 0 or cmp.nonfinite > 0


# -- variants on the CPU -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("rows, hidden", CHECK_SHAPES)
def test_torch_variant_matches_reference64(rows, hidden, dtype):
    case = rmsnorm_case("rmsnorm_torch", adhoc_rows_shape(rows, hidden), dtype)
    for seed in (0, 1):
        prepared = RMSNORM_TORCH.prepare(case, torch.device("cpu"), seed)
        cmp = _check(prepared.fn(), tuple(prepared.inputs), dtype)
        assert cmp.violations == 0 and cmp.nonfinite == 0, cmp
        assert cmp.tolerance_used < 0.5, cmp  # measured 0.22 (tolerances.toml)


def test_variants_declare_the_rmsnorm_operator_and_dtypes():
    for variant in (RMSNORM_TORCH, RMSNORM_TRITON, RMSNORM_LIGER, RMSNORM_QUACK):
        assert getattr(variant, "operator", "rmsnorm") == "rmsnorm"
        assert variant.unsupported(rmsnorm_case(variant.name, SHAPES["rms_t4k_h4096"], "fp32")).startswith("only fp16")
    assert RMSNORM_LIGER.needs == {"cuda", "triton", "liger"} and RMSNORM_QUACK.needs == {"hopper", "quack"}
    wide = rmsnorm_case("rmsnorm_triton", adhoc_rows_shape(2, 65536), "fp16")
    assert "exceeds 32768" in RMSNORM_TRITON.unsupported(wide)


def test_a_case_of_another_operator_s_shape_is_declared_unsupported_not_raised():
    from attnwatch.kernels.shapes import SHAPES as ATTENTION_SHAPES

    for variant in (RMSNORM_TORCH, RMSNORM_TRITON, RMSNORM_LIGER, RMSNORM_QUACK):
        case = rmsnorm_case(variant.name, ATTENTION_SHAPES["h100_small"], "fp16")
        assert variant.unsupported(case) == "shape 'h100_small' is not an RMSNorm (rows x hidden) shape"


@pytest.fixture
def fresh_packages(monkeypatch):
    """Re-probe the optional packages, and forget the fake packages a test made importable
    (only those: a native extension such as Triton's cannot be imported twice in a process)."""
    package_problem.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    for name in [n for n in sys.modules if n.split(".")[0] in ("liger_kernel", "quack")]:
        del sys.modules[name]
    package_problem.cache_clear()


@pytest.mark.parametrize(
    "variant, need, distribution", [(RMSNORM_LIGER, "liger", "liger-kernel"), (RMSNORM_QUACK, "quack", "quack-kernels")]
)
def test_liger_and_quack_unavailable_with_the_package_named(fresh_packages, variant, need, distribution):
    if package_problem(need) is None:
        pytest.skip(f"{distribution} is installed here")
    ok, reason = availability(variant)
    assert not ok
    assert f"needs the {distribution} package: ModuleNotFoundError: No module named" in reason


def test_a_broken_package_is_a_reason_without_its_path(fresh_packages, tmp_path):
    package = tmp_path / "liger_kernel"
    (package / "ops").mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ImportError('libcuda.so.1: cannot open shared object file /opt/cuda/lib64/libcuda.so.1')\n"
    )
    fresh_packages.syspath_prepend(str(tmp_path))
    problem = package_problem("liger")
    assert problem == "ImportError: libcuda.so.1: cannot open shared object file libcuda.so.1"
    assert availability(RMSNORM_LIGER)[1].count("liger-kernel") == 1


def test_a_package_in_an_extra_site_folder_meets_its_need(tmp_path):
    """A `pip --target` folder named in ATTNWATCH_EXTRA_SITE meets the need, in a fresh
    interpreter as a measuring child is: the probe adds the folder (its .pth files run) before
    importing, so a variant is not declared missing while its package is installed there. The
    fake liger sits behind a .pth file, as the CuTe DSL wheels put `cutlass` on the path."""
    site_dir = tmp_path / "rmsnorm_site"
    module = site_dir / "behind_pth" / "liger_kernel" / "ops"
    module.mkdir(parents=True)
    (module.parent / "__init__.py").write_text("")
    (module / "__init__.py").write_text("")
    (module / "rms_norm.py").write_text("")
    (site_dir / "fake_liger.pth").write_text("behind_pth\n")
    code = (
        "import json; from attnwatch.kernels.optional_packages import package_problem; "
        "print(json.dumps(package_problem('liger')))"
    )
    env = {name: value for name, value in os.environ.items() if name != "ATTNWATCH_EXTRA_SITE"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    without = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    with_site = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "ATTNWATCH_EXTRA_SITE": str(site_dir)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert without.returncode == 0 and with_site.returncode == 0, without.stderr[-1000:] + with_site.stderr[-1000:]
    assert json.loads(without.stdout).startswith("ModuleNotFoundError: No module named 'liger_kernel'")
    assert json.loads(with_site.stdout) is None


# -- the Triton kernel under the interpreter (a child process) -----------------------------------


def _interpreter_worker() -> dict:
    """In the TRITON_INTERPRET=1 child: each shape and dtype through the variant's own prepare,
    its output buffer poisoned with NaN before each of two calls."""
    results = {}
    for rows, hidden in CHECK_SHAPES:
        for dtype in ("fp16", "bf16"):
            case = rmsnorm_case("rmsnorm_triton", adhoc_rows_shape(rows, hidden), dtype)
            worst = {"violations": 0, "nonfinite": 0, "tolerance_used": 0.0}
            for seed in (0, 1):
                prepared = RMSNORM_TRITON.prepare(case, torch.device("cpu"), seed)
                inputs = tuple(prepared.inputs)
                for _ in range(2):
                    prepared.out.fill_(float("nan"))
                    got = prepared.fn()
                    assert got is prepared.out
                    cmp = _check(got, inputs, dtype)
                    worst["violations"] += cmp.violations
                    worst["nonfinite"] += cmp.nonfinite
                    worst["tolerance_used"] = max(worst["tolerance_used"], cmp.tolerance_used or math.inf)
            worst["config"] = [prepared.config, prepared.config_source]
            results[f"{rows}x{hidden}/{dtype}"] = worst
    return results


@pytest.fixture(scope="module")
def interpreter_results():
    proc = subprocess.run(
        [sys.executable, __file__],
        cwd=REPO_ROOT,
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("rows, hidden", CHECK_SHAPES)
def test_triton_kernel_matches_reference64_under_the_interpreter(interpreter_results, rows, hidden, dtype):
    result = interpreter_results[f"{rows}x{hidden}/{dtype}"]
    assert result["nonfinite"] == 0, f"{result['nonfinite']} unwritten or non-finite elements"
    assert result["violations"] == 0, result
    assert result["tolerance_used"] < 0.6, result  # measured 0.44 at most (bf16 truncation, tolerances.toml)
    block = 1 << (hidden - 1).bit_length()
    assert result["config"][0].startswith(f"row_b{block}_w") and result["config"][1] == "fixed"


if __name__ == "__main__":
    print(json.dumps(_interpreter_worker()))
