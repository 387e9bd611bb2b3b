"""The nvcc build pipeline: real compiles for sm_90 (no GPU needed), the cache, errors, ptxas parsing."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from attnwatch.kernels.nvcc import (
    NvccError,
    arch_flags,
    build_report,
    local_headers,
    nvcc_compile,
    parse_ptxas_verbose,
    source_hash,
)

PTXAS_LOGS = Path(__file__).parent / "data" / "ptxas"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

SPILLING_SOURCE = """
extern "C" __global__ void spill(const float* __restrict__ in, float* out, int n) {
  float a[64];
  #pragma unroll
  for (int i = 0; i < 64; i++) a[i] = in[i * n + threadIdx.x];
  float s = 0;
  #pragma unroll
  for (int j = 0; j < 64; j++) {
    #pragma unroll
    for (int i = 0; i < 64; i++) s += a[i] * a[(i + j) & 63];
  }
  out[threadIdx.x] = s;
}
"""

SMEM_SOURCE = """
#include "tile.cuh"
extern "C" __global__ void reverse(float* out) {
  __shared__ float tile[TILE];
  tile[threadIdx.x] = out[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[TILE - 1 - threadIdx.x];
}
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------- ptxas parsing on recorded logs


def test_parse_recorded_spilling_log():
    usage = parse_ptxas_verbose((PTXAS_LOGS / "nvcc13_sm90_spilling.log").read_text())
    assert set(usage) == {"spill"}
    spill = usage["spill"]
    assert (spill.arch, spill.registers, spill.shared_mem_bytes) == ("sm_90", 24, 0)
    assert (spill.spill_store_bytes, spill.spill_load_bytes, spill.stack_frame_bytes) == (12464, 27200, 12472)
    assert spill.barriers == 0


def test_parse_recorded_two_kernel_log_with_cmem():
    usage = parse_ptxas_verbose((PTXAS_LOGS / "nvcc13_sm80_cmem.log").read_text())
    assert set(usage) == {"simple", "spill"}
    assert usage["simple"].registers == 10
    assert usage["simple"].shared_mem_bytes == 512
    assert usage["simple"].cmem_bytes == {0: 360}
    assert usage["simple"].barriers == 1
    # A local array is stack, not spill: the parser must keep the two apart.
    assert usage["spill"].stack_frame_bytes == 1024
    assert usage["spill"].spill_store_bytes == 0
    assert usage["spill"].cmem_bytes == {0: 364}


def test_parse_empty_log_is_empty():
    assert parse_ptxas_verbose("") == {}
    assert parse_ptxas_verbose("nvcc warning : something unrelated\n") == {}


def test_arch_flags():
    assert arch_flags("sm_90") == ["-gencode=arch=compute_90,code=sm_90"]
    assert arch_flags("sm_90a") == ["-gencode=arch=compute_90a,code=sm_90a"]
    with pytest.raises(ValueError, match="sm_90"):
        arch_flags("hopper")


# ---------------------------------------------------------------- real compiles


@needs_nvcc
def test_compile_spilling_kernel_reports_spills(tmp_path):
    source = write(tmp_path / "spill.cu", SPILLING_SOURCE)
    result = nvcc_compile([source], arch="sm_90", flags=["-maxrregcount=24"], cache_dir=tmp_path / "cache")
    assert result.path.is_file() and result.path.suffix == ".cubin"
    assert not result.cached
    assert "-Xptxas" in result.command and "-lineinfo" in result.command
    report = build_report("spill_test", result, "spill")
    assert report.ok and report.target == "sm_90"
    assert report.registers_per_thread == 24
    assert report.spill_store_bytes > 0 and report.spill_load_bytes > 0
    assert report.compile_seconds > 0


@needs_nvcc
def test_second_build_is_a_cache_hit_and_a_change_rebuilds(tmp_path):
    (tmp_path / "tile.cuh").write_text("#define TILE 128\n")
    source = write(tmp_path / "reverse.cu", SMEM_SOURCE)
    cache = tmp_path / "cache"
    first = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    second = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    assert not first.cached and second.cached
    assert second.path == first.path and second.log == first.log
    assert build_report("r", second, "reverse").shared_mem_bytes == 512
    # Editing an included local header changes the key: a rebuild with the new size.
    (tmp_path / "tile.cuh").write_text("#define TILE 256\n")
    third = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    assert not third.cached and third.source_hash != first.source_hash
    assert build_report("r", third, "reverse").shared_mem_bytes == 1024
    # Flags are part of the key as well.
    fourth = nvcc_compile([source], arch="sm_90", flags=["-DUNUSED=1"], cache_dir=cache)
    assert not fourth.cached
    # No temporary build folders are left in the cache.
    assert not [p for p in cache.iterdir() if p.name.startswith(".build-")]


@needs_nvcc
def test_local_headers_are_found_transitively(tmp_path):
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "b.cuh").write_text("#define B 1\n")
    (tmp_path / "a.cuh").write_text('#include "b.cuh"\n')
    source = write(tmp_path / "k.cu", '#include "a.cuh"\n#include <cuda_fp16.h>\n')
    found = local_headers(source, [tmp_path / "inc"])
    assert [p.name for p in found] == ["a.cuh", "b.cuh"]


def test_key_does_not_depend_on_where_the_headers_live(tmp_path, monkeypatch):
    """A header folder that sorts before the source's folder, and one that sorts after it,
    hold the same headers: the key is the same (a GPU runner's carried copy is a cache hit)."""
    monkeypatch.setattr("attnwatch.kernels.nvcc.nvcc_version", lambda nvcc="nvcc": "nvcc stand-in")
    source = write(tmp_path / "m" / "k.cu", '#include "lib/x.h"\n#include "own.cuh"\n')
    write(tmp_path / "m" / "own.cuh", "#define OWN 1\n")
    keys = []
    for folder in ("a_before", "z_after"):
        write(tmp_path / folder / "lib" / "x.h", "#define X 1\n")
        keys.append(source_hash([source], output="cubin", arch="sm_90", flags=[], include_dirs=[tmp_path / folder]))
    assert keys[0] == keys[1]
    write(tmp_path / "z_after" / "lib" / "x.h", "#define X 2\n")
    assert source_hash([source], output="cubin", arch="sm_90", flags=[], include_dirs=[tmp_path / "z_after"]) != keys[0]


@needs_nvcc
def test_broken_source_raises_naming_the_file(tmp_path):
    source = write(tmp_path / "broken_kernel.cu", 'extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    with pytest.raises(NvccError) as info:
        nvcc_compile([source], arch="sm_90", cache_dir=tmp_path / "cache")
    message = str(info.value)
    assert "broken_kernel.cu" in message
    assert "undefined_name" in message  # the log tail carries the compiler's diagnosis
    assert not list((tmp_path / "cache").glob("*.cubin"))  # nothing half-built was cached


@needs_nvcc
def test_missing_kernel_name_gives_failed_report(tmp_path):
    source = write(tmp_path / "spill.cu", SPILLING_SOURCE)
    result = nvcc_compile([source], arch="sm_90", flags=["-maxrregcount=24"], cache_dir=tmp_path / "cache")
    report = build_report("v", result, "no_such_kernel")
    assert not report.ok and "no_such_kernel" in report.error and "spill" in report.error


def test_missing_source_and_bad_output(tmp_path):
    with pytest.raises(NvccError, match="nope.cu"):
        nvcc_compile([tmp_path / "nope.cu"], cache_dir=tmp_path)
    with pytest.raises(ValueError, match="output"):
        nvcc_compile([tmp_path / "nope.cu"], output="ptx", cache_dir=tmp_path)


SHARED_SOURCE = """
#include <cuda_runtime.h>
extern "C" __global__ void twice(int* x) { x[threadIdx.x] *= 2; }
extern "C" int attnwatch_answer(void) { return 42; }
"""


@needs_nvcc
def test_shared_library_builds_and_loads(tmp_path):
    import ctypes

    source = write(tmp_path / "lib.cu", SHARED_SOURCE)
    result = nvcc_compile([source], output="shared", arch="sm_90", cache_dir=tmp_path / "cache")
    assert result.path.suffix == ".so"
    assert build_report("lib", result, "twice").ok
    library = ctypes.CDLL(str(result.path))  # host code of the library runs without a GPU
    assert library.attnwatch_answer() == 42


CHILD_BUILD = """
import sys
from pathlib import Path
from attnwatch.kernels.nvcc import nvcc_compile
result = nvcc_compile([Path(sys.argv[1])], arch="sm_90", cache_dir=Path(sys.argv[2]))
print(result.path)
"""


@needs_nvcc
def test_parallel_builds_of_one_key_leave_one_valid_cubin(tmp_path):
    import subprocess
    import sys

    source = write(tmp_path / "spill.cu", SPILLING_SOURCE)
    cache = tmp_path / "cache"
    repo_root = Path(__file__).resolve().parent.parent
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD_BUILD, str(source), str(cache)],
            cwd=repo_root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [child.communicate(timeout=300) for child in children]
    assert [child.returncode for child in children] == [0, 0, 0], outputs
    paths = {out.strip() for out, _ in outputs}
    assert len(paths) == 1
    cubin = Path(paths.pop())
    assert sorted(p.suffix for p in cache.iterdir()) == [".cubin", ".json"]
    again = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    assert again.cached and again.path == cubin
    report = build_report("spill", again, "spill")  # the stored log is whole: ptxas block intact
    assert report.ok and report.registers_per_thread > 0 and report.stack_frame_bytes is not None


@needs_nvcc
def test_two_checkouts_building_one_source_at_once_keep_one_binary(tmp_path, monkeypatch):
    """A compare's two sides build an unchanged CUDA variant each in its own checkout, at once, into
    one cache. With -lineinfo the cubins differ in bytes (ptxas records the source file's time), so
    if the later build replaced the earlier one's entry, the two sides would fingerprint different
    binaries for identical code ("changed: binaries"). The later build keeps the stored one."""
    import hashlib
    import os

    from attnwatch.kernels import compile_cache

    first_source = write(tmp_path / "base" / "spill.cu", SPILLING_SOURCE)
    second_source = write(tmp_path / "head" / "spill.cu", SPILLING_SOURCE)
    os.utime(second_source, (1_600_000_000, 1_600_000_000))  # another checkout, another time
    cache = tmp_path / "cache"
    first = nvcc_compile([first_source], arch="sm_90", cache_dir=cache)
    stored = hashlib.sha256(first.path.read_bytes()).hexdigest()
    alone = nvcc_compile([second_source], arch="sm_90", cache_dir=tmp_path / "alone")
    assert alone.source_hash == first.source_hash
    assert hashlib.sha256(alone.path.read_bytes()).hexdigest() != stored  # the bytes a rebuild writes

    real_lookup = compile_cache.CompileCache.lookup
    looked: list[str] = []

    def started_before_the_first_stored(self, key, suffix):
        looked.append(key)
        return None if len(looked) == 1 else real_lookup(self, key, suffix)

    monkeypatch.setattr(compile_cache.CompileCache, "lookup", started_before_the_first_stored)
    second = nvcc_compile([second_source], arch="sm_90", cache_dir=cache)
    assert len(looked) == 2  # it compiled, then found the entry stored meanwhile
    assert second.path == first.path and hashlib.sha256(second.path.read_bytes()).hexdigest() == stored
    assert second.cached and second.log == first.log


def test_missing_nvcc_is_a_clear_error():
    from attnwatch.kernels.nvcc import nvcc_version

    with pytest.raises(NvccError, match="no-such-nvcc not found on PATH"):
        nvcc_version("no-such-nvcc")


def test_a_bound_launch_holds_the_tensors_it_points_into(monkeypatch):
    """A bound launch passes raw device pointers; it must keep their tensors alive, because the
    harness keeps only the launch. Checked without a GPU: the launch goes to a recording stand-in
    for the cupy function, the tensors are CPU tensors passed by address."""
    import contextlib
    import gc
    import weakref

    import numpy as np
    import torch

    import attnwatch.kernels.nvcc as nvcc

    calls = []
    kernel = object.__new__(nvcc.CubinKernel)
    kernel.name, kernel.dynamic_smem_bytes = "stand_in", 0
    kernel._function = lambda grid, block, args, shared_mem: calls.append(args)
    monkeypatch.setattr(
        nvcc.CubinKernel,
        "_convert",
        lambda self, index, arg: np.uintp(arg.data_ptr()) if isinstance(arg, torch.Tensor) else arg,
    )
    monkeypatch.setattr(nvcc, "_current_stream", contextlib.nullcontext)
    q, out = torch.ones(16), torch.zeros(16)
    addresses = (q.data_ptr(), out.data_ptr())
    alive = [weakref.ref(q), weakref.ref(out)]
    launch = kernel.bind((1, 1, 1), (32, 1, 1), (q, out, np.int32(16)))
    del q, out
    gc.collect()
    assert all(ref() is not None for ref in alive), "the launch let a tensor it points into be freed"
    launch()
    assert calls == [(np.uintp(addresses[0]), np.uintp(addresses[1]), np.int32(16))]
    del launch
    gc.collect()
    assert all(ref() is None for ref in alive), "the launch should hold its tensors no longer than it lives"
