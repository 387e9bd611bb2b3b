"""Reading a number a CUDA source stores in its cubin (attnwatch/kernels/cubin_symbols.py)."""

from __future__ import annotations

import shutil

import pytest

from attnwatch.kernels.cubin_symbols import CubinSymbolError, int_symbol
from attnwatch.kernels.nvcc import nvcc_compile

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

SOURCE = """
template <int D> struct Layout { static constexpr int TOTAL = D * 1000 + 7; };
#define ENTRY(NAME, D) \\
    extern "C" __device__ const int NAME##_bytes = Layout<D>::TOTAL; \\
    extern "C" __global__ void NAME(int* out) { out[0] = D; }
ENTRY(small, 64)
ENTRY(large, 128)
extern "C" __device__ int counter;
extern "C" __global__ void touch() { counter += 1; }
__device__ int counter;
"""


@pytest.fixture(scope="module")
def cubin(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cubin-symbols")
    source = folder / "values.cu"
    source.write_text(SOURCE)
    return nvcc_compile([source], output="cubin", arch="sm_90", cache_dir=folder / "cache").path


@needs_nvcc
def test_each_entry_reads_its_own_value(cubin):
    assert int_symbol(cubin, "small_bytes") == 64_007
    assert int_symbol(cubin, "large_bytes") == 128_007


@needs_nvcc
def test_a_missing_or_uninitialized_symbol_is_refused_by_name(cubin):
    with pytest.raises(CubinSymbolError, match=r"\.cubin: no symbol medium_bytes"):
        int_symbol(cubin, "medium_bytes")
    with pytest.raises(CubinSymbolError, match="counter is not an initialized 4-byte global"):
        int_symbol(cubin, "counter")


def test_a_file_that_is_not_a_cubin_is_refused_by_name(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a cubin")
    with pytest.raises(CubinSymbolError, match=r"notes.txt: not a 64-bit little-endian ELF cubin"):
        int_symbol(text, "x")
    truncated = tmp_path / "cut.cubin"
    truncated.write_bytes(b"\x7fELF\x02\x01\x01" + b"\0" * 40)
    with pytest.raises(CubinSymbolError, match=r"cut.cubin: unreadable ELF"):
        int_symbol(truncated, "x")
