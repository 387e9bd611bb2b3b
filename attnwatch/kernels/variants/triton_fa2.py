"""`triton_fa2`: the fused FlashAttention-2 forward written in Triton (kernels/triton/fa2_fwd.py).

`prepare` draws the inputs, picks the block configuration (the one choices.toml records for
this GPU model and problem; else timed on the GPU over the candidates that configs.toml lists
for the problem's bucket; the first interpreter candidate under TRITON_INTERPRET=1), compiles and runs the kernel once, all outside the timed region, and
returns a callable that is one kernel launch into the preallocated `out`. The chosen
configuration, the tuning trials and the compiler's resource report go into `Prepared.info`;
its name and how it was chosen into `Prepared.config` / `config_source` (stored per result).

Triton is imported lazily: this module is listed by kernels.variants and must import on a
dashboard host that has neither torch nor Triton.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..build_report import BuildReport
from ..cases import Case
from ..inputs import make_inputs, make_output
from ..variant import Prepared, Variant

SUPPORTED_DTYPES = ("fp16", "bf16")
MAX_GRID_Y = 65535  # kernels.triton.fa2_fwd.MAX_GRID_Y (not imported: that module needs Triton)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _unsupported(case: Case) -> str | None:
    from ..triton.configs import load_table

    if case.dtype not in SUPPORTED_DTYPES:
        return f"fp16 and bf16 only (tensor-core dots with fp32 accumulate); got {case.dtype}"
    table = load_table()
    shape = case.shape
    if shape.head_dim not in table.head_dims():
        dims = ", ".join(str(d) for d in sorted(table.head_dims()))
        return f"no block configurations for head_dim={shape.head_dim} in configs.toml (has {dims})"
    if shape.batch * shape.heads > MAX_GRID_Y:
        return f"B*H = {shape.batch * shape.heads} exceeds the CUDA grid's y limit ({MAX_GRID_Y})"
    if _interpreting():
        work = shape.batch * shape.heads * shape.seq_len * shape.seq_len * shape.head_dim
        if work > table.interpreter_max_work:
            return (
                f"TRITON_INTERPRET=1: B*H*S*S*D = {work} exceeds {table.interpreter_max_work}; "
                f"{table.interpreter_reason}"
            )
    return None


def _prepare(case: Case, device: Any, seed: int) -> Prepared:
    from ..triton import tuner
    from ..triton.fa2_fwd import make_launcher

    reason = _unsupported(case)
    if reason:
        raise ValueError(f"{case.id}: unsupported: {reason}")
    q, k, v = make_inputs(case, device, seed)
    out = make_output(case, device)
    choice = tuner.choose(q, k, v, out, case.causal)
    run = make_launcher(q, k, v, out, case.causal, choice.config)
    info: dict[str, Any] = {"config": choice.as_record(), "interpreter": _interpreting()}
    binary = None
    if q.is_cuda:
        info["resources"] = run.compiled_resources()  # also the warm-up launch
        binary = info["resources"]["binary_sha256"]
        import torch

        torch.cuda.synchronize(q.device)
    else:
        run()
    return Prepared(
        fn=run,
        q=q,
        k=k,
        v=v,
        out=out,
        info=info,
        config=choice.config.name,
        config_source=choice.source,
        binary_sha256=binary,
    )


def _build() -> BuildReport:
    """Compile the first candidate of every (head_dim, causal) bucket for fp16 on a small
    problem and report the compile time and the compiler's resource use.

    The per-case configuration actually timed is in each case's Prepared.info; this report
    says that the kernel builds on this machine and what the representative builds cost.
    """
    from ..triton.configs import load_table

    if _interpreting():
        table = load_table()
        return BuildReport(
            variant="triton_fa2",
            ok=True,
            target="triton-interpreter",
            config={"interpreter_candidates": list(table.interpreter)},
        )
    import torch

    if not torch.cuda.is_available():
        return BuildReport(
            variant="triton_fa2", ok=False, target="n/a", error="no CUDA device, and TRITON_INTERPRET is not 1"
        )
    import triton

    from ..triton.fa2_fwd import make_launcher

    table = load_table()
    major, minor = torch.cuda.get_device_capability()
    builds: dict[str, Any] = {}
    started = time.perf_counter()
    first: dict[str, Any] | None = None
    try:
        for head_dim in sorted(table.head_dims()):
            for causal in (False, True):
                seq_len = 1024
                config = table.candidates(head_dim, causal, seq_len)[0]
                q = torch.randn(1, 2, seq_len, head_dim, device="cuda", dtype=torch.float16)
                run = make_launcher(q, q, q, torch.empty_like(q), causal, config)
                resources = run.compiled_resources()
                label = f"d{head_dim}/{'causal' if causal else 'noncausal'}/{config.name}"
                builds[label] = {**config.as_record(), **resources}
                first = first or builds[label]
        torch.cuda.synchronize()
    except Exception as exc:  # the report carries the compiler's complaint instead of crashing the run
        return BuildReport(
            variant="triton_fa2",
            ok=False,
            target=f"sm_{major}{minor}",
            compile_seconds=time.perf_counter() - started,
            config={"builds": builds},
            error=f"{type(exc).__name__}: {str(exc)[:2000]}",
        )
    assert first is not None
    return BuildReport(
        variant="triton_fa2",
        ok=True,
        target=f"sm_{major}{minor} (triton {triton.__version__})",
        compile_seconds=time.perf_counter() - started,
        registers_per_thread=first.get("registers_per_thread"),
        shared_mem_bytes=first.get("shared_mem_bytes"),
        config={"builds": builds},
    )


TRITON_FA2 = Variant(
    name="triton_fa2",
    family="triton",
    description=(
        "fused FlashAttention-2 forward in Triton: online exp2 softmax, causal block skipping "
        "with a split diagonal, TMA descriptors on Hopper, block config tuned per problem"
    ),
    prepare=_prepare,
    needs=frozenset({"triton"}),
    unsupported=_unsupported,
    build=_build,
    lineage="Triton baseline; FA2/FA3 comparisons",
)

VARIANTS = (TRITON_FA2,)
