"""`fa4_sm90`: the FlashAttention-3-class reference, flash-attn-4's SM90 forward kernel.

flash-attn-4 (package `flash_attn.cute`, pure Python on NVIDIA's CuTe DSL) carries a Hopper
forward (`flash_attn/cute/flash_fwd_sm90.py`: TMA loads, wgmma, warp-specialised producer and
consumer warpgroups, intra-warpgroup overlap of softmax and the second GEMM): the FA3 design,
which the kernel team's reports measure against. It is an optional dependency (the `fa4`
extra); where the package or a Hopper GPU is missing the variant is unavailable with the reason
(kernels.availability: needs "hopper" and "flash_attn_cute").

What is timed, and what is not:

* `prepare` draws the inputs in the convention's layout (kernels.inputs: contiguous
  (B, H, S, D)) and hands the kernel (B, S, H, D) views of the same memory,
  `t.transpose(1, 2)`: the interface takes any layout whose last dimension is contiguous and
  whose other strides are 16-byte multiples (it marks the strides dynamic), so no copy is made
  anywhere and the kernel reads the very tensors the float64 reference reads. The output is a
  contiguous (B, H, S, D) buffer written through the same kind of view, so the correctness
  check poisons it before every call like any custom kernel's.
* `prepare` then makes one call through the public forward (`interface._flash_attn_fwd`, what
  `flash_attn_func` runs): it picks the tile configuration, JIT-compiles the kernel (seconds;
  cached per configuration for the process) and launches it once. That call is recorded at the
  package's compile cache: the compiled function and the exact arguments the interface passed
  it. The timed `fn()` is that one compiled launch with those arguments, so neither the
  compile nor the interface's Python (argument checks, tile planning and the compile key,
  redone on every call) is in the timed region. Should a future version launch
  anything else (a second kernel, a split-KV combine), the recording finds a number of launches
  other than one and `prepare` fails the case with that, rather than time part of the work.

The configuration the interface chose (tile M x N, P@V from registers, intra-warpgroup
overlap) is `Prepared.config` ("fixed": the package's table by head dim, nothing tuned here).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..capabilities import flash_attn_cute_problem
from ..cases import Case
from ..inputs import make_inputs, make_output, softmax_scale
from ..variant import Prepared, Variant

SUPPORTED_DTYPES = ("fp16", "bf16")
SM90 = (
    90  # the kernel path asked of the interface (its `_arch`): the Hopper forward, whatever FLASH_ATTENTION_ARCH says
)
HEAD_DIM_RANGE = (8, 256)  # the SM90 forward's head dims (interface._validate_head_dims) ...
HEAD_DIM_MULTIPLE = 8  # ... in multiples of 16 bytes of fp16/bf16


def _unsupported(case: Case) -> str | None:
    if case.dtype not in SUPPORTED_DTYPES:
        return f"fp16 and bf16 only (the SM90 forward's tensor-core types); got {case.dtype}"
    d = case.shape.head_dim
    low, high = HEAD_DIM_RANGE
    if not low <= d <= high or d % HEAD_DIM_MULTIPLE:
        return f"the SM90 forward takes head_dim {low}..{high} in multiples of {HEAD_DIM_MULTIPLE} (16 bytes); got {d}"
    return None


@dataclass
class _Recorder:
    """Stands in for the interface's compile cache during one call and records every launch
    the interface makes through it: (compiled function, positional args, keyword args)."""

    cache: Any
    launches: list[tuple[Callable[..., Any], tuple, dict]] = field(default_factory=list)

    def __contains__(self, key: Any) -> bool:
        return key in self.cache

    def __setitem__(self, key: Any, compiled: Any) -> None:
        self.cache[key] = compiled

    def __getitem__(self, key: Any) -> Callable[..., Any]:
        compiled = self.cache[key]

        def launch(*args: Any, **kwargs: Any) -> Any:
            self.launches.append((compiled, args, kwargs))
            return compiled(*args, **kwargs)

        return launch


def _config_name(config: Any) -> str | None:
    """ "m128_n128_rs_ol" from the interface's FwdConfig (tile M x N; P@V with P in registers;
    intra-warpgroup overlap), None when none was seen."""
    if config is None:
        return None
    name = f"m{config.m_block_size}_n{config.n_block_size}"
    return name + ("_rs" if config.mma_pv_is_rs else "") + ("_ol" if config.intra_wg_overlap else "")


def record_launch(
    interface: Any, q: Any, k: Any, v: Any, out: Any, scale: float, causal: bool
) -> tuple[Callable[[], Any], Any]:
    """One forward through `interface._flash_attn_fwd` (compiles on first use, launches once)
    with the compiled launch recorded; returns (a zero-argument callable repeating exactly that
    launch, the FwdConfig the interface chose or None). q, k, v, out: (B, S, H, D)."""
    forward = interface._flash_attn_fwd
    recorder = _Recorder(forward.compile_cache)
    chosen: list[Any] = []
    pick = interface._get_fwd_config

    def recording_pick(*args: Any, **kwargs: Any) -> Any:
        chosen.append(pick(*args, **kwargs))
        return chosen[-1]

    forward.compile_cache, interface._get_fwd_config = recorder, recording_pick
    try:
        forward(q, k, v, softmax_scale=scale, causal=causal, out=out, _arch=SM90)
    finally:
        forward.compile_cache, interface._get_fwd_config = recorder.cache, pick
    if len(recorder.launches) != 1:
        raise RuntimeError(
            f"flash_attn.cute's forward made {len(recorder.launches)} compiled launches, expected "
            "exactly 1: the timed call would not be the whole forward"
        )
    compiled, args, kwargs = recorder.launches[0]

    def run() -> None:  # writes `out`; returns nothing, so the harness reads the output buffer
        compiled(*args, **kwargs)

    return run, (chosen[-1] if chosen else None)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for dist in ("flash-attn-4", "nvidia-cutlass-dsl", "apache-tvm-ffi"):
        try:
            found[dist] = version(dist)
        except PackageNotFoundError:
            found[dist] = "unknown"
    return found


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    reason = _unsupported(case)
    if reason:
        raise ValueError(f"{case.id}: unsupported: {reason}")
    problem = flash_attn_cute_problem()  # also puts ATTNWATCH_EXTRA_SITE's folders on the path
    if problem:
        raise RuntimeError(problem)
    import torch
    from flash_attn.cute import interface

    q, k, v = make_inputs(case, device, seed)
    out = make_output(case, device)
    started = time.perf_counter()
    launch, config = record_launch(
        interface,
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        out.transpose(1, 2),
        softmax_scale(case.shape.head_dim),
        case.causal,
    )
    torch.cuda.synchronize(q.device)
    info: dict[str, Any] = {
        "first_call_s": round(time.perf_counter() - started, 3),  # the JIT compile when this configuration is new
        "layout": "(B, H, S, D) memory passed as (B, S, H, D) strided views, no copies",
        "versions": _versions(),
    }
    if config is not None:
        info["fwd_config"] = {
            "tile_m": config.m_block_size,
            "tile_n": config.n_block_size,
            "mma_pv_is_rs": config.mma_pv_is_rs,
            "intra_wg_overlap": config.intra_wg_overlap,
        }
    return Prepared(
        fn=launch,
        q=q,
        k=k,
        v=v,
        out=out,
        info=info,
        config=_config_name(config),
        config_source="fixed" if config is not None else None,
    )


FA4_SM90 = Variant(
    name="fa4_sm90",
    family="flash_attn",
    description=(
        "flash-attn-4's SM90 forward (CuTe DSL): the FlashAttention-3 design (TMA, wgmma, warp-specialised "
        "pipelines), JIT-compiled in prepare; the timed call is its one compiled launch"
    ),
    prepare=_prepare,
    needs=frozenset({"cuda", "hopper", "flash_attn_cute"}),
    unsupported=_unsupported,
    lineage="FlashAttention-3 rows (flash-attn-4 4.0.0b36, SM90 forward)",
)

VARIANTS = (FA4_SM90,)
