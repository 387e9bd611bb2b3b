"""What this machine has, probed once per process: torch and its device, Triton, nvcc, CuPy,
the CUTLASS headers, flash-attn-4's CuTe package.

The probe runs once (`capabilities()` is cached) because CUDA initialisation, `nvcc --version`
and importing Triton cost seconds; the harness, the CLI, the variants and the tests all read
the same answer. Every missing piece carries a problem text that names it, so that a skip in
a run bundle says why it happened (`kernels.availability` turns these facts into a variant's
availability). A leaf: it imports nothing of the project at module level, so the variants can
ask it without importing the registry.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import site
import sys
from dataclasses import dataclass
from typing import Any

# Folders (os.pathsep-separated) of packages installed with `pip --target` beside the
# environment, e.g. flash-attn-4 on a GPU runner whose Python is not ours to install into.
EXTRA_SITE_ENV = "ATTNWATCH_EXTRA_SITE"
# Set (to "1") in a process that a profiler such as Nsight Compute runs (ci/ncu/profile.py): a
# variant then starts no profiler of its own (sdpa's dispatch record uses torch.profiler, whose
# CUPTI session beside ncu's cost 5-7 s on the first case under ncu, and ~0.07 s on each after).
UNDER_PROFILER_ENV = "ATTNWATCH_UNDER_PROFILER"
FA4_INSTALL_HINT = (
    "pip install 'attnwatch[fa4]' (docs/design.md, \"Kernel variants\"), or install it with "
    f"pip --target and name that folder in {EXTRA_SITE_ENV}"
)


@dataclass(frozen=True)
class Capabilities:
    """The facts about this machine that decide availability (one probe per process)."""

    torch_version: str | None
    torch_problem: str | None  # why torch is unusable, when it is
    cuda: bool
    cuda_problem: str | None
    device_name: str | None
    compute_capability: tuple[int, int] | None
    torch_cuda_version: str | None
    triton_version: str | None
    triton_problem: str | None
    triton_interpret: bool
    nvcc_path: str | None
    nvcc_release: str | None
    cupy_version: str | None
    cupy_problem: str | None

    @property
    def hopper(self) -> bool:
        return self.compute_capability is not None and self.compute_capability[0] == 9

    @property
    def triton_runnable(self) -> bool:
        return self.triton_version is not None and (self.cuda or self.triton_interpret)


def _probe_torch() -> dict[str, Any]:
    facts: dict[str, Any] = {
        "torch_version": None,
        "torch_problem": None,
        "cuda": False,
        "cuda_problem": None,
        "device_name": None,
        "compute_capability": None,
        "torch_cuda_version": None,
    }
    try:
        import torch
    except ImportError as exc:
        facts["torch_problem"] = f"torch is not importable ({exc})"
        facts["cuda_problem"] = "torch is not importable"
        return facts
    facts["torch_version"] = torch.__version__
    facts["torch_cuda_version"] = torch.version.cuda
    if torch.version.cuda is None:
        facts["cuda_problem"] = f"torch {torch.__version__} is a CPU-only build"
    elif not torch.cuda.is_available():
        facts["cuda_problem"] = f"torch {torch.__version__} sees no CUDA device"
    else:
        facts["cuda"] = True
        facts["device_name"] = torch.cuda.get_device_name()
        facts["compute_capability"] = tuple(torch.cuda.get_device_capability())
    return facts


def _probe_triton() -> tuple[str | None, str | None]:
    try:
        import triton
    except ImportError as exc:
        return None, f"triton is not importable ({exc})"
    return triton.__version__, None


def _probe_nvcc() -> tuple[str | None, str | None]:
    path = shutil.which("nvcc")
    if path is None:
        return None, None
    from .nvcc import NvccError, nvcc_version

    try:
        text = nvcc_version()
    except NvccError:
        return path, None
    match = re.search(r"release (\d+\.\d+)", text)
    return path, match.group(1) if match else None


def _probe_cupy(cuda: bool) -> tuple[str | None, str | None]:
    if not cuda:
        # Importing CuPy without a device succeeds but every call fails; do not pay for it.
        return None, "no CUDA device for CuPy to use"
    try:
        import cupy
    except ImportError as exc:
        return None, f"cupy is not importable ({exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        return cupy.__version__, f"cupy {cupy.__version__} cannot reach the CUDA runtime ({exc})"
    if count < 1:
        return cupy.__version__, f"cupy {cupy.__version__} sees no CUDA device"
    return cupy.__version__, None


@functools.lru_cache(maxsize=1)
def capabilities() -> Capabilities:
    """Probe the machine once per process (cached)."""
    torch_facts = _probe_torch()
    triton_version, triton_problem = _probe_triton()
    nvcc_path, nvcc_release = _probe_nvcc()
    cupy_version, cupy_problem = _probe_cupy(torch_facts["cuda"])
    return Capabilities(
        **torch_facts,
        triton_version=triton_version,
        triton_problem=triton_problem,
        triton_interpret=os.environ.get("TRITON_INTERPRET", "") == "1",
        nvcc_path=nvcc_path,
        nvcc_release=nvcc_release,
        cupy_version=cupy_version,
        cupy_problem=cupy_problem,
    )


@functools.lru_cache(maxsize=1)
def cutlass_headers_problem() -> str | None:
    """Why the CUTLASS headers are unusable, or None when found. Probed on first use only:
    just the CUTLASS variants need it."""
    from .cutlass.headers import CutlassHeadersError, cutlass_include_dir

    try:
        folder = cutlass_include_dir()
    except CutlassHeadersError as exc:
        return str(exc)
    return (
        None
        if folder is not None
        else "CUTLASS/CuTe headers not found (pip install nvidia-cutlass, or set CUTLASS_INCLUDE_DIR)"
    )


def extra_site_folders() -> list[str]:
    """The folders named in ATTNWATCH_EXTRA_SITE (os.pathsep-separated), in order; nothing added."""
    return [f for f in os.environ.get(EXTRA_SITE_ENV, "").split(os.pathsep) if f]


def extra_site_dirs() -> list[str]:
    """The folders named in ATTNWATCH_EXTRA_SITE, each added once with `site.addsitedir`.

    `site.addsitedir`, not a plain sys.path entry: it also runs the folder's `.pth` files,
    and the CuTe DSL wheels (nvidia-cutlass-dsl-libs-*) put their `cutlass` package on the
    path only through one, so with `pip --target` `import cutlass` fails without it. The
    variable reaches the measuring children through their environment, so each process adds
    the folders itself. A folder that does not exist is skipped (its import then fails with
    the package's name)."""
    folders = extra_site_folders()
    for folder in folders:
        if os.path.isdir(folder) and folder not in sys.path:
            site.addsitedir(folder)
    return folders


@functools.lru_cache(maxsize=1)
def flash_attn_cute_problem() -> str | None:
    """Why flash-attn-4's CuTe package (`flash_attn.cute`) is unusable, or None when it imports.
    Probed on first use only (importing it loads the CuTe DSL, seconds): just the fa4
    variants need it. The import's own error is kept, with any machine path in it reduced to
    a file name (kernels.record_paths): the reason ends up in bundles and on the dashboard."""
    folders = extra_site_dirs()
    try:
        import flash_attn.cute  # noqa: F401  (a literal import: ci/fingerprint resolves it as a library's)
    except Exception as exc:  # an ImportError, or the DSL failing to load its runtime library
        from .record_paths import portable_text

        said = portable_text(f"{type(exc).__name__}: {exc}", {f: f"<{EXTRA_SITE_ENV}>" for f in folders})
        return f"flash_attn.cute is not importable ({said}); {FA4_INSTALL_HINT}"
    return None
