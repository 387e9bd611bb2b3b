"""The build record: what the real compiler said about one variant's build.

A leaf module (it imports nothing of the project) so that the compiler drivers
(`kernels.nvcc`, `kernels.cuda.launch`, `kernels.cutlass.build`) and the variants can all
name the record without importing the registry, which imports the variants.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class BuildReport:
    """What the real compiler said about one variant's build (ptxas -v or kernel attributes).

    It goes into a run bundle and a shared history, so it holds no machine's file layout:
    paths in `config["command"]`, `log_tail` and `error` are relative to the repository or
    named (`-I<cutlass-4.2.0>`), as kernels.record_paths writes them.
    """

    variant: str
    ok: bool
    target: str = ""  # e.g. "sm_90", "sm_90a", "triton", "n/a"
    compile_seconds: float | None = None
    registers_per_thread: int | None = None
    shared_mem_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    stack_frame_bytes: int | None = None
    source_hash: str | None = None
    cached: bool = False
    config: dict[str, Any] = field(default_factory=dict)  # e.g. the Triton autotune choice
    log_tail: str = ""
    error: str | None = None
