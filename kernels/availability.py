"""What this machine can run, decided once per process, and why a variant is skipped.

A variant declares what it `needs` (kernels.registry): any of

* ``cuda``   a CUDA device visible to torch;
* ``hopper`` that device is compute capability 9.x (H100/H200: wgmma, TMA);
* ``triton`` Triton importable and something to run it on: a CUDA device, or the Triton
  interpreter (``TRITON_INTERPRET=1``: Triton kernels execute on CPU tensors, slowly, so
  only small shapes are practical);
* ``nvcc``   the CUDA compiler on PATH;
* ``cupy``   CuPy importable and seeing a CUDA device (launches nvcc-built cubins);
* ``cutlass`` the CUTLASS/CuTe C++ headers found (kernels.cutlass.headers says where it looks).

Every variant also needs torch (all of them take and return torch tensors). The probe runs
once (`capabilities()` is cached) because CUDA initialisation, `nvcc --version` and
importing Triton cost seconds; the harness, the CLI and the tests all read the same answer.
Every `False` carries a reason that names the missing piece, so a skip in a run bundle says
why it happened.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
from dataclasses import dataclass
from typing import Any

from kernels.cases import Case
from kernels.registry import Variant, get

KNOWN_NEEDS = frozenset({"cuda", "hopper", "triton", "nvcc", "cupy", "cutlass"})
DEVICE_NEEDS = frozenset({"cuda", "hopper", "cupy"})  # unmet, all of them, without a CUDA device


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
        "torch_version": None, "torch_problem": None, "cuda": False, "cuda_problem": None,
        "device_name": None, "compute_capability": None, "torch_cuda_version": None,
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
    from kernels.nvcc import NvccError, nvcc_version

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
    from kernels.cutlass.headers import CutlassHeadersError, cutlass_include_dir

    try:
        folder = cutlass_include_dir()
    except CutlassHeadersError as exc:
        return str(exc)
    return None if folder is not None else "CUTLASS/CuTe headers not found (pip install nvidia-cutlass, or set CUTLASS_INCLUDE_DIR)"


def _missing(need: str, caps: Capabilities) -> str | None:
    """Why `need` is not met on this machine, or None when it is."""
    if need == "cuda":
        return None if caps.cuda else f"needs a CUDA device: {caps.cuda_problem}"
    if need == "hopper":
        if not caps.cuda:
            return f"needs a Hopper GPU (cc 9.x): {caps.cuda_problem}"
        if not caps.hopper:
            major, minor = caps.compute_capability or (0, 0)
            return f"needs a Hopper GPU (cc 9.x); {caps.device_name} is cc {major}.{minor}"
        return None
    if need == "triton":
        if caps.triton_version is None:
            return f"needs Triton: {caps.triton_problem}"
        if not caps.triton_runnable:
            return (f"needs a CUDA device for Triton {caps.triton_version}, or TRITON_INTERPRET=1 "
                    f"to run it on CPU ({caps.cuda_problem})")
        return None
    if need == "nvcc":
        return None if caps.nvcc_path else "needs nvcc (the CUDA toolkit) on PATH"
    if need == "cupy":
        return None if caps.cupy_problem is None else f"needs CuPy with a device: {caps.cupy_problem}"
    if need == "cutlass":
        problem = cutlass_headers_problem()
        return None if problem is None else f"needs the CUTLASS headers: {problem}"
    return f"declares an unknown need {need!r} (known: {', '.join(sorted(KNOWN_NEEDS))})"


def _resolve(variant: Variant | str) -> Variant:
    return get(variant) if isinstance(variant, str) else variant


def availability(variant: Variant | str) -> tuple[bool, str]:
    """(True, "") when this machine has everything `variant` needs, else (False, reason)."""
    variant = _resolve(variant)
    caps = capabilities()
    if caps.torch_problem:
        return False, caps.torch_problem
    needs = set(variant.needs)
    if needs & DEVICE_NEEDS and not caps.cuda:
        # One reason for the missing device, not one per need that depends on it.
        needs -= DEVICE_NEEDS
        needs.add("cuda")
    reasons = [r for need in sorted(needs) if (r := _missing(need, caps)) is not None]
    return (False, "; ".join(reasons)) if reasons else (True, "")


def skip_reason(variant: Variant | str, case: Case) -> str | None:
    """Why `case` of `variant` is not run here: unavailable variant or an unsupported
    combination the variant declares. None when the case runs."""
    variant = _resolve(variant)
    ok, reason = availability(variant)
    if not ok:
        return f"unavailable: {reason}"
    declared = variant.unsupported(case)
    return f"unsupported: {declared}" if declared else None


def runnable_device() -> Any:
    """torch.device("cuda") when a CUDA device is usable, else torch.device("cpu")."""
    import torch

    return torch.device("cuda") if capabilities().cuda else torch.device("cpu")


def device_summary() -> str:
    """One line for display: the device, its capability and the toolchain versions."""
    caps = capabilities()
    if caps.torch_problem:
        return caps.torch_problem
    if caps.cuda:
        major, minor = caps.compute_capability or (0, 0)
        arch = " (hopper)" if caps.hopper else ""
        device = f"{caps.device_name}, cc {major}.{minor}{arch}, CUDA {caps.torch_cuda_version}"
    else:
        device = f"CPU only ({caps.cuda_problem})"
    tools = [f"torch {caps.torch_version}"]
    if caps.triton_version:
        mode = "" if caps.cuda else (" interpreter" if caps.triton_interpret else " (no GPU, interpreter off)")
        tools.append(f"triton {caps.triton_version}{mode}")
    if caps.cupy_version:
        tools.append(f"cupy {caps.cupy_version}")
    if caps.nvcc_path:
        tools.append(f"nvcc {caps.nvcc_release or '?'}")
    return f"{device}; {', '.join(tools)}"
