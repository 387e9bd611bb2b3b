"""Correctness of a gpu_benchmark call (ci/pytest_plugin.py) as the bundle's CorrectnessRecord.

Against `expected` (a tensor, or the reference call's output): the comparison of the
harness's own check, kernels.correctness.compare (float64, |out - expected| <= atol +
rtol*|expected| everywhere, finite), with the per-dtype tolerances of kernels/tolerances.toml
unless the test passes atol/rtol. With `check`: the test's own predicate of the output;
False or an exception fails it. One seed (the test's inputs), one call.
"""

from __future__ import annotations

from typing import Any, Callable

from attnwatch.history.contract.bundle import CorrectnessRecord

ERROR_LIMIT = 500  # characters of an error kept in the record


def correctness_record(case_id: str, variant: str, shape: str, dtype: str, out: Any, expected: Any,
                       check: Callable[[Any], Any] | None, atol: float | None, rtol: float | None) -> CorrectnessRecord:
    """The record of the output's check; `passed` False (with the reason) when it fails. A
    callable has no attention shape: its CaseKey's sizes are 1 and causal false, as in its
    CaseTiming (ci/engine/callables.py)."""
    tolerance = _tolerance(dtype, atol, rtol)
    fields: dict[str, Any] = dict(variant=variant, shape_id=shape, batch=1, heads=1, seq_len=1, head_dim=1,
                                  dtype=dtype, causal=False, case_id=case_id, seed=0, profile=None, calls=1, atol=tolerance[0], rtol=tolerance[1],
                                  max_abs_err=None, rel_err=None, tolerance_used=None, violations=None,
                                  nonfinite=None, worst_index=None)
    if expected is not None:
        problem = _compare(out, expected, tolerance, fields)
        if problem:
            return CorrectnessRecord(passed=False, error=problem, **fields)
    if check is not None:
        try:
            verdict = check(out)
        except Exception as exc:  # noqa: BLE001 - the test's check raising is its verdict
            return CorrectnessRecord(passed=False, error=f"check: {type(exc).__name__}: {exc}"[:ERROR_LIMIT], **fields)
        if verdict is False:
            return CorrectnessRecord(passed=False, error="check returned False", **fields)
    return CorrectnessRecord(passed=True, error=None, **fields)


def _tolerance(dtype: str, atol: float | None, rtol: float | None) -> tuple[float, float]:
    if atol is not None and rtol is not None:
        return float(atol), float(rtol)
    from attnwatch.kernels.correctness import load_tolerances

    table = load_tolerances()
    if dtype not in table:
        raise ValueError(f"gpu_benchmark: no tolerance for dtype {dtype!r} in kernels/tolerances.toml; pass atol= and rtol=")
    row = table[dtype]
    return (row.atol if atol is None else float(atol)), (row.rtol if rtol is None else float(rtol))


def _compare(out: Any, expected: Any, tolerance: tuple[float, float], fields: dict[str, Any]) -> str | None:
    """Fill the error fields; the reason it fails, or None."""
    import torch

    from attnwatch.kernels.correctness import compare

    if not isinstance(out, torch.Tensor):
        return f"the call returned {type(out).__name__}, not a tensor to compare with expected"
    expected = torch.as_tensor(expected).to(device=out.device, dtype=torch.float64)
    if tuple(out.shape) != tuple(expected.shape):
        return f"output shape {tuple(out.shape)} but expected {tuple(expected.shape)}"
    result = compare(out, expected, *tolerance)
    fields.update(max_abs_err=result.max_abs_err, rel_err=result.rel_err, tolerance_used=result.tolerance_used,
                  violations=result.violations, nonfinite=result.nonfinite, worst_index=result.worst_index)
    if result.nonfinite or result.violations:
        return (f"{result.violations} element(s) outside atol {tolerance[0]:g} + rtol {tolerance[1]:g}*|expected|"
                f" ({result.nonfinite} not finite), max abs error {result.max_abs_err}")
    return None
