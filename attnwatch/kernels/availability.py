"""Whether a variant runs on this machine, and why a variant or a case is skipped.

A variant declares what it `needs` (kernels.variant): any of

* ``cuda``   a CUDA device visible to torch;
* ``hopper`` that device is compute capability 9.x (H100/H200: wgmma, TMA);
* ``triton`` Triton importable and something to run it on: a CUDA device, or the Triton
  interpreter (``TRITON_INTERPRET=1``: Triton kernels execute on CPU tensors, slowly, so
  only small shapes are practical);
* ``nvcc``   the CUDA compiler on PATH;
* ``cupy``   CuPy importable and seeing a CUDA device (launches nvcc-built cubins);
* ``cutlass`` the CUTLASS/CuTe C++ headers found (kernels.cutlass.headers says where it looks);
* ``flash_attn_cute`` flash-attn-4's CuTe package (`flash_attn.cute`) importable, also from a
  `pip --target` folder named in ATTNWATCH_EXTRA_SITE (kernels.capabilities).
* an optional package's need (``liger``, ``quack``: kernels.optional_packages): its module imports.

Every variant also needs torch (all of them take and return torch tensors). The machine is
probed once per process (`kernels.capabilities`, re-exported here); every `False` carries a
reason that names the missing piece, so a skip in a run bundle says why it happened. Without a
CUDA device the device needs make one reason, not one each: the Hopper one when the variant
needs Hopper (the more exact statement of what is missing), else the CUDA one.
"""

from __future__ import annotations

from typing import Any

from .capabilities import Capabilities, capabilities, cutlass_headers_problem, flash_attn_cute_problem
from .cases import Case
from .optional_packages import OPTIONAL_PACKAGES, package_reason
from .registry import get
from .variant import Variant

__all__ = [
    "Capabilities",
    "DEVICE_NEEDS",
    "KNOWN_NEEDS",
    "availability",
    "capabilities",
    "cutlass_headers_problem",
    "device_summary",
    "flash_attn_cute_problem",
    "runnable_device",
    "skip_reason",
]

KNOWN_NEEDS = frozenset({"cuda", "hopper", "triton", "nvcc", "cupy", "cutlass", "flash_attn_cute", *OPTIONAL_PACKAGES})
DEVICE_NEEDS = frozenset({"cuda", "hopper", "cupy"})  # unmet, all of them, without a CUDA device


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
            return (
                f"needs a CUDA device for Triton {caps.triton_version}, or TRITON_INTERPRET=1 "
                f"to run it on CPU ({caps.cuda_problem})"
            )
        return None
    if need == "nvcc":
        return None if caps.nvcc_path else "needs nvcc (the CUDA toolkit) on PATH"
    if need == "cupy":
        return None if caps.cupy_problem is None else f"needs CuPy with a device: {caps.cupy_problem}"
    if need == "cutlass":
        problem = cutlass_headers_problem()
        return None if problem is None else f"needs the CUTLASS headers: {problem}"
    if need == "flash_attn_cute":
        problem = flash_attn_cute_problem()
        return None if problem is None else f"needs flash-attn-4: {problem}"
    if need in OPTIONAL_PACKAGES:
        return package_reason(need)
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
        device_need = "hopper" if "hopper" in needs else "cuda"
        needs -= DEVICE_NEEDS
        needs.add(device_need)
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
