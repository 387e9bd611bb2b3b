"""The compile cache's trust boundary (kernels.compile_cache, used by kernels.nvcc): one directory
per trust level, refused when another user could write it, and every hit verified against the
sha256 recorded at build time, so a binary planted under an unchanged kernel's key is never
loaded (issue: "PR code reaches the trusted state")."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from attnwatch.kernels.compile_cache import (
    CacheEntryWarning,
    CompileCache,
    UnsafeCacheError,
    default_cache_dir,
    sha256_file,
    trust_level,
)
from attnwatch.kernels.nvcc import NvccError, nvcc_compile

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")

KERNEL = 'extern "C" __global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }\n'
KEY = "ab" * 32


def _staged(cache: CompileCache, data: bytes, key: str = KEY) -> Path:
    with cache.staging() as scratch:
        staged = scratch / "out.cubin"
        staged.write_bytes(data)
        return cache.store(key, ".cubin", staged, {"log": "built", "compile_seconds": 1.0, "command": ["nvcc"]})


# ---------------------------------------------------------------- trust levels and directories


def test_trust_level_names_the_directory_and_unknown_values_are_refused(tmp_path):
    assert trust_level({}) == "local"
    env = {"ATTNWATCH_CACHE": str(tmp_path)}
    dirs = {level: default_cache_dir("nvcc", {**env, "ATTNWATCH_TRUST": level}) for level in ("trusted", "untrusted")}
    assert dirs == {"trusted": tmp_path / "nvcc" / "trusted", "untrusted": tmp_path / "nvcc" / "untrusted"}
    assert default_cache_dir("nvcc", env) == tmp_path / "nvcc" / "local"
    with pytest.raises(ValueError, match="ATTNWATCH_TRUST='main'"):
        trust_level({"ATTNWATCH_TRUST": "main"})


@needs_nvcc
def test_an_untrusted_build_is_never_a_hit_for_a_trusted_job(tmp_path, monkeypatch):
    """The PR job and the main job build the same source; each gets its own entry."""
    source = tmp_path / "twice.cu"
    source.write_text(KERNEL)
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ATTNWATCH_TRUST", "untrusted")
    pr_build = nvcc_compile([source], arch="sm_90")
    monkeypatch.setenv("ATTNWATCH_TRUST", "trusted")
    main_build = nvcc_compile([source], arch="sm_90")
    assert not pr_build.cached and not main_build.cached
    assert pr_build.path.parent == tmp_path / "cache" / "nvcc" / "untrusted"
    assert main_build.path.parent == tmp_path / "cache" / "nvcc" / "trusted"
    assert nvcc_compile([source], arch="sm_90").cached  # and a trusted rebuild is a hit in its own directory


# ---------------------------------------------------------------- verification before loading


@needs_nvcc
def test_a_binary_planted_under_an_unchanged_key_is_rebuilt_not_loaded(tmp_path):
    source = tmp_path / "twice.cu"
    source.write_text(KERNEL)
    cache = tmp_path / "cache"
    first = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    genuine = first.path.read_bytes()
    first.path.write_bytes(b"\x7fELF planted by a pull request")  # same key, same metadata, other bytes
    with pytest.warns(CacheEntryWarning, match="sha256"):
        second = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    assert not second.cached
    assert second.path.read_bytes() == genuine
    assert json.loads((cache / f"{first.source_hash}.json").read_text())["sha256"] == sha256_file(second.path)
    assert nvcc_compile([source], arch="sm_90", cache_dir=cache).cached  # verified hits still hit


@needs_nvcc
def test_an_entry_without_a_recorded_digest_is_rebuilt(tmp_path):
    """Entries written before digests were recorded (or planted without one) are not trusted."""
    source = tmp_path / "twice.cu"
    source.write_text(KERNEL)
    cache = tmp_path / "cache"
    first = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    meta_path = cache / f"{first.source_hash}.json"
    meta = json.loads(meta_path.read_text())
    del meta["sha256"]
    meta_path.write_text(json.dumps(meta))
    first.path.write_bytes(b"old or planted")
    again = nvcc_compile([source], arch="sm_90", cache_dir=cache)
    assert not again.cached and again.path.read_bytes() != b"old or planted"


def test_verified_entry_is_returned_with_its_metadata(tmp_path):
    cache = CompileCache(tmp_path / "c")
    binary = _staged(cache, b"cubin bytes")
    hit = cache.lookup(KEY, ".cubin")
    assert hit is not None and hit.binary == binary and hit.meta["log"] == "built"
    assert hit.meta["sha256"] == sha256_file(binary)
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".build-")]


# ---------------------------------------------------------------- who may write the cache


def test_a_cache_directory_others_can_write_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    for mode, who in ((0o775, "its group"), (0o757, "others")):
        os.chmod(shared, mode)
        with pytest.raises(UnsafeCacheError, match=who) as info:
            CompileCache(shared)
        assert str(shared) in str(info.value)
    source = tmp_path / "k.cu"
    source.write_text(KERNEL)
    with pytest.raises(NvccError, match="another user could plant binaries"):
        nvcc_compile([source], arch="sm_90", cache_dir=shared)  # refused before nvcc is even asked


def test_a_symlinked_cache_directory_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(UnsafeCacheError, match="symlink"):
        CompileCache(tmp_path / "link")


def test_a_new_cache_directory_is_private(tmp_path):
    old = os.umask(0o002)  # a umask that would otherwise make it group-writable
    try:
        cache = CompileCache(tmp_path / "fresh" / "nvcc" / "trusted")
    finally:
        os.umask(old)
    assert cache.root.stat().st_mode & 0o077 == 0


def test_an_entry_file_others_can_write_is_ignored(tmp_path):
    cache = CompileCache(tmp_path / "c")
    binary = _staged(cache, b"cubin bytes")
    os.chmod(binary, 0o666)
    with pytest.warns(CacheEntryWarning, match="writable by its group and others"):
        assert cache.lookup(KEY, ".cubin") is None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="creating another user's file needs root")
def test_an_entry_owned_by_another_user_is_ignored(tmp_path):
    cache = CompileCache(tmp_path / "c")
    binary = _staged(cache, b"cubin bytes")
    os.chown(binary, 54321, 54321)
    with pytest.warns(CacheEntryWarning, match="owned by uid 54321"):
        assert cache.lookup(KEY, ".cubin") is None
