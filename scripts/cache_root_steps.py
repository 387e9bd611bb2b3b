"""The cache root's steps of a workflow, as scripts/verdict_check.py performs them on a GPU: the
root sealed and packed after a job (`attnwatch cache-key --seal`, then a tar, as actions/cache saves
it), emptied and unpacked before the next one and checked (`cache-key --verify`), its size by
folder, and the cache key the workflow would use."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import time
from pathlib import Path

from gpu_compare import run_logged


def du_by_folder(root: Path) -> dict[str, float]:
    """MiB per `<kind>/<trust>` folder of a cache root (files' apparent sizes), and the total."""
    sizes: dict[str, float] = {}
    if not root.is_dir():
        return sizes
    for kind in sorted(p for p in root.iterdir() if p.is_dir()):
        for folder in sorted(p for p in kind.iterdir() if p.is_dir()) or [kind]:
            total = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink())
            sizes[str(folder.relative_to(root))] = round(total / 2**20, 2)
    sizes["total"] = round(sum(sizes.values()), 2)
    return sizes


def cache_key_step(flag: str, env: dict, log_path: Path) -> tuple[float, list[str]]:
    """`attnwatch cache-key --seal` or `--verify` as the workflow runs it: (seconds, what it said)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    rc, wall = run_logged([sys.executable, "-m", "attnwatch", "cache-key", flag], env, 120.0, log_path)
    said = log_path.read_text(errors="replace").strip().splitlines()
    return round(wall, 1), (said if rc == 0 else [f"rc {rc}", *said[-3:]])


def pack(root: Path, tar_path: Path, env: dict, out: Path) -> dict:
    """The root sealed and packed, as the workflow's save step has it (an uncompressed tar)."""
    seal_s, sealed = cache_key_step("--seal", env, out / "seal.log")
    started = time.monotonic()
    with tarfile.open(tar_path, "w") as tar:
        tar.add(root, arcname=".")
    pack_s = round(time.monotonic() - started, 1)
    return {"seal_s": seal_s, "sealed": sealed, "pack_s": pack_s, "tar_mib": round(tar_path.stat().st_size / 2**20, 2)}


def unpack(tar_path: Path, root: Path, env: dict, out: Path) -> dict:
    """The root emptied and unpacked at its path, then checked, as the workflow's restore step has it."""
    shutil.rmtree(root, ignore_errors=True)
    started = time.monotonic()
    root.mkdir(mode=0o700, parents=True)
    with tarfile.open(tar_path, "r") as tar:
        tar.extractall(root, filter="data")
    unpack_s = round(time.monotonic() - started, 1)
    verify_s, verified = cache_key_step("--verify", env, out / "verify.log")
    return {"unpack_s": unpack_s, "verify_s": verify_s, "verified": verified}


def cache_step(roots: dict[str, Path], out: Path, env: dict) -> dict:
    key_log = out / "cache_key.log"
    rc, _ = run_logged([sys.executable, "-m", "attnwatch", "cache-key", "--json"], env, 60.0, key_log)
    text = key_log.read_text(errors="replace")
    try:
        key = json.loads(text[text.index("{") :])
    except ValueError:
        key = {"rc": rc, "error": text[-300:]}
    return {"cache_key": key, "roots_mib": {name: du_by_folder(root) for name, root in roots.items()}}


# -- the call -----------------------------------------------------------------------------------
