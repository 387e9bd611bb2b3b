"""Correctness of a gpu_benchmark call (ci/pytest_plugin.py) as the bundle's CorrectnessRecord.

Against `expected` (a tensor, or the reference call's output), two bounds, both required:

  - per element, the harness's own comparison (kernels.correctness.compare: float64,
    |out - expected| <= atol + rtol*|expected| everywhere, every element finite);
  - over the whole output, ||out - expected||_2 / ||expected||_2 <= norm_rtol (the record's
    `rel_err`): the per-element rule alone passes a small error spread over small values (a
    softmax's ~1e-2 sit under atol, so an output wrong by 1% everywhere passed). An all-zero
    `expected` has no relative error: the per-element rule alone decides.

The bounds are TOLERANCES (ci/gpu_benchmark_tolerances.toml), per dtype, each with its reason;
a test's atol=, rtol=, norm_rtol= override them. With `check`: the test's own predicate of the
output; False or an exception fails it. One seed (the test's inputs), one call.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, NamedTuple

from attnwatch.history.contract.bundle import CorrectnessRecord

ERROR_LIMIT = 500  # characters of an error kept in the record
TOLERANCES = Path(__file__).resolve().with_name("gpu_benchmark_tolerances.toml")


class Bounds(NamedTuple):
    """The bounds one call's output is held to (module docstring)."""

    atol: float
    rtol: float
    norm_rtol: float


class ToleranceUsageError(ValueError):
    """A dtype without a row in TOLERANCES and no bounds given by the test; or a bad bound."""


def bounds_for(dtype: str, atol: float | None, rtol: float | None, norm_rtol: float | None) -> Bounds:
    """The test's bounds where given, else TOLERANCES' row for `dtype`."""
    given = {"atol": atol, "rtol": rtol, "norm_rtol": norm_rtol}
    for name, value in given.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0):
            raise ToleranceUsageError(f"{name}={value!r}: a bound is a number >= 0")
    if atol is not None and rtol is not None and norm_rtol is not None:
        return Bounds(float(atol), float(rtol), float(norm_rtol))
    from attnwatch.kernels.correctness import load_tolerances

    table = load_tolerances(TOLERANCES)
    if dtype not in table:
        raise ToleranceUsageError(
            f"no default tolerance for dtype {dtype!r} ({TOLERANCES.name} has "
            f"{', '.join(sorted(table))}): pass atol=, rtol= and norm_rtol="
        )
    row = table[dtype]
    if row.norm_rtol is None:
        raise ToleranceUsageError(f"{TOLERANCES.name}: dtype.{dtype}.norm_rtol is missing")
    pick = lambda mine, default: default if mine is None else float(mine)  # noqa: E731
    return Bounds(pick(atol, row.atol), pick(rtol, row.rtol), pick(norm_rtol, row.norm_rtol))


def correctness_record(
    case_id: str,
    variant: str,
    shape: str,
    dtype: str,
    out: Any,
    expected: Any,
    check: Callable[[Any], Any] | None,
    bounds: Bounds,
) -> CorrectnessRecord:
    """The record of the output's check; `passed` False (with the reason) when it fails. A
    callable has no attention shape: its CaseKey's sizes are 1 and causal false, as in its
    CaseTiming (ci/engine/callables.py)."""
    fields: dict[str, Any] = dict(
        variant=variant,
        shape_id=shape,
        batch=1,
        heads=1,
        seq_len=1,
        head_dim=1,
        dtype=dtype,
        causal=False,
        case_id=case_id,
        seed=0,
        profile=None,
        calls=1,
        atol=bounds.atol,
        rtol=bounds.rtol,
        max_abs_err=None,
        rel_err=None,
        tolerance_used=None,
        violations=None,
        nonfinite=None,
        worst_index=None,
    )
    if expected is not None:
        problem = _compare(out, expected, bounds, dtype, fields)
        if problem:
            return CorrectnessRecord(passed=False, error=problem[:ERROR_LIMIT], **fields)
    if check is not None:
        try:
            verdict = check(out)
        except Exception as exc:  # noqa: BLE001 - the test's check raising is its verdict
            return CorrectnessRecord(passed=False, error=f"check: {type(exc).__name__}: {exc}"[:ERROR_LIMIT], **fields)
        if verdict is False:
            return CorrectnessRecord(passed=False, error="check returned False", **fields)
    return CorrectnessRecord(passed=True, error=None, **fields)


def _compare(out: Any, expected: Any, bounds: Bounds, dtype: str, fields: dict[str, Any]) -> str | None:
    """Fill the error fields; the reason it fails, or None."""
    import torch

    from attnwatch.kernels.correctness import compare

    if not isinstance(out, torch.Tensor):
        return f"the call returned {type(out).__name__}, not a tensor to compare with expected"
    expected = torch.as_tensor(expected).to(device=out.device, dtype=torch.float64)
    if tuple(out.shape) != tuple(expected.shape):
        return f"output shape {tuple(out.shape)} but expected {tuple(expected.shape)}"
    result = compare(out, expected, bounds.atol, bounds.rtol)
    fields.update(
        max_abs_err=result.max_abs_err,
        rel_err=result.rel_err,
        tolerance_used=result.tolerance_used,
        violations=result.violations,
        nonfinite=result.nonfinite,
        worst_index=result.worst_index,
    )
    if result.nonfinite or result.violations:
        return (
            f"{result.violations} element(s) outside atol {bounds.atol:g} + rtol {bounds.rtol:g}*|expected|"
            f" ({result.nonfinite} not finite), max abs error {result.max_abs_err}"
        )
    scale = float(torch.linalg.vector_norm(expected).item())
    if scale > 0 and result.rel_err is not None and not result.rel_err <= bounds.norm_rtol:
        rel = "inf" if math.isinf(result.rel_err) else f"{result.rel_err:.3g}"
        return (
            f"relative error ||out - expected|| / ||expected|| = {rel} is over norm_rtol {bounds.norm_rtol:g} "
            f"({dtype}: {TOLERANCES.name}; every element was within atol {bounds.atol:g} + rtol {bounds.rtol:g}"
            "*|expected|)"
        )
    return None
