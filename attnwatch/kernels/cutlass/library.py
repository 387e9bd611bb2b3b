"""ctypes binding of one CUTLASS 3-kernel shared library (see attention_3k.cu's extern "C" API).

A `Plan` binds q, k, v, the S and P buffers, the output and the workspace once (CUTLASS's
`initialize`: TMA descriptors, tile-scheduler workspace), so that calling it launches the
Q·Kᵀ GEMM, the softmax and the P·V GEMM on torch's current stream and does nothing else.
Every non-zero return of the library becomes an Attention3kError carrying the library's
own message. Loading the library needs no GPU (the CUDA runtime is linked statically and
finds the driver lazily), so the compile-time facts are readable on a CI host.
"""

from __future__ import annotations

import ctypes
import weakref
from pathlib import Path
from typing import Any

DTYPE_CODES = {"fp16": 0, "bf16": 1}
GEMM_ROLES = {"qk": 0, "pv": 1}


class Attention3kError(RuntimeError):
    """The CUTLASS 3-kernel library refused or failed; the message is the library's reason."""


class Attention3kLibrary:
    """One loaded shared library (one tile configuration, both dtypes)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        lib = ctypes.CDLL(str(self.path))
        lib.attn3k_last_error.restype = ctypes.c_char_p
        lib.attn3k_last_error.argtypes = []
        lib.attn3k_cutlass_version.restype = ctypes.c_int
        lib.attn3k_kernel_info.restype = ctypes.c_int
        lib.attn3k_kernel_info.argtypes = [ctypes.c_int, ctypes.c_int] + [ctypes.POINTER(ctypes.c_int)] * 3
        lib.attn3k_workspace_bytes.restype = ctypes.c_int
        lib.attn3k_workspace_bytes.argtypes = [ctypes.c_int] * 6 + [ctypes.POINTER(ctypes.c_size_t)]
        lib.attn3k_can_implement.restype = ctypes.c_int
        lib.attn3k_can_implement.argtypes = [ctypes.c_int] * 6
        lib.attn3k_plan_create.restype = ctypes.c_int
        lib.attn3k_plan_create.argtypes = (
            [ctypes.c_int] * 6
            + [ctypes.c_void_p] * 6
            + [ctypes.c_float, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        )
        lib.attn3k_plan_run.restype = ctypes.c_int
        lib.attn3k_plan_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.attn3k_plan_destroy.restype = None
        lib.attn3k_plan_destroy.argtypes = [ctypes.c_void_p]
        self._lib = lib

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            message = self._lib.attn3k_last_error().decode(errors="replace")
            raise Attention3kError(f"{self.path.name}: {what}: {message}")

    def cutlass_version(self) -> int:
        """major*100 + minor of the CUTLASS headers the library was compiled against."""
        return int(self._lib.attn3k_cutlass_version())

    def gemm_facts(self) -> dict[str, dict[str, int]]:
        """Per dtype and GEMM: dynamic shared memory bytes, mainloop stages, threads per CTA."""
        facts: dict[str, dict[str, int]] = {}
        for dtype, code in DTYPE_CODES.items():
            for role, which in GEMM_ROLES.items():
                smem, stages, threads = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
                self._check(
                    self._lib.attn3k_kernel_info(
                        code, which, ctypes.byref(smem), ctypes.byref(stages), ctypes.byref(threads)
                    ),
                    f"kernel_info({dtype}, {role})",
                )
                facts[f"{role}_{dtype}"] = {"smem_bytes": smem.value, "stages": stages.value, "threads": threads.value}
        return facts

    def can_implement(self, dtype: str, batch_heads: int, seq: int, ld: int, kv_len: int, head_dim: int) -> None:
        """Raise Attention3kError with CUTLASS's reason unless both GEMMs accept the problem (no GPU needed)."""
        self._check(
            self._lib.attn3k_can_implement(DTYPE_CODES[dtype], batch_heads, seq, ld, kv_len, head_dim), "can_implement"
        )

    def workspace_bytes(self, dtype: str, batch_heads: int, seq: int, ld: int, kv_len: int, head_dim: int) -> int:
        size = ctypes.c_size_t()
        self._check(
            self._lib.attn3k_workspace_bytes(
                DTYPE_CODES[dtype], batch_heads, seq, ld, kv_len, head_dim, ctypes.byref(size)
            ),
            "workspace_bytes",
        )
        return int(size.value)

    def plan(
        self,
        *,
        dtype: str,
        q: Any,
        k: Any,
        v: Any,
        scores: Any,
        probs: Any,
        out: Any,
        seq: int,
        ld: int,
        kv_len: int,
        scale: float,
        causal: bool,
        workspace: Any,
    ) -> "Plan":
        """Bind the buffers (torch CUDA tensors; k and v with kv_len rows per head) and initialise both GEMMs."""
        batch, heads, _, head_dim = q.shape
        handle = ctypes.c_void_p()
        ws_ptr = workspace.data_ptr() if workspace is not None and workspace.numel() else None
        ws_bytes = workspace.numel() if workspace is not None else 0
        self._check(
            self._lib.attn3k_plan_create(
                DTYPE_CODES[dtype],
                batch * heads,
                seq,
                ld,
                kv_len,
                head_dim,
                q.data_ptr(),
                k.data_ptr(),
                v.data_ptr(),
                scores.data_ptr(),
                probs.data_ptr(),
                out.data_ptr(),
                float(scale),
                1 if causal else 0,
                ws_ptr,
                ws_bytes,
                ctypes.byref(handle),
            ),
            "plan_create",
        )
        return Plan(self, handle)


class Plan:
    """A bound forward; `launch(stream)` enqueues the three kernels. Freed with the object."""

    def __init__(self, library: Attention3kLibrary, handle: ctypes.c_void_p) -> None:
        self._library = library
        self._handle = handle
        self._finalizer = weakref.finalize(self, library._lib.attn3k_plan_destroy, handle)

    def launch(self, stream_handle: int) -> None:
        """Enqueue Q·Kᵀ, softmax, P·V on the CUDA stream `stream_handle` (cudaStream_t as int)."""
        self._library._check(self._library._lib.attn3k_plan_run(self._handle, stream_handle), "plan_run")
