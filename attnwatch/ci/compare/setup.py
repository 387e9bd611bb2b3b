"""The case list and the session options compare and bisect measure with (the same defaults as
`attnwatch run`), from the settings their command lines give (`CaseChoice`, `MeasureSettings`:
built by the command from its flags, so nothing here reads an argument parser's namespace)."""

from __future__ import annotations

from dataclasses import dataclass, field

from attnwatch.ci.compare.sequential import SequentialDesign
from attnwatch.ci.compare.session import SessionOptions
from attnwatch.ci.environment import nvml_gpu
from attnwatch.ci.errors import UserError
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.run_config import compare_sampling, compare_setting, timing_config
from attnwatch.ci.selection import select_cases
from attnwatch.ci.variant_modules import VariantSources, load_requested, requested_specs
from attnwatch.history.analysis.thresholds import Thresholds
from attnwatch.kernels.shapes import SHAPE_SETS


@dataclass(frozen=True)
class CaseChoice:
    """Which cases to measure: --shapes, --variants, --dtypes, --causal, and the variants from outside."""

    shapes: str
    variants: str | None = None
    dtypes: str | None = None
    causal: str = "both"
    sources: VariantSources = field(default_factory=VariantSources)


@dataclass(frozen=True)
class MeasureSettings:
    """What a compare or bisect command line sets for its sessions; None: the configured default."""

    shapes: str  # a shape set's name, or shape ids (recorded as "custom")
    method: str
    correctness: bool = True
    case_timeout_s: float | None = None
    rounds: int | None = None  # the cap
    min_rounds: int | None = None  # the first look
    workers_per_side: int | None = None
    measure_all: bool = False  # --all: no selection by fingerprint
    sources: VariantSources = field(default_factory=VariantSources)


def plan_for(choice: CaseChoice) -> list[PlannedCase]:
    """Variants are the head's registry (a variant the base lacks shows up as `new`). --shapes is a
    shape set or comma-separated shape ids, as for `attnwatch run` (one case's reproduce command,
    history.reproduce, names its shape id)."""
    load_requested(choice.sources)
    return select_cases(choice.shapes, choice.variants, choice.dtypes, choice.causal, device_kind="cuda").cases


def design_for(settings: MeasureSettings, confidence: float) -> SequentialDesign:
    """--rounds is the cap; --min-rounds the first look (default: the config's, at most the cap)."""
    max_rounds = settings.rounds if settings.rounds is not None else int(compare_setting("max_rounds"))
    min_rounds = (
        settings.min_rounds if settings.min_rounds is not None else min(int(compare_setting("min_rounds")), max_rounds)
    )
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


def session_options(settings: MeasureSettings, kind: str, thresholds: Thresholds) -> SessionOptions:
    """What the command line sets; every other setting is SessionOptions' own (ci/run_config.toml)."""
    return SessionOptions(
        device_kind=kind,
        timing=timing_config(kind),
        sampling=compare_sampling(kind),
        design=design_for(settings, thresholds.confidence),
        min_effect=thresholds.min_effect,
        shape_set=settings.shapes if settings.shapes in SHAPE_SETS else "custom",
        method=settings.method,
        correctness=settings.correctness,
        case_timeout_s=settings.case_timeout_s or None,
        extra_variant_modules=requested_specs(settings.sources),
        extra_sys_path=list(settings.sources.paths),
        workers_per_side=settings.workers_per_side or None,
        select=True,
        measure_all="--all: every variant measured, as asked" if settings.measure_all else None,
    )
