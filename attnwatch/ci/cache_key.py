"""The toolchain key: one short digest of every tool whose output the caches hold.

A workflow saves and restores the cache root (kernels.compile_cache.cache_root: nvcc's binaries,
Triton's and CuPy's kernels, the float64 references, the ncu profiles) under a key that contains
this digest, so a new nvcc, Triton, torch, CuPy, driver or Python starts from an empty cache
instead of restoring the old one. Each cache still keys and checks its own entries; this key only keeps a saved root
from outliving its toolchain. A tool that is missing is recorded as missing (so installing it
changes the key too).

    attnwatch cache-key           # prints the digest, one line (for actions/cache's key)
    attnwatch cache-key --json    # the parts it was computed from, and the digest
"""

from __future__ import annotations

import hashlib
import json
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from typing import Callable

from attnwatch.kernels.compile_cache import cache_root

KEY_LENGTH = 16  # hex digits of the sha256: 64 bits, ample for telling toolchains apart
MISSING = "missing"
PROBE_TIMEOUT_S = 30
_CUPY_PREFIX = "cupy"  # cupy, cupy-cuda12x, cupy-cuda13x, ...


def _distribution_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return MISSING


def _cupy_version() -> str:
    found = sorted(
        f"{d.metadata['Name']}=={d.version}"
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").lower().startswith(_CUPY_PREFIX)
    )
    return ", ".join(dict.fromkeys(found)) or MISSING


def _command_output(command: list[str]) -> str:
    """The command's stripped stdout, or `missing` when it is not installed or fails."""
    exe = shutil.which(command[0])
    if exe is None:
        return MISSING
    try:
        done = subprocess.run([exe, *command[1:]], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return MISSING
    return done.stdout.strip() if done.returncode == 0 else MISSING


def _driver_version() -> str:
    return _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])


PARTS: dict[str, Callable[[], str]] = {
    "nvcc": lambda: _command_output(["nvcc", "--version"]),
    "driver": _driver_version,
    "torch": lambda: _distribution_version("torch"),  # its local version names its CUDA: 2.11.0+cu128
    "triton": lambda: _distribution_version("triton"),
    "cupy": _cupy_version,
    "python": lambda: (
        f"{platform.python_implementation()} {sys.version_info.major}.{sys.version_info.minor} {platform.machine()}"
    ),
}


def toolchain_parts() -> dict[str, str]:
    """Each tool's version text (`missing` where it is not installed)."""
    return {name: probe() for name, probe in PARTS.items()}


def toolchain_key(parts: dict[str, str] | None = None) -> str:
    """The first KEY_LENGTH hex digits of the sha256 of the parts."""
    parts = toolchain_parts() if parts is None else parts
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:KEY_LENGTH]


def describe() -> str:
    """The parts, the key and the cache root as JSON (`attnwatch cache-key --json`)."""
    parts = toolchain_parts()
    return json.dumps({"key": toolchain_key(parts), "root": str(cache_root()), "parts": parts}, indent=2)
