"""The case list and run options compare measures with (the same defaults as `attnwatch run`)."""

from __future__ import annotations

from ci.environment import capture_environment
from ci.errors import UserError
from ci.plan import PlannedCase, plan_cases
from ci.run_config import default, default_dtypes, timing_config
from ci.runner import RunOptions
from kernels.registry import all_variants
from kernels.shapes import shape_set


def plan_for(args) -> list[PlannedCase]:
    """Variants are the head's registry (a variant the base lacks shows up as `new`)."""
    try:
        shapes = shape_set(args.shapes)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    known = [v.name for v in all_variants()]
    variants = [v.strip() for v in args.variants.split(",")] if args.variants else known
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise UserError(f"--variants: unknown {unknown}; known: {', '.join(known)}")
    dtypes = [d.strip() for d in args.dtypes.split(",")] if args.dtypes else default_dtypes(args.shapes)
    causal = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    return plan_cases(variants, shapes, dtypes, causal)


def run_options(args) -> RunOptions:
    device_kind = capture_environment(probe_device=False).device_kind
    timeout = args.case_timeout or float(default(f"case_timeout_{device_kind}_s"))
    return RunOptions(shape_set=args.shapes, device_kind=device_kind, timing=timing_config(device_kind),
                      case_timeout_s=timeout, trigger="compare", ncu=bool(args.ncu),
                      notes="attnwatch compare round")
