"""Triton's cache folder checked against its manifest (ci/tool_cache_manifest.py, `attnwatch
cache-key --seal/--verify`): a real Triton compile for sm_90 on this CPU fills the folder; a
damaged entry fails the next compile (a metadata file that is not JSON) or is taken as the
kernel (a truncated cubin) unless --verify removes it first, and an intact entry is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from attnwatch.ci import tool_cache_manifest as manifest

ROOT = Path(__file__).resolve().parent.parent

COMPILE = textwrap.dedent(
    """
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    @triton.jit
    def copy(x, y, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y + i, tl.load(x + i, mask=i < n), mask=i < n)

    signature = {"x": "*fp32", "y": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    kernel = triton.compile(ASTSource(copy, signature, {"BLOCK": 128}), target=GPUTarget("cuda", 90, 32))
    print(len(kernel.asm["cubin"]))
    """
)


def _env(root: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CACHE_DIR"}
    return {**env, "ATTNWATCH_CACHE": str(root), "ATTNWATCH_TRUST": "untrusted", "PYTHONPATH": str(ROOT)}


def _compile(root: Path) -> subprocess.CompletedProcess:
    folder = manifest.triton_folder(_env(root))
    env = {**_env(root), "TRITON_CACHE_DIR": str(folder), "TRITON_DEFAULT_FP_FUSION": "1"}
    script = root.parent / "compile_copy.py"  # Triton reads a kernel's source from its file
    script.write_text(COMPILE)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)


def _cache_key(root: Path, flag: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "cache-key", flag],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(root),
    )
    assert done.returncode == 0, done.stderr[-1000:]
    return done.stdout


def _entry_file(root: Path, suffix: str) -> Path:
    folder = manifest.triton_folder(_env(root))
    found = [p for p in folder.rglob(f"copy{suffix}")]
    assert len(found) == 1, found
    return found[0]


@pytest.mark.slow  # five Triton compiles in child processes
def test_a_damaged_triton_entry_is_removed_before_triton_trusts_it(tmp_path):
    pytest.importorskip("triton")
    root = tmp_path / "root"
    first = _compile(root)
    if first.returncode != 0:
        pytest.skip(f"Triton cannot compile for sm_90 here: {first.stderr.strip().splitlines()[-1:]}")
    cubin_bytes = int(first.stdout.split()[-1])
    assert "manifest of" in _cache_key(root, "--seal")

    # Triton itself: metadata that is not JSON fails the compile; a truncated cubin is the kernel it returns
    metadata = _entry_file(root, ".json")
    good_metadata = metadata.read_bytes()
    metadata.write_text("not json {")
    assert _compile(root).returncode != 0
    metadata.write_bytes(good_metadata)
    cubin = _entry_file(root, ".cubin")
    cubin.write_bytes(cubin.read_bytes()[:100])
    assert _compile(root).stdout.split()[-1] == "100"

    # --verify removes the damaged entry (one line naming it); the next compile builds it whole again
    said = _cache_key(root, "--verify")
    assert "copy.cubin does not match its recorded sha256" in said and len(said.strip().splitlines()) == 1
    again = _compile(root)
    assert again.returncode == 0 and int(again.stdout.split()[-1]) == cubin_bytes

    # an intact entry is kept: sealed, verified, still there (the same file, not rebuilt)
    _cache_key(root, "--seal")
    kept = _entry_file(root, ".cubin")
    stamp = kept.stat().st_mtime_ns
    assert "every entry matches its manifest" in _cache_key(root, "--verify")
    assert kept.is_file() and kept.stat().st_mtime_ns == stamp


def _fake_entry(folder: Path, name: str, children: dict[str, str] | None = None) -> Path:
    entry = folder / name
    entry.mkdir(parents=True)
    (entry / "k.cubin").write_bytes(b"\x7fELF" + name.encode())
    paths = children if children is not None else {"k.cubin": str(entry / "k.cubin")}
    (entry / "__grp__k.json").write_text(json.dumps({"child_paths": paths}))
    return entry


def test_no_manifest_trusts_nothing_and_an_index_pointing_outside_is_removed(tmp_path):
    folder = tmp_path / "triton"
    kept = _fake_entry(folder, "AAA")
    assert manifest.verify(folder) == [
        f"Triton cache {folder}: no {manifest.MANIFEST}: its 1 entries removed, to be built again"
    ]
    assert not kept.exists()

    kept = _fake_entry(folder, "AAA")
    outside = _fake_entry(folder, "BBB", {"k.cubin": str(tmp_path / "elsewhere" / "k.cubin")})
    assert manifest.seal(folder) == 4
    late = _fake_entry(folder, "CCC")  # written after the manifest
    notes = manifest.verify(folder)
    assert kept.is_dir() and not outside.exists() and not late.exists()
    assert len(notes) == 2 and "BBB removed" in notes[0] and "names a file outside its entry" in notes[0]
    assert "CCC/__grp__k.json is not in the manifest" in notes[1]

    (folder / manifest.MANIFEST).write_text("{}")  # not a manifest of ours
    assert "not a attnwatch-tool-cache-manifest/1 manifest" in manifest.verify(folder)[0] and not kept.exists()
    assert manifest.verify(tmp_path / "absent") == []
