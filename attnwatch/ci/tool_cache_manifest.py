"""A manifest of Triton's cache folder: the sha256 of every file, written before a workflow saves
the cache root and checked after it restores it; an entry that does not match is removed.

Why: Triton trusts what its cache folder holds once the key matches. Measured with Triton 3.9
(tests/test_tool_cache_manifest.py): a truncated cubin is loaded as the kernel (the CUDA driver
then refuses the image, failing the case), and a metadata file that is not JSON fails the
compile outright; only a damaged `__grp__` index makes Triton compile again. A cache root that
travels through actions/cache can come back damaged, so it is checked here, as the nvcc and
reference caches check their own entries (kernels/compile_cache.py, kernels/reference_cache.py).

An entry is one folder of Triton's cache (one key: its IR, binary, metadata and `__grp__` index).
`verify` keeps an entry only when every file of it is recorded in the manifest with the sha256 it
has now, and its index names files of its own folder alone (Triton's index holds absolute paths:
restored elsewhere, or written by someone else, it could point at any file); everything else is
removed, whole, with a one-line note, and Triton builds it again. With no manifest (a root saved
before this check, or by a job that died first) nothing in the folder is trusted. The manifest
sits in the same folder as the entries: it catches damage in transit, not a writer who rewrites
both (the folder's owner and mode are what keep others out, docs/design.md "Threat model").
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from attnwatch.kernels.compile_cache import default_cache_dir, sha256_file

MANIFEST = "attnwatch-manifest.json"
SCHEMA = "attnwatch-tool-cache-manifest/1"
TRITON_TEMPORARY = ".tmp.pid_"  # Triton's files still being written (renamed into place when done)


def triton_folder(env: dict[str, str] | None = None) -> Path:
    """Triton's cache folder of a measuring child: `$TRITON_CACHE_DIR` when set (kept, as
    kernels.compile_cache.tool_cache_env keeps it), else `<cache root>/triton/<trust>`."""
    env = dict(os.environ) if env is None else env
    chosen = env.get("TRITON_CACHE_DIR", "").strip()
    return Path(chosen) if chosen else default_cache_dir("triton", env)


def _entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _files(entry: Path) -> list[Path]:
    return sorted(p for p in entry.rglob("*") if p.is_file() and TRITON_TEMPORARY not in p.name)


def seal(folder: Path) -> int:
    """Write the manifest of `folder` (every entry's files and their sha256); the number of files."""
    files = {str(p.relative_to(folder)): sha256_file(p) for entry in _entries(folder) for p in _files(entry)}
    if folder.is_dir():
        staged = folder / f".{MANIFEST}.tmp"
        staged.write_text(json.dumps({"schema": SCHEMA, "files": files}, indent=0, sort_keys=True))
        staged.replace(folder / MANIFEST)
    return len(files)


def _recorded(folder: Path) -> tuple[dict[str, str], str | None]:
    """The manifest's files, or {} and why there is none to trust."""
    path = folder / MANIFEST
    if not path.is_file():
        return {}, f"no {MANIFEST}"
    try:
        document = json.loads(path.read_text())
        files = document["files"] if document.get("schema") == SCHEMA else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        files = None
    if not isinstance(files, dict):
        return {}, f"{path}: not a {SCHEMA} manifest"
    return files, None


def _why_untrusted(folder: Path, entry: Path, recorded: dict[str, str]) -> str | None:
    for path in _files(entry):
        name = str(path.relative_to(folder))
        if name not in recorded:
            return f"{name} is not in the manifest"
        if sha256_file(path) != recorded[name]:
            return f"{name} does not match its recorded sha256"
        if path.name.startswith("__grp__"):
            try:
                children = json.loads(path.read_text()).get("child_paths") or {}
            except (ValueError, AttributeError):
                continue  # Triton ignores an index it cannot read and builds the entry again
            outside = [p for p in children.values() if Path(p).parent != entry]
            if outside:
                return f"{name} names a file outside its entry ({str(outside[0])[:120]})"
    return None


def verify(folder: Path) -> list[str]:
    """Remove every entry of `folder` the manifest does not vouch for (module doc); one note each
    (or one for the whole folder when there is no manifest to trust)."""
    entries = _entries(folder)
    if not entries:
        return []
    recorded, missing = _recorded(folder)
    if missing:
        for entry in entries:
            shutil.rmtree(entry, ignore_errors=True)
        return [f"Triton cache {folder}: {missing}: its {len(entries)} entries removed, to be built again"]
    notes = []
    for entry in entries:
        why = _why_untrusted(folder, entry, recorded)
        if why:
            shutil.rmtree(entry, ignore_errors=True)
            notes.append(f"Triton cache {folder}: entry {entry.name} removed, to be built again: {why}")
    return notes
