"""The case list and the session options compare measures with (the same defaults as `attnwatch run`)."""

from __future__ import annotations

from attnwatch.ci.compare.sequential import SequentialDesign
from attnwatch.ci.compare.session import SessionOptions
from attnwatch.ci.environment import nvml_gpu
from attnwatch.ci.errors import UserError
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.run_config import compare_sampling, compare_setting, timing_config
from attnwatch.ci.selection import select_cases
from attnwatch.ci.variant_modules import load_requested, requested_specs
from attnwatch.history.analysis.thresholds import Thresholds
from attnwatch.kernels.shapes import SHAPE_SETS


def plan_for(args) -> list[PlannedCase]:
    """Variants are the head's registry (a variant the base lacks shows up as `new`). --shapes is a
    shape set or comma-separated shape ids, as for `attnwatch run` (one case's reproduce command,
    history.reproduce, names its shape id)."""
    load_requested(args)
    return select_cases(args.shapes, args.variants, args.dtypes, args.causal, device_kind="cuda").cases


def design_for(args, confidence: float) -> SequentialDesign:
    """--rounds is the cap; --min-rounds the first look (default: the config's, at most the cap)."""
    max_rounds = args.rounds if args.rounds is not None else int(compare_setting("max_rounds"))
    min_rounds = args.min_rounds if args.min_rounds is not None else min(int(compare_setting("min_rounds")), max_rounds)
    if not 1 <= min_rounds <= max_rounds:
        raise UserError(f"--min-rounds: expected 1..{max_rounds} (the --rounds cap), got {min_rounds}")
    return SequentialDesign(min_rounds, max_rounds, confidence)


def device_kind() -> tuple[str, str | None]:
    """("cuda" or "cpu", the GPU's name), read through NVML without a CUDA context: what
    ci.environment.capture_environment(probe_device=False) says of the device, without the rest
    of that record (its torch import and `nvcc --version`), which the parent does not use: each
    worker records its own environment."""
    gpu = nvml_gpu()
    return ("cuda", gpu.name) if gpu is not None else ("cpu", None)


def session_options(args, kind: str, thresholds: Thresholds) -> SessionOptions:
    """What the command line sets; every other setting is SessionOptions' own (ci/run_config.toml)."""
    return SessionOptions(
        device_kind=kind, timing=timing_config(kind), sampling=compare_sampling(kind),
        design=design_for(args, thresholds.confidence), min_effect=thresholds.min_effect, shape_set=args.shapes if args.shapes in SHAPE_SETS else "custom",
        method=args.method, correctness=not args.no_correctness, case_timeout_s=args.case_timeout or None,
        extra_variant_modules=requested_specs(args), extra_sys_path=list(args.variant_path or []),
        workers_per_side=args.workers_per_side or None, select=True,
        measure_all="--all: every variant measured, as asked" if getattr(args, "all", False) else None,
    )
