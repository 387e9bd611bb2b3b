"""What a variant is: its record (`Variant`) and what its `prepare` returns (`Prepared`).

Each variant declares what it needs ("cuda", "hopper", "triton", "nvcc", "cupy",
"cutlass", "flash_attn_cute"), which combinations it does not support (with the reason),
and a `prepare` function that does all setup and compilation and returns a zero-argument
callable, so that nothing but the kernel launch sits in the timed region (the tritonbench
operator style, docs/design.md "Kernel variants").

A leaf below the registry: variant modules build these records and the registry collects
them, so no variant module imports the registry (which imports the variant modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .build_report import BuildReport
from .cases import Case

# By where the kernel comes from: SDPA's backends, composed torch ops, our CUDA, Triton and
# CUTLASS C++ sources, and `flash_attn`: the FlashAttention project's own released kernels
# (flash-attn-4's CuTe DSL forward), a third-party reference like cuDNN, neither ours to
# build with nvcc nor one of SDPA's backends (whose family supplies the per-backend gaps).
FAMILIES = ("sdpa", "torch", "cuda", "triton", "cutlass", "flash_attn", "test")


@dataclass
class Prepared:
    """A case ready to run: `fn()` launches the kernel once and returns the output tensor.

    `inputs` are the tensors the call reads, in the order the operator's `reference64` takes
    them (kernels.operators): attention's (q, k, v), RMSNorm's (x, w). An attention variant
    may pass q, k, v alone (every revision's harness does); `inputs` is then (q, k, v).

    `out` is the caller-visible output buffer when the variant writes into one it was given
    (custom kernels); the correctness suite fills it with NaN before each call so that
    unwritten elements fail. Library variants that allocate their own output leave it None.

    `config` names the launch configuration the kernel runs with when the variant chooses one
    per problem (an autotuner's pick, e.g. "m64_n128_w4_s3"), and `config_source` how it was
    chosen ("table": recorded per GPU model and problem; "tuned": timed in this process;
    "fixed": nothing to choose). Every result stores both (kernel_config,
    kernel_config_source), so a step in a series that coincides with a new configuration is
    told apart from a code change. None: the variant reports no configuration.

    `binary_sha256` is the sha256 of the binary the call runs when the variant compiles it in
    this process (Triton's cubin; its cache keeps the file), stored as the result's
    kernel_binary_sha256 so that a compare can read and diff the two sides' code. None: the
    binary is built ahead of the run (nvcc, recorded in builds.json) or not known.
    """

    fn: Callable[[], Any]
    q: Any = None
    k: Any = None
    v: Any = None
    out: Any | None = None
    info: dict[str, Any] = field(default_factory=dict)
    config: str | None = None
    config_source: str | None = None
    binary_sha256: str | None = None
    inputs: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        self.inputs = (self.q, self.k, self.v) if self.inputs is None else tuple(self.inputs)


@dataclass
class Variant:
    name: str
    family: str
    description: str
    prepare: Callable[[Case, Any, int], Prepared]  # (case, torch.device, seed) -> Prepared
    needs: frozenset[str] = frozenset()
    unsupported: Callable[[Case], str | None] = lambda case: None
    build: Callable[[], BuildReport] | None = None
    lineage: str = ""
    operator: str = "attention"  # kernels.operators: what it computes, its shapes and its baseline

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"variant {self.name!r}: unknown family {self.family!r}")
