"""PyTorch scaled_dot_product_attention: the default dispatch (attention's baseline,
kernels/operators.py) and one variant pinned to each backend.

Pinning uses the public `torch.nn.attention.sdpa_kernel([SDPBackend.X])` context, entered
inside the timed callable so that interleaved variants never leak each other's global
backend flags. Its Python cost (about 19 µs on a slow 2-core CI VM, measured; far less on
a runner's CPU) is host time: it overlaps the GPU when the GPU is busy (after the L2
flush), and vanishes under CUDA-graph replay, where only the captured kernels run.
A pin is honoured or fails: with a single backend allowed, torch raises instead of falling
back; `backend_ops` proves which aten op actually ran (tests check every pin with it).

Where each backend exists (torch 2.11 CUDA, 2.13 CPU):

* math       CPU and CUDA; any shape and dtype (materialises the S x S scores).
* flash      CUDA sm80+ (FlashAttention-2 kernels) and CPU (torch's own CPU flash
             kernel, `_scaled_dot_product_flash_attention_for_cpu`, any head dim).
* efficient  CUDA only (xFormers-derived memory-efficient kernel): needs "cuda".
* cudnn      CUDA only (cuDNN fused attention): needs "cuda".

On CUDA the per-shape constraints (head dim limits, dtype, alignment) are not guessed: they
are asked of torch's own dispatcher checks, `torch.backends.cuda.can_use_*_attention`, whose
debug warnings become the declared reason.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any, Callable

from ..capabilities import UNDER_PROFILER_ENV, capabilities
from ..cases import Case
from ..inputs import input_shape, make_inputs, softmax_scale, torch_dtype
from ..variant import Prepared, Variant

# aten op that runs the attention for each backend (what the profiler shows).
BACKEND_OPS = {
    "aten::_scaled_dot_product_flash_attention": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "FLASH_ATTENTION",
    "aten::_scaled_dot_product_efficient_attention": "EFFICIENT_ATTENTION",
    "aten::_scaled_dot_product_cudnn_attention": "CUDNN_ATTENTION",
    "aten::_scaled_dot_product_attention_math": "MATH",
}

_CAN_USE = {
    "FLASH_ATTENTION": "can_use_flash_attention",
    "EFFICIENT_ATTENTION": "can_use_efficient_attention",
    "CUDNN_ATTENTION": "can_use_cudnn_attention",
}

# Above this share of device memory the S x S intermediates of the math backend are
# declared unsupported instead of discovered as an out-of-memory crash.
MATH_MEMORY_SHARE = 0.5


def backend_ops(fn: Callable[[], Any]) -> list[str]:
    """The SDPA backends (SDPBackend names) that actually ran during one `fn()` call,
    read from the aten ops the torch profiler records."""
    import torch

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    seen = {BACKEND_OPS[e.name] for e in prof.events() if e.name in BACKEND_OPS}
    return sorted(seen)


def dispatcher_choice(q: Any, k: Any, v: Any, causal: bool, scale: float) -> list[str] | None:
    """The backend torch's dispatcher picks for this call, asked of its own selection function
    (`torch._fused_sdp_choice`, which `F.scaled_dot_product_attention` runs before it calls the
    chosen backend; its answer depends on shapes, dtype, flags and device, never on values). No
    profiler starts, so it costs microseconds and may run under Nsight Compute. None where this
    torch lacks the function or names no backend of BACKEND_OPS."""
    import torch
    from torch.nn.attention import SDPBackend

    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return None
    try:
        picked = SDPBackend(int(choose(q, k, v, is_causal=causal, scale=scale)))
    except (RuntimeError, TypeError, ValueError):
        return None
    return [picked.name] if picked.name in BACKEND_OPS.values() else None


# Where the dispatcher cannot be asked: which backends ran, per problem, for this process, from one
# profiled call (the first torch.profiler session in a process takes seconds: 1.2-3.5 s on a CPU),
# valid for every input set and round of that problem.
_DISPATCHED: dict[tuple, list[str]] = {}


def dispatched_backends(problem: tuple, fn: Callable[[], Any]) -> list[str]:
    """backend_ops(fn), profiled the first time `problem` is asked about in this process."""
    if problem not in _DISPATCHED:
        _DISPATCHED[problem] = backend_ops(fn)
    return list(_DISPATCHED[problem])


@functools.lru_cache(maxsize=None)
def _torch_says_unsupported(backend: str, dims: tuple[int, int, int, int], dtype: str, causal: bool) -> str | None:
    """Ask torch's dispatcher whether `backend` accepts this problem on the CUDA device."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.empty(dims, dtype=torch_dtype(dtype), device="cuda")
    params = torch.backends.cuda.SDPAParams(q, q, q, None, 0.0, causal, False)
    check = getattr(torch.backends.cuda, _CAN_USE[backend])
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel([getattr(SDPBackend, backend)]):
        warnings.simplefilter("always")
        ok = check(params, True)
    if ok:
        return None
    said = "; ".join(str(w.message).strip() for w in caught) or "no reason given"
    return f"torch {torch.__version__} refuses {backend} here: {said}"


def _math_memory_problem(case: Case) -> str | None:
    """The math backend holds fp32 scores and probabilities (B*H*S*S each); refuse shapes
    whose intermediates would take more than MATH_MEMORY_SHARE of the device memory."""
    caps = capabilities()
    if not caps.cuda:
        return None
    import torch

    b, h, s, _ = input_shape(case)
    need = 2 * b * h * s * s * 4
    total = torch.cuda.get_device_properties(0).total_memory
    if need > MATH_MEMORY_SHARE * total:
        return (
            f"math backend would hold {need / 2**30:.1f} GiB of fp32 S x S intermediates, "
            f"over {MATH_MEMORY_SHARE:.0%} of the device's {total / 2**30:.0f} GiB"
        )
    return None


def _unsupported_for(backend: str | None) -> Callable[[Case], str | None]:
    def unsupported(case: Case) -> str | None:
        if case.dtype not in ("fp16", "bf16"):
            return f"only fp16 and bf16 are measured; got {case.dtype}"
        if backend == "MATH":
            return _math_memory_problem(case)
        if backend is None or not capabilities().cuda:
            # Default dispatch always has math to fall back on; on CPU only flash and math
            # exist (the others are unavailable via needs) and the CPU flash kernel takes
            # any head dim.
            return None
        return _torch_says_unsupported(backend, input_shape(case), case.dtype, case.causal)

    return unsupported


def _prepare_for(backend: str | None) -> Callable[[Case, Any, int], Prepared]:
    def prepare(case: Case, device: Any, seed: int) -> Prepared:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        q, k, v = make_inputs(case, device, seed)
        scale = softmax_scale(case.shape.head_dim)
        causal = case.causal
        if backend is None:

            def run() -> Any:
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        else:
            pinned = [getattr(SDPBackend, backend)]

            def run() -> Any:
                with sdpa_kernel(pinned):
                    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

        info: dict[str, Any] = {"backend": backend or "default dispatch", "torch": torch.__version__}
        if backend is None:
            # Which backend the baseline really is for this case: the dispatcher's own choice, else
            # one profiled call (untimed), but not under someone else's profiler: a nested session
            # would end theirs, and beside Nsight Compute it costs seconds and records nothing used.
            chosen = dispatcher_choice(q, k, v, causal, scale)
            if chosen is not None:
                info["dispatched_to"] = chosen
            elif os.environ.get(UNDER_PROFILER_ENV):
                info["dispatched_to"] = "not recorded: running under a profiler"
            elif torch.autograd._profiler_enabled():
                info["dispatched_to"] = "not recorded: a profiler session is already active"
            else:
                try:
                    problem = (tuple(q.shape), str(q.dtype), causal, str(q.device))
                    info["dispatched_to"] = dispatched_backends(problem, run)
                except RuntimeError as exc:  # a profiler that cannot start must not cost the case
                    info["dispatched_to"] = f"not recorded: {exc}"
        return Prepared(fn=run, q=q, k=k, v=v, out=None, info=info)

    return prepare


def _variant(
    name: str, backend: str | None, description: str, lineage: str, needs: frozenset[str] = frozenset()
) -> Variant:
    return Variant(
        name=name,
        family="sdpa",
        description=description,
        prepare=_prepare_for(backend),
        needs=needs,
        unsupported=_unsupported_for(backend),
        lineage=lineage,
    )


SDPA = _variant(
    "sdpa",
    None,
    "torch.nn.functional.scaled_dot_product_attention, default backend dispatch: attention's baseline",
    "PyTorch SDPA baseline (all seeds)",
)
SDPA_FLASH = _variant(
    "sdpa_flash",
    "FLASH_ATTENTION",
    "SDPA pinned to the FlashAttention-2 backend (CPU: torch's CPU flash kernel)",
    "PyTorch SDPA (FA backend); FA2 rows",
)
SDPA_EFFICIENT = _variant(
    "sdpa_efficient",
    "EFFICIENT_ATTENTION",
    "SDPA pinned to the memory-efficient (xFormers-derived) backend; CUDA only",
    "PyTorch SDPA memory-efficient backend",
    needs=frozenset({"cuda"}),
)
SDPA_CUDNN = _variant(
    "sdpa_cudnn",
    "CUDNN_ATTENTION",
    "SDPA pinned to the cuDNN fused-attention backend; CUDA only",
    "PyTorch SDPA cuDNN backend (FA3-class rows on Hopper)",
    needs=frozenset({"cuda"}),
)
SDPA_MATH = _variant(
    "sdpa_math",
    "MATH",
    "SDPA pinned to the math backend: unfused composite ops, the slow but general fallback",
    "PyTorch SDPA math fallback",
)

VARIANTS = (SDPA, SDPA_FLASH, SDPA_EFFICIENT, SDPA_CUDNN, SDPA_MATH)
