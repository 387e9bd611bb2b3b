"""Tuned Triton configurations kept between processes: chosen once, reused by every later run.

A problem that choices.toml does not record is tuned in the process that first meets it
(kernels/triton/tuner.py). Tuned afresh in every process, a near-tie goes either way: on an H200
two fresh runs of the FlashAttention-paper grid put `triton_fa2/fa_s1024_d64/fp16/noncausal`
8.2% apart (m64_n64_w4_s3 in one, m128_n64_w8_s3 in the other), a step with no code change.
So the first process to tune a problem stores its pick here and every later process and run
on the same machine (or on runners that share the directory) reads it back: source "cached".

Where: `$ATTNWATCH_TRITON_CHOICES` if set, else `$ATTNWATCH_CACHE/triton-choices/<trust>`, else
`~/.cache/attnwatch/triton-choices/<trust>` (kernels/compile_cache.py's root and trust level, so a
pull request's job, `ATTNWATCH_TRUST=untrusted`, never writes a choice a trusted main run reads).
One JSON file per key, named by the key's sha256. The key is everything that decides which configuration wins:
the GPU model, the kernel's fingerprint (`kernel_fingerprint`: the sha256 of the kernel's source
and of the candidate table, so an edit of either tunes again), the Triton version, the exact
problem (B, H, S, D), dtype and causality.

Trust: an entry is used only when it parses, names this schema and version, repeats exactly
the key it is filed under, and names a configuration this candidate table lists and that runs
the problem exactly; anything else (a corrupt file, a foreign or stale entry) is ignored, never
trusted, and the problem is tuned again. Writes are atomic and the first writer wins (a hard
link of a complete temporary file): two processes tuning the same problem at once store one
pick, and the loser reads it back and runs it too.

Re-tuning is explicit: `ATTNWATCH_TRITON_RETUNE=1` (`attnwatch run --retune-triton`) tunes every
problem again and replaces its entry; its results say "tuned", so the history records the new
choice as a configuration change.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Mapping

from .configs import CONFIG_FILE, ConfigTable, runs_exactly

DIR_ENV = "ATTNWATCH_TRITON_CHOICES"
RETUNE_ENV = "ATTNWATCH_TRITON_RETUNE"
SCHEMA = "attnwatch.triton_choice"
VERSION = 1
KERNEL_SOURCE = Path(__file__).resolve().with_name("fa2_fwd.py")


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """The shared directory (module doc, "Where")."""
    env = os.environ if env is None else env
    explicit = env.get(DIR_ENV, "").strip()
    if explicit:
        return Path(explicit)
    from ..compile_cache import default_cache_dir

    return default_cache_dir("triton-choices", env)


def retune_requested(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get(RETUNE_ENV, "") == "1"


@lru_cache(maxsize=None)
def kernel_fingerprint(source: Path = KERNEL_SOURCE, configs: Path = CONFIG_FILE) -> str:
    """sha256 over the kernel's source and the candidate table (what a tuning chose among)."""
    digest = hashlib.sha256()
    for path in (source, configs):
        digest.update(path.name.encode() + b"\0" + Path(path).read_bytes() + b"\0")
    return digest.hexdigest()


def triton_version() -> str | None:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return None


def choice_key(
    gpu: str, problem: str, dtype: str, causal: bool, *, fingerprint: str | None = None, triton: str | None = None
) -> dict:
    """The key of one choice (module doc): plain data, stored in the entry it names."""
    return {
        "gpu": gpu,
        "kernel": fingerprint or kernel_fingerprint(),
        "triton": triton or triton_version(),
        "problem": problem,
        "dtype": dtype,
        "causal": bool(causal),
    }


def _path(directory: Path, key: dict) -> Path:
    name = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    return directory / f"{name}.json"


def load(key: dict, table: ConfigTable, seq_len: int, directory: Path | None = None) -> dict | None:
    """The stored entry for `key` when it can be trusted (module doc, "Trust"); else None."""
    path = _path(directory or cache_dir(), key)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(entry, dict) or entry.get("schema") != SCHEMA or entry.get("version") != VERSION:
        return None
    if entry.get("key") != key:
        return None
    name = entry.get("config")
    config = table.configs.get(name) if isinstance(name, str) else None
    if config is None or not runs_exactly(config, key["causal"], seq_len):
        return None
    return entry


def _entry(key: dict, config: str, trials: list[dict], **extra) -> dict:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "key": key,
        "config": config,
        "trials": trials,
        "chosen_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pid": os.getpid(),
        **extra,
    }


def _complete_file(directory: Path, path: Path, entry: dict) -> Path:
    """The entry written in full under a hidden temporary name beside `path`."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{path.name}.{secrets.token_hex(4)}.tmp"
    tmp.write_text(json.dumps(entry, indent=1), encoding="utf-8")
    return tmp


def store(key: dict, config: str, trials: list[dict], directory: Path | None = None) -> dict:
    """Store this process's pick unless another process stored one first; returns the entry that
    stands (ours, or the first writer's when it can be read), so every process runs the same."""
    directory = directory or cache_dir()
    entry = _entry(key, config, trials)
    path = _path(directory, key)
    try:
        tmp = _complete_file(directory, path, entry)
        try:
            os.link(tmp, path)  # the first writer wins; a reader never sees half a file
        except FileExistsError:
            try:
                first = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                first = None
            if isinstance(first, dict) and first.get("key") == key and isinstance(first.get("config"), str):
                return first
            os.replace(tmp, path)  # what stood there was unreadable or foreign: ours replaces it
            return entry
        except OSError:  # a file system without hard links: last writer wins, still atomically
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    except OSError:
        return entry  # an unwritable cache costs the sharing, never the run
    return entry


def replace(key: dict, config: str, trials: list[dict], directory: Path | None = None) -> dict:
    """An explicit re-tune's pick: replaces the stored entry (atomically)."""
    directory = directory or cache_dir()
    entry = _entry(key, config, trials, retuned=True)
    try:
        path = _path(directory, key)
        os.replace(_complete_file(directory, path, entry), path)
    except OSError:
        pass
    return entry
