"""What the command line's flags become: the settings objects the layers below take.

An argparse namespace stays in attnwatch.cli: a command builds these frozen records from its
flags and hands them down, so no module below reads or changes a namespace
(tests/test_settings_boundary.py checks it).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from attnwatch.ci.variant_modules import VariantSources

if TYPE_CHECKING:  # ci.compare.setup needs the measuring stack: imported when a command builds one
    from attnwatch.ci.compare.setup import CaseChoice, MeasureSettings


def variant_sources(args: argparse.Namespace) -> VariantSources:
    """--variant-module and --variant-path (ci.variant_modules.add_arguments)."""
    return VariantSources(modules=tuple(args.variant_module or ()), paths=tuple(args.variant_path or ()))


def case_choice(args: argparse.Namespace) -> CaseChoice:
    """--shapes, --variants, --dtypes, --causal and the variant flags of compare."""
    from attnwatch.ci.compare.setup import CaseChoice

    return CaseChoice(
        shapes=args.shapes,
        variants=args.variants,
        dtypes=args.dtypes,
        causal=args.causal,
        sources=variant_sources(args),
    )


def measure_settings(args: argparse.Namespace, shapes: str | None = None) -> MeasureSettings:
    """The session flags compare and bisect share; `shapes`: the shape set recorded when it is not
    --shapes (bisect's, which measures named cases)."""
    from attnwatch.ci.compare.setup import MeasureSettings

    return MeasureSettings(
        shapes=shapes if shapes is not None else args.shapes,
        method=args.method,
        correctness=not args.no_correctness,
        case_timeout_s=args.case_timeout,
        rounds=args.rounds,
        min_rounds=args.min_rounds,
        workers_per_side=args.workers_per_side,
        measure_all=bool(getattr(args, "all", False)),
        sources=variant_sources(args),
    )
