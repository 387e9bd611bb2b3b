"""CUTLASS 3-kernel variants on a CPU host: configuration data, header lookup, and a real
nvcc build for sm_90a of one tile configuration (the CUTLASS GEMMs and our softmax), so a
CUTLASS build break fails CI even without a GPU."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.kernels.cases import Case
from attnwatch.kernels.cutlass import configs
from attnwatch.kernels.cutlass.build import ARCH, build_and_report, build_library
from attnwatch.kernels.cutlass.configs import TileConfigError
from attnwatch.kernels.cutlass.headers import CutlassHeadersError, cutlass_include_dir, cutlass_version
from attnwatch.kernels.cutlass.library import Attention3kError, Attention3kLibrary
from attnwatch.kernels.registry import all_variants, get
from attnwatch.kernels.shapes import SHAPES, Shape, adhoc_shape, shape_set

REPO_ROOT = Path(__file__).resolve().parent.parent
REQUIRED_VARIANTS = (
    "cutlass_3k_64x128x64",
    "cutlass_3k_64x64x32",
    "cutlass_3k_128x128x64",
    "cutlass_3k_128x256x64",
    "cutlass_3k_64x128x64_persistent",
    "cutlass_3k_64x128x64_cluster2x1",
)


def _config(name: str) -> configs.TileConfig:
    tile_configs, _ = configs.default()
    return next(c for c in tile_configs if c.name == name)


def test_every_swept_tile_and_schedule_is_a_registered_variant():
    names = {v.name for v in all_variants() if v.family == "cutlass"}
    assert set(REQUIRED_VARIANTS) <= names
    for name in REQUIRED_VARIANTS:
        variant = get(name)
        assert variant.needs == {"cuda", "hopper", "nvcc", "cutlass"}
        assert variant.build is not None
    assert _config("64x128x64_persistent").schedule == "pingpong"
    assert _config("64x128x64_cluster2x1").cluster_m == 2
    assert _config("128x256x64").schedule == "cooperative"


def test_defines_select_the_configuration():
    assert _config("64x64x32").defines() == [
        "-DATTN3K_TILE_M=64",
        "-DATTN3K_TILE_N=64",
        "-DATTN3K_TILE_K=32",
        "-DATTN3K_CLUSTER_M=1",
        "-DATTN3K_SCHEDULE=1",
    ]


@pytest.mark.parametrize(
    "entry, field",
    [
        ('name = "a"\ntile = [64, 128]\ncluster_m = 1\nschedule = "pingpong"\nreason = "r"', "tile"),
        ('name = "a"\ntile = [64, 128, 64]\ncluster_m = 3\nschedule = "pingpong"\nreason = "r"', "cluster_m"),
        ('name = "a"\ntile = [64, 128, 64]\ncluster_m = 1\nschedule = "fast"\nreason = "r"', "schedule"),
        ('name = "a"\ntile = [64, 128, 64]\ncluster_m = 1\nschedule = "cooperative"\nreason = "r"', "schedule"),
        ('name = "a"\ntile = [64, 128, 64]\ncluster_m = 1\nschedule = "pingpong"\nreason = " "', "reason"),
        ('name = "A-1"\ntile = [64, 128, 64]\ncluster_m = 1\nschedule = "pingpong"\nreason = "r"', "name"),
    ],
)
def test_malformed_tile_file_names_file_and_field(tmp_path, entry, field):
    path = tmp_path / "tiles.toml"
    limits = (REPO_ROOT / "kernels/cutlass/tiles.toml").read_text().split("[limits]")[1]
    path.write_text(f"[[config]]\n{entry}\n\n[limits]{limits}")
    with pytest.raises(TileConfigError) as info:
        configs.load(path)
    assert str(path) in str(info.value) and f"config[0].{field}" in str(info.value)


def test_limits_need_reasons(tmp_path):
    text = (REPO_ROOT / "kernels/cutlass/tiles.toml").read_text()
    path = tmp_path / "tiles.toml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.startswith("memory_share_reason")))
    with pytest.raises(TileConfigError, match="limits.memory_share_reason"):
        configs.load(path)


def test_padded_leading_dimension_keeps_tma_rows_16_byte_aligned():
    assert [configs.padded_ld(s) for s in (1, 8, 777, 1024)] == [8, 8, 784, 1024]


def test_unsupported_cases_say_why():
    variant = get("cutlass_3k_64x128x64")
    assert "fp16 and bf16" in variant.unsupported(Case(variant.name, SHAPES["h100_small"], "fp32", False))
    odd_d = Case(variant.name, adhoc_shape(1, 2, 128, 60), "fp16", False)
    assert "multiple of 8" in variant.unsupported(odd_d)
    assert variant.unsupported(Case(variant.name, adhoc_shape(1, 2, 777, 64), "bf16", True)) is None


def test_explicit_header_folder_must_hold_cutlass(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(tmp_path))
    with pytest.raises(CutlassHeadersError, match="cutlass/version.h"):
        cutlass_include_dir()


def test_installed_headers_are_found_with_their_version():
    include = cutlass_include_dir()
    assert include is not None, "CI installs nvidia-cutlass through the dev extra"
    major, minor, _ = (int(x) for x in cutlass_version(include).split("."))
    assert (major, minor) >= (3, 0)  # the CollectiveBuilder / Sm90 API


@pytest.fixture(scope="session")
def nvcc_cache(tmp_path_factory) -> Path:
    """A fresh build cache laid out as $ATTNWATCH_CACHE/nvcc/local (the trust level of a developer's
    machine, kernels.compile_cache), so variant.build() can use it too."""
    root = tmp_path_factory.mktemp("attnwatch-cache")
    (root / "nvcc" / "local").mkdir(parents=True)
    return root / "nvcc" / "local"


@pytest.fixture(scope="session")
def best_tile_report(nvcc_cache):
    """One real sm_90a build of the seeds' best tile, into a fresh cache."""
    return build_and_report(_config("64x128x64"), cache_dir=nvcc_cache)


@pytest.mark.slow
def test_best_tile_compiles_for_sm90a_with_a_parsed_report(best_tile_report):
    report = best_tile_report
    assert report.ok, report.error
    assert report.target == ARCH and not report.cached
    assert report.compile_seconds > 0
    kernels = {k["kernel"]: k for k in report.config["kernels"]}
    # two CUTLASS GEMMs and our softmax, for each dtype
    assert set(kernels) == {
        "softmax[fp16]",
        "softmax[bf16]",
        "gemm[fp16]#1",
        "gemm[fp16]#2",
        "gemm[bf16]#1",
        "gemm[bf16]#2",
    }
    assert all(k["registers"] > 0 for k in kernels.values())
    assert report.spill_store_bytes == 0 and report.spill_load_bytes == 0
    assert report.registers_per_thread == max(k["registers"] for k in kernels.values())
    assert report.config["tile_mnk"] == [64, 128, 64]
    assert report.config["schedule"] == "KernelTmaWarpSpecialized"
    assert report.config["cutlass_version"] == cutlass_version(cutlass_include_dir())


@pytest.mark.slow
def test_build_record_names_the_headers_by_version_not_by_folder(best_tile_report):
    """The record says which CUTLASS, not where this machine keeps it (a wheel's site-packages)."""
    tokens = best_tile_report.config["command"].split()
    assert f"-I<cutlass-{cutlass_version(cutlass_include_dir())}>" in tokens
    assert "kernels/cutlass/attention_3k.cu" in tokens
    record = json.dumps(dataclasses.asdict(best_tile_report))
    assert str(cutlass_include_dir()) not in record and str(REPO_ROOT) not in record


@pytest.mark.slow
def test_library_reports_gemm_pipeline_facts_without_a_gpu(best_tile_report):
    gemms = best_tile_report.config["gemms"]
    assert set(gemms) == {"qk_fp16", "pv_fp16", "qk_bf16", "pv_bf16"}
    for facts in gemms.values():
        # a 64x128x64 fp16 stage is (64 + 128) * 64 * 2 bytes = 24 KiB; TMA pipelines need >= 2
        assert facts["stages"] >= 2
        assert facts["smem_bytes"] >= facts["stages"] * 24 * 1024
        assert facts["threads"] == 256  # producer warpgroup + one consumer warpgroup
    assert best_tile_report.shared_mem_bytes == max(f["smem_bytes"] for f in gemms.values())


@pytest.mark.slow
def test_second_build_is_a_cache_hit(best_tile_report, nvcc_cache):
    again = build_library(_config("64x128x64"), cache_dir=nvcc_cache)
    assert again.cached and again.source_hash == best_tile_report.source_hash
    assert Attention3kLibrary(again.path).cutlass_version() // 100 >= 3


@pytest.mark.slow
def test_reachable_header_copy_builds_the_same_key(tmp_path, monkeypatch, best_tile_report, nvcc_cache):
    """What a GPU runner without network gets (the reachable headers only) builds the same cache key."""
    dest = tmp_path / "include"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts/fetch_cutlass_headers.py"),
            "--from-installed",
            "--only-reachable",
            "--dest",
            str(dest),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert (dest / "cutlass/version.h").is_file() and (dest / "cute/tensor.hpp").is_file()
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(dest))
    again = build_library(_config("64x128x64"), cache_dir=nvcc_cache)
    assert again.cached and again.source_hash == best_tile_report.source_hash


@pytest.mark.slow
def test_broken_headers_fail_the_build_with_the_log(tmp_path, monkeypatch, nvcc_cache):
    include = cutlass_include_dir()
    broken = tmp_path / "include"
    (broken / "cutlass").mkdir(parents=True)
    (broken / "cute").mkdir()
    (broken / "cutlass/version.h").write_text((include / "cutlass/version.h").read_text())
    (broken / "cute/tensor.hpp").write_text("#error this CUTLASS copy is broken\n")
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(broken))
    report = build_and_report(_config("64x64x32"), cache_dir=nvcc_cache)
    assert not report.ok
    assert "attention_3k.cu" in report.error and "nvcc exited" in report.error
    assert "this CUTLASS copy is broken" in report.log_tail
    assert "<cutlass-" in report.log_tail and str(tmp_path) not in report.log_tail + report.error


@pytest.mark.slow
def test_cutlass_accepts_every_main_shape_and_odd_s_through_padding(best_tile_report, nvcc_cache):
    """CUTLASS's own can_implement (host-only) on the problems the variant will hand it: an odd S
    runs its GEMMs over ld = roundup(S, 8) keys, since CUTLASS's TMA GEMMs need every contiguous
    extent to be a multiple of 8 elements; a key count that is not is refused with the reason."""
    library = Attention3kLibrary(build_library(_config("64x128x64"), cache_dir=nvcc_cache).path)
    for shape in [*shape_set("main", Shape), adhoc_shape(2, 3, 777, 64), adhoc_shape(1, 2, 777, 128)]:
        ld = configs.padded_ld(shape.seq_len)
        for dtype in ("fp16", "bf16"):
            library.can_implement(dtype, shape.batch * shape.heads, shape.seq_len, ld, ld, shape.head_dim)
    with pytest.raises(Attention3kError, match="kv_len must be .* multiple of 8"):
        library.can_implement("fp16", 6, 777, 784, 777, 64)
    with pytest.raises(Attention3kError, match="head_dim must be a multiple of 8"):
        library.can_implement("bf16", 6, 512, 512, 512, 60)


@pytest.mark.slow
def test_variant_build_reports_from_the_cache(best_tile_report, nvcc_cache, monkeypatch):
    """The registry's build(): the first call compiles every configuration (here only the one
    already built, so a cache hit), then reports its own."""
    from attnwatch.kernels.variants import cutlass_3k

    monkeypatch.setenv("ATTNWATCH_CACHE", str(nvcc_cache.parent.parent))
    monkeypatch.setenv("ATTNWATCH_TRUST", "local")
    only = ((_config("64x128x64"),), configs.load()[1])
    monkeypatch.setattr(configs, "default", lambda: only)
    cutlass_3k._prebuild_all.cache_clear()
    try:
        report = get("cutlass_3k_64x128x64").build()
    finally:
        cutlass_3k._prebuild_all.cache_clear()
    assert report.ok and report.cached
    assert report.source_hash == best_tile_report.source_hash
    assert report.compile_seconds == best_tile_report.compile_seconds  # the original compile's time
