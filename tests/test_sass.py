"""SASS read, classified and diffed on real binaries: cubins nvcc builds here for sm_90a from a
base source and planted one-line changes (no GPU needed), and a Triton kernel compiled for an
sm_90 target. Skipped, with the reason, where nvcc or cuobjdump is absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from attnwatch.history.analysis import sass
from attnwatch.history.analysis.sass_diff import IN_LOOP, OUTSIDE, describe, describe_binaries, diff_binaries

NVCC = shutil.which("nvcc")
CUOBJDUMP = sass.find_tool("cuobjdump")
needs_tools = pytest.mark.skipif(
    NVCC is None or CUOBJDUMP is None,
    reason=f"needs nvcc ({NVCC}) and cuobjdump ({CUOBJDUMP}) to build and read sm_90a cubins",
)

BASE = r"""
extern "C" __global__ void __launch_bounds__(256) k(const float* x, float* y, int n) {
  __shared__ float s[256];
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    s[threadIdx.x] = x[i];
    __syncthreads();
    acc += s[(threadIdx.x + 1) % 256];
    __syncthreads();
  }
  y[threadIdx.x] = acc;
}
"""
PLANTS = {
    "barrier": ("acc += s[", "__syncthreads(); acc += s["),
    "epilogue": ("y[threadIdx.x] = acc;", "y[threadIdx.x] = acc; y[threadIdx.x + n] = acc * 2.f;"),
    "shared_round_trip": (
        "acc += s[(threadIdx.x + 1) % 256];",
        "acc += s[(threadIdx.x + 1) % 256]; s[threadIdx.x] = acc; acc += s[threadIdx.x ^ 1];",
    ),
}


def _cubin(tmp_path: Path, name: str, source: str) -> Path:
    cu = tmp_path / f"{name}.cu"
    cu.write_text(source)
    out = tmp_path / f"{name}.cubin"
    subprocess.run(
        [NVCC, "-cubin", "-arch=sm_90a", "-O3", "-o", str(out), str(cu)], check=True, capture_output=True, timeout=300
    )
    return out


@needs_tools
def test_loops_and_resources_of_a_real_cubin(tmp_path):
    code = sass.read_binary(_cubin(tmp_path, "base", BASE))["k"]
    real = [(a, b) for a, b in code.loops() if a < b]
    assert len(real) == 1  # the for loop; the BRA-to-itself trap after EXIT is not a body
    depths = code.loop_depths()
    bars = [i for i in code.instructions if i.opcode == "BAR"]
    assert len(bars) == 2 and all(depths[i.offset] == 1 for i in bars)
    assert all(sass.opcode_class(i.opcode) == "barrier" for i in bars)
    exits = [i for i in code.instructions if i.opcode == "EXIT"]
    assert exits and all(depths[i.offset] == 0 for i in exits)
    assert code.resources.shared >= 1024 and code.resources.local == 0 and code.resources.registers > 0


@needs_tools
def test_an_added_barrier_is_one_bar_inside_the_loop(tmp_path):
    base = sass.read_binary(_cubin(tmp_path, "base", BASE))
    old, new = PLANTS["barrier"]
    head = sass.read_binary(_cubin(tmp_path, "barrier", BASE.replace(old, new)))
    diff = diff_binaries(base, head)
    assert len(diff.kernels) == 1
    kd = diff.kernels[0]
    bar = [c for c in kd.changes if c.opcode == "BAR"]
    assert [(c.where, c.delta) for c in bar] == [(IN_LOOP, 1)]
    assert kd.by_class["barrier"] == 1
    assert describe(kd).startswith("+1 BAR in a loop")


@needs_tools
def test_an_epilogue_change_is_outside_loops(tmp_path):
    base = sass.read_binary(_cubin(tmp_path, "base", BASE))
    old, new = PLANTS["epilogue"]
    head = sass.read_binary(_cubin(tmp_path, "epilogue", BASE.replace(old, new)))
    kd = diff_binaries(base, head).kernels[0]
    stg = [c for c in kd.changes if c.opcode == "STG"]
    assert [(c.where, c.delta) for c in stg] == [(OUTSIDE, 1)]
    assert not any(c.where == IN_LOOP and c.opcode_class in ("barrier", "global store") for c in kd.changes)


@needs_tools
def test_a_shared_round_trip_adds_shared_loads_and_stores_in_the_loop(tmp_path):
    base = sass.read_binary(_cubin(tmp_path, "base", BASE))
    old, new = PLANTS["shared_round_trip"]
    kd = diff_binaries(base, sass.read_binary(_cubin(tmp_path, "rt", BASE.replace(old, new)))).kernels[0]
    in_loop = {c.opcode: c.delta for c in kd.changes if c.where == IN_LOOP}
    assert in_loop.get("STS", 0) >= 1 and in_loop.get("LDS", 0) >= 1


@needs_tools
def test_same_source_same_code_and_cache_by_digest(tmp_path):
    a = _cubin(tmp_path, "a", BASE)
    cache = sass.SassCache(tmp_path / "cache")
    first = cache.read(a)
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
    again = cache.read(a)  # from the cache entry
    assert again["k"].instructions == first["k"].instructions and again["k"].resources == first["k"].resources
    diff = diff_binaries(first, sass.read_binary(_cubin(tmp_path, "b", BASE)))
    assert not diff.kernels and describe_binaries(diff) == "the binaries' kernels have the same code"


@needs_tools
def test_a_register_cap_shows_as_fewer_registers(tmp_path):
    base = sass.read_binary(_cubin(tmp_path, "base", BASE))
    capped = BASE.replace("__launch_bounds__(256)", "__launch_bounds__(256, 8)")
    head = sass.read_binary(_cubin(tmp_path, "cap", capped))
    b, h = base["k"].resources.registers, head["k"].resources.registers
    assert h <= 32 and h <= b  # 8 blocks of 256 threads on 64K registers: at most 32 per thread
    if h < b:
        assert diff_binaries(base, head).kernels[0].resources["registers"] == (b, h)


def test_parse_handles_predicates_and_modifiers():
    text = """
		Function : kern
        /*0190*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;              /* 0x0000000000007b1d */
        /*01d0*/              @!P0 BRA 0x130 ;                                /* 0xfffffffc00d48947 */
        /*0200*/                   BRA 0x200;                                 /* 0xfffffffc00fc7947 */
"""
    code = sass.parse_sass(text)["kern"]
    assert [(i.opcode, i.predicate) for i in code.instructions] == [("BAR", ""), ("BRA", "@!P0"), ("BRA", "")]
    assert code.loops() == [(0x130, 0x1D0), (0x200, 0x200)]
    resources = sass.parse_resource_usage(" Function kern:\n  REG:15 STACK:0 SHARED:2048 LOCAL:8 CONSTANT[0]:548\n")
    assert resources["kern"] == sass.Resources(15, 0, 2048, 8)


def test_missing_tool_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(sass, "find_tool", lambda name: None)
    with pytest.raises(sass.SassError, match="cuobjdump not found"):
        sass.read_binary(tmp_path / "x.cubin")


def test_triton_kernel_compiled_for_sm90_without_a_gpu(tmp_path):
    triton = pytest.importorskip("triton", reason="triton is not installed")
    if CUOBJDUMP is None:
        pytest.skip("cuobjdump not found")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        pytest.skip(f"this triton has no ASTSource/GPUTarget: {exc}")
    import triton.language as tl

    from attnwatch.kernels.triton.fa2_fwd import COMPILE_OPTIONS

    def build(stages_of_work: int) -> Path:
        @triton.jit
        def scale(x, y, n, B: tl.constexpr, R: tl.constexpr):
            offs = tl.program_id(0) * B + tl.arange(0, B)
            v = tl.load(x + offs, mask=offs < n)
            for _ in tl.static_range(R):
                v = v * 2.0 + 1.0
            tl.store(y + offs, v, mask=offs < n)

        src = ASTSource(
            fn=scale, signature={"x": "*fp32", "y": "*fp32", "n": "i32"}, constexprs={"B": 128, "R": stages_of_work}
        )
        # compiled with the options the attention kernel pins
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options=COMPILE_OPTIONS)
        out = tmp_path / f"scale{stages_of_work}.cubin"
        out.write_bytes(compiled.asm["cubin"])
        return out

    base, head = sass.read_binary(build(1)), sass.read_binary(build(3))
    kd = diff_binaries(base, head).kernels[0]
    assert kd.by_class.get("fp32", 0) >= 2  # two more FFMA (or FMUL+FADD) per element
