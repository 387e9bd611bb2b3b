"""The case list and run options compare measures with (the same defaults as `attnwatch run`)."""

from __future__ import annotations

from ci.environment import capture_environment
from ci.errors import UserError
from ci.plan import PlannedCase
from ci.run_config import default, timing_config
from ci.runner import RunOptions
from ci.selection import select_cases
from kernels.shapes import SHAPE_SETS


def plan_for(args) -> list[PlannedCase]:
    """Variants are the head's registry (a variant the base lacks shows up as `new`)."""
    if args.shapes not in SHAPE_SETS:
        raise UserError(f"--shapes: unknown shape set {args.shapes!r}; known: {', '.join(SHAPE_SETS)}")
    return select_cases(args.shapes, args.variants, args.dtypes, args.causal, device_kind="cuda").cases


def run_options(args) -> RunOptions:
    device_kind = capture_environment(probe_device=False).device_kind
    timeout = args.case_timeout or float(default(f"case_timeout_{device_kind}_s"))
    return RunOptions(shape_set=args.shapes, device_kind=device_kind, timing=timing_config(device_kind),
                      case_timeout_s=timeout, trigger="compare", ncu=bool(args.ncu),
                      notes="attnwatch compare round")
