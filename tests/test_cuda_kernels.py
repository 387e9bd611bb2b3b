"""The CUDA variants: every .cu compiles for sm_90 with the resources we measured (CPU CI),
the registry declarations, and (GPU) correctness against the float64 reference."""

from __future__ import annotations

import shutil

import pytest

from attnwatch.kernels import registry
from attnwatch.kernels.cases import Case
from attnwatch.kernels.cuda.launch import HEAD_DIMS, SPECS, build, variant_build_report
from attnwatch.kernels.nvcc import parse_ptxas_verbose
from attnwatch.kernels.shapes import SHAPES, Shape, adhoc_shape, shape_set

CUDA_VARIANTS = ("cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

# Measured with nvcc 13.0 for sm_90 (ptxas -v). Registers may move with the compiler, so the
# test bounds them by what each kernel's launch bounds allow (65536 regs per SM shared by the
# CTAs that shared memory admits); spills must stay exactly zero: a spill inside the inner
# loop costs more than any register saved.
REGISTER_CAPS = {
    "attn_scalar": 255,
    "attn_wmma_d64": 168,  # __launch_bounds__(128, 3)
    "attn_wmma_d128": 255,  # __launch_bounds__(128, 2)
    "attn_wmma_cpasync_d64": 168,  # __launch_bounds__(128, 3)
    "attn_wmma_cpasync_d128": 255,
}
SMEM_PER_SM_BYTES = 228 * 1024  # H100/H200: per SM, of which 227 KB per CTA at most


def _cap(entry: str) -> int:
    for prefix in sorted(REGISTER_CAPS, key=len, reverse=True):
        if entry.startswith(prefix):
            return REGISTER_CAPS[prefix]
    raise AssertionError(entry)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("nvcc-cache")


# ---------------------------------------------------------------- builds (no GPU needed)


@needs_nvcc
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_source_builds_for_sm90_without_spills(variant, cache_dir):
    result = build(variant, "sm_90", cache_dir)
    usages = parse_ptxas_verbose(result.log)
    spec = SPECS[variant]
    assert sorted(usages) == sorted(spec.entries())
    for name, usage in usages.items():
        assert usage.arch == "sm_90"
        assert (usage.spill_store_bytes, usage.spill_load_bytes, usage.stack_frame_bytes) == (0, 0, 0), name
        assert 0 < usage.registers <= _cap(name), (name, usage.registers)
        total_smem = usage.shared_mem_bytes + spec.dynamic_smem_bytes(result.path, name)
        assert total_smem <= 227 * 1024, name
    if variant == "cuda_scalar":
        # static tiles: q (8 x D) + k (32 x (D + 1)) + v (32 x D) floats
        assert usages["attn_scalar_d64_fp16"].shared_mem_bytes == (8 * 64 + 32 * 65 + 32 * 64) * 4
        assert usages["attn_scalar_d128_bf16"].shared_mem_bytes == (8 * 128 + 32 * 129 + 32 * 128) * 4
    else:
        # all shared memory is dynamic (more than the 48 KB static limit for D = 128)
        assert all(u.shared_mem_bytes == 0 for u in usages.values())


@needs_nvcc
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_build_report_and_cache_hit(variant, cache_dir):
    first = variant_build_report(variant, "sm_90", cache_dir)
    second = variant_build_report(variant, "sm_90", cache_dir)
    assert first.ok, first.error
    assert second.cached and second.source_hash == first.source_hash
    assert first.target == "sm_90"
    assert first.spill_store_bytes == 0 and first.spill_load_bytes == 0
    assert first.registers_per_thread == first.config["kernels"][SPECS[variant].entry(64, "fp16")]["registers"]
    assert set(first.config["kernels"]) == set(SPECS[variant].entries())
    assert "ptxas" in first.log_tail


@needs_nvcc
def test_wmma_shared_memory_fits_the_occupancy_the_sources_claim(cache_dir):
    """Each entry's dynamic shared memory as its cubin states it (the sums the .cu comments
    give), and the CTAs per SM the launch bounds in the .cu files assume."""
    expected = {  # (variant, head_dim): (bytes, CTAs per SM)
        ("cuda_wmma", 64): (54_528, 4),
        ("cuda_wmma", 128): (79_104, 2),
        ("cuda_wmma_cpasync", 64): (72_960, 3),
        ("cuda_wmma_cpasync", 128): (113_920, 2),
    }
    for (variant, head_dim), (size, ctas) in expected.items():
        spec = SPECS[variant]
        cubin = build(variant, "sm_90", cache_dir).path
        for dtype in ("fp16", "bf16"):
            smem = spec.dynamic_smem_bytes(cubin, spec.entry(head_dim, dtype))
            assert smem == size, (variant, head_dim, dtype, smem)
        assert SMEM_PER_SM_BYTES // (size + 1024) == ctas, (variant, head_dim, size)  # 1 KB reserved per CTA
    assert SPECS["cuda_scalar"].dynamic_smem_bytes(build("cuda_scalar", "sm_90", cache_dir).path, "any") == 0


@needs_nvcc
def test_the_launch_follows_a_padding_change_in_the_source(tmp_path, cache_dir):
    """A one-line padding change of the score scratch (scripts/pr_plants/bank_conflicts.patch at
    8): the host's size follows the cubin, 4 more floats per row on 64 rows, so the kernel is
    not launched with less than it lays out (it trapped on the H100 while the host kept its own
    copy of the formula)."""
    from attnwatch.kernels.cuda.launch import SOURCE_DIR
    from attnwatch.kernels.nvcc import nvcc_compile

    for name in ("cuda_wmma.cu", "wmma_attention.cuh", "attention_common.cuh"):
        shutil.copy(SOURCE_DIR / name, tmp_path / name)
    header = tmp_path / "wmma_attention.cuh"
    text = header.read_text()
    assert "constexpr int SCORE_LD = WMMA_BLOCK_N + 4;" in text
    header.write_text(text.replace("SCORE_LD = WMMA_BLOCK_N + 4;", "SCORE_LD = WMMA_BLOCK_N + 8;"))
    planted = nvcc_compile([tmp_path / "cuda_wmma.cu"], output="cubin", arch="sm_90", cache_dir=cache_dir)
    spec = SPECS["cuda_wmma"]
    assert spec.dynamic_smem_bytes(planted.path, spec.entry(64, "fp16")) == 54_528 + 64 * 4 * 4


# ---------------------------------------------------------------- registry declarations


@pytest.mark.parametrize("variant", CUDA_VARIANTS)
def test_registered_with_needs_and_unsupported_reasons(variant):
    v = registry.get(variant)
    assert v.family == "cuda" and v.needs == frozenset({"cuda", "nvcc", "cupy"})
    assert v.build is not None and v.lineage
    for shape_id in [s.id for s in shape_set("main", Shape)]:
        for dtype in ("fp16", "bf16"):
            assert v.unsupported(Case(variant, SHAPES[shape_id], dtype, True)) is None
    reason = v.unsupported(Case(variant, adhoc_shape(1, 2, 128, 96), "fp16", False))
    assert reason and "96" in reason and "head_dim" in reason
    assert "fp32" in v.unsupported(Case(variant, SHAPES["cpu_tiny"], "fp32", False))


# ---------------------------------------------------------------- correctness on the GPU

GPU_SHAPES = shape_set("main", Shape) + [
    adhoc_shape(2, 3, 777, 64),  # a tail tile in every dimension the kernels tile
    adhoc_shape(2, 3, 777, 128),
    adhoc_shape(1, 1, 1, 64),  # one query, one key
    adhoc_shape(3, 1, 65, 128),  # one key past a full tile
]


@pytest.mark.gpu
@pytest.mark.parametrize("variant", CUDA_VARIANTS)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_matches_float64_reference(variant, shape, dtype, causal):
    from attnwatch.kernels.correctness import check_case

    assert shape.head_dim in HEAD_DIMS
    seeds = (0,) if shape.batch * shape.heads * shape.seq_len > 100_000 else (0, 1)
    results = check_case(variant, Case(variant, shape, dtype, causal), seeds=seeds, calls=2)
    for result in results:
        assert result.passed, result.to_dict()
        assert result.calls == 2


@pytest.mark.gpu
def test_launch_uses_torch_current_stream():
    import torch

    from attnwatch.kernels.correctness import compare
    from attnwatch.kernels.reference import reference_attention

    variant = registry.get("cuda_wmma")
    case = Case("cuda_wmma", adhoc_shape(1, 2, 256, 64), "fp16", True)
    prepared = variant.prepare(case, torch.device("cuda"), 3)
    q_good = prepared.q.clone()
    prepared.q.zero_()
    prepared.out.fill_(float("nan"))
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)  # the side stream is busy for tens of milliseconds ...
        prepared.q.copy_(q_good)  # ... before q gets its values: only a launch on `side` sees them
        prepared.fn()
    torch.cuda.synchronize()
    ref = reference_attention(q_good, prepared.k, prepared.v, True)
    cmp = compare(prepared.out, ref, 2e-3, 2e-3)
    assert cmp.nonfinite == 0 and cmp.violations == 0


@pytest.mark.gpu
@pytest.mark.parametrize("variant_name", CUDA_VARIANTS)
def test_a_kept_launch_alone_runs_right_after_empty_cache_in_a_graph(variant_name):
    """What the harness does: keep only `Prepared.fn`, then time it in a CUDA graph, whose
    capture empties the allocator's cache. The launch must still read its own q, k and v."""
    import gc
    import weakref

    import torch

    from attnwatch.kernels.correctness import compare
    from attnwatch.kernels.reference import reference_attention

    case = Case(variant_name, SHAPES["l4_mission"], "fp16", False)
    prepared = registry.get(variant_name).prepare(case, torch.device("cuda"), 5)
    q, k, v = (t.clone() for t in (prepared.q, prepared.k, prepared.v))
    inputs = [weakref.ref(t) for t in (prepared.q, prepared.k, prepared.v)]
    fn = prepared.fn
    del prepared
    gc.collect()
    torch.cuda.empty_cache()
    assert all(ref() is not None for ref in inputs)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    cmp = compare(out, reference_attention(q, k, v, False), 2e-3, 2e-3)
    assert cmp.nonfinite == 0 and cmp.violations == 0
