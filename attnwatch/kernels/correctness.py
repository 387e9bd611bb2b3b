"""The correctness check of one case: a variant's output against the float64 reference.

For each seed: fresh random inputs (the variant's own `prepare`, which returns them as
`Prepared.inputs`), the float64 reference of exactly those inputs (the case's operator's
`reference64`, kernels.operators: attention's is kernels.reference; kept between jobs by
kernels.reference_cache), then `calls` launches of
the prepared callable.
Before every launch the variant's output buffer (`Prepared.out`, when it has one) is filled
with NaN, so an element the kernel never writes stays NaN and fails; a kernel that only
works on its first call, or accumulates into its output, fails on the second.

Pass rule (elementwise, the `torch.allclose` form, plus finiteness):

    passed  <=>  no NaN/Inf in the output  and  |out - ref| <= atol + rtol * |ref| everywhere

with (atol, rtol) from the operator's per-dtype table (`Operator.tolerances`: attention's is
`tolerances.toml` here, RMSNorm's kernels/rmsnorm/tolerances.toml). Also reported:
max_abs_err and the relative error ||out - ref||_2 / ||ref||_2 (both over the finite
elements; non-finite ones are counted in `nonfinite`), the number of violating elements and
the index of the worst one in the output's own rank (attention's (b, h, s, d), RMSNorm's
(row, column)), so a failure says where it is (e.g. the last row of an odd S), and `tolerance_used` = max |out - ref| / (atol + rtol*|ref|), the margin of a
pass (0.4 means the worst element used 40% of its allowance). The inputs are also checked
to be unchanged by the kernel.

Anything the variant raises (in prepare or in the call, including asynchronous CUDA faults
surfaced by the synchronise) becomes `passed=False` with the error text: nothing escapes.
The module needs torch but not pytest: the harness calls it on a runner.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable

from attnwatch.toml_reader import read_toml

from .availability import runnable_device, skip_reason
from .cases import Case
from .inputs import INPUT_PROFILES, input_profile, input_shape, torch_dtype
from .operators import get_operator
from .reference_cache import cached_reference
from .registry import get
from .variant import Variant

TOLERANCES_PATH = Path(__file__).resolve().with_name("tolerances.toml")
ERROR_TEXT_LIMIT = 2000


class UnsupportedCase(Exception):
    """The case is not run on this machine (unavailable variant or declared unsupported)."""


class ToleranceFileError(ValueError):
    """tolerances.toml is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class Tolerance:
    dtype: str
    atol: float
    rtol: float
    reason: str
    # Bound on ||out - ref||_2 / ||ref||_2 beside the per-element rule, where a table gives one
    # (the pytest plugin's, ci/gpu_benchmark_tolerances.toml); None: the per-element rule alone.
    norm_rtol: float | None = None


@dataclass
class CheckResult:
    """One seed of one case. ci.records turns it into the bundle's record, field by field: a field
    added here must be added there too (it refuses one it does not know)."""

    case_id: str
    seed: int
    max_abs_err: float | None
    rel_err: float | None
    atol: float
    rtol: float
    passed: bool
    nonfinite: int = 0
    error: str | None = None
    violations: int = 0  # elements outside atol + rtol*|ref| (non-finite ones included)
    tolerance_used: float | None = None  # max |out - ref| / (atol + rtol*|ref|): < 1 passes; the margin
    worst_index: tuple[int, ...] | None = None  # of the worst violation, in the output's rank
    calls: int = 0  # launches checked for this seed
    profile: str = "normal"  # kernels.inputs.INPUT_PROFILES: what the inputs looked like

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["worst_index"] = list(self.worst_index) if self.worst_index is not None else None
        return data


def load_tolerances(path: Path | str = TOLERANCES_PATH) -> dict[str, Tolerance]:
    """The per-dtype tolerance table; ToleranceFileError names the file and field on bad input."""
    path = Path(path)
    data = read_toml(path, "tolerance table", ToleranceFileError)
    table = data.get("dtype")
    if not isinstance(table, dict) or not table:
        raise ToleranceFileError(f"{path}: [dtype.<name>] tables missing")
    tolerances = {}
    for name, entry in table.items():
        where = f"{path}: dtype.{name}"
        if not isinstance(entry, dict):
            raise ToleranceFileError(f"{where}: must be a table")
        for key in ("atol", "rtol", "norm_rtol"):
            value = entry.get(key)
            if key == "norm_rtol" and value is None:
                continue
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not (0 <= value < 1):
                raise ToleranceFileError(f"{where}.{key}: must be a number in [0, 1), got {value!r}")
        reason = entry.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise ToleranceFileError(f"{where}.reason: every tolerance needs a reason")
        unknown = set(entry) - {"atol", "rtol", "norm_rtol", "reason"}
        if unknown:
            raise ToleranceFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        norm = entry.get("norm_rtol")
        tolerances[name] = Tolerance(
            name, float(entry["atol"]), float(entry["rtol"]), reason.strip(), None if norm is None else float(norm)
        )
    return tolerances


def tolerance_for(
    dtype: str, table: dict[str, Tolerance] | None = None, path: Path | str = TOLERANCES_PATH
) -> Tolerance:
    """`dtype`'s row of `table`, or of the table at `path` (default: attention's)."""
    table = load_tolerances(path) if table is None else table
    try:
        return table[dtype]
    except KeyError:
        raise ToleranceFileError(f"{Path(path).name}: no tolerance for dtype {dtype!r}") from None


def operator_tolerances_path(operator: str) -> Path:
    """The tolerance table of `operator`'s cases (Operator.tolerances; None: attention's, here)."""
    return get_operator(operator).tolerances or TOLERANCES_PATH


def _error_text(stage: str, exc: BaseException) -> str:
    text = f"{stage}: {type(exc).__name__}: {exc}".strip()
    return text if len(text) <= ERROR_TEXT_LIMIT else text[: ERROR_TEXT_LIMIT - 3] + "..."


def _layout_problem(
    name: str, tensor: Any, case: Case, expected: tuple[int, ...] | None, *, contiguous: bool = True
) -> str | None:
    """The layout convention: contiguous, in the case dtype, of the `expected` shape (attention's
    inputs and output: (B, H, S, D), kernels.inputs; any operator's output: its reference's; None:
    the shape is not checked).

    A library's own returned output only needs the logical shape: SDPA's memory-efficient
    backend, for one, returns a (B, S, H, D)-strided view of the same values, and forcing a
    copy would add a kernel to what is timed."""
    import torch

    if not isinstance(tensor, torch.Tensor):
        return f"{name} is {type(tensor).__name__}, not a tensor"
    if expected is not None and tuple(tensor.shape) != expected:
        named = "(B, H, S, D) = " if case.operator == "attention" else ""
        return f"{name} has shape {tuple(tensor.shape)}, expected {named}{expected}"
    if tensor.dtype != torch_dtype(case.dtype):
        return f"{name} has dtype {tensor.dtype}, expected {torch_dtype(case.dtype)}"
    if contiguous and not tensor.is_contiguous():
        return f"{name} is not contiguous (strides {tensor.stride()})"
    return None


def _synchronize(device: Any) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


@dataclass
class _Comparison:
    max_abs_err: float | None
    rel_err: float | None
    nonfinite: int
    violations: int
    worst_index: tuple[int, ...] | None
    tolerance_used: float | None = None


def compare(out: Any, ref: Any, atol: float, rtol: float) -> _Comparison:
    """Elementwise comparison of an output with the float64 reference (see module doc)."""
    import torch

    out64 = out.to(torch.float64)
    finite = torch.isfinite(out64)
    nonfinite = int((~finite).sum().item())
    diff = torch.where(finite, (out64 - ref).abs(), torch.zeros((), dtype=torch.float64, device=ref.device))
    allowed = atol + rtol * ref.abs()
    excess = torch.where(finite, diff - allowed, torch.full((), math.inf, dtype=torch.float64, device=ref.device))
    violations = int((excess > 0).sum().item())
    worst_index = None
    if violations:
        flat = int(torch.argmax(excess).item())
        worst_index = tuple(int(i) for i in _unravel(flat, tuple(out.shape)))
    if nonfinite == out64.numel():
        return _Comparison(None, None, nonfinite, violations, worst_index)
    ref_finite = torch.where(finite, ref, torch.zeros((), dtype=torch.float64, device=ref.device))
    ref_norm = float(torch.linalg.vector_norm(ref_finite).item())
    err_norm = float(torch.linalg.vector_norm(diff).item())
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else math.inf)
    used = float((diff / allowed).max().item()) if atol > 0 else None
    return _Comparison(float(diff.max().item()), rel, nonfinite, violations, worst_index, used)


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return list(reversed(index))


def _input_names(case: Case, count: int) -> tuple[str, ...]:
    """How a message names the inputs: attention's q, k, v; another operator's by position."""
    if case.operator == "attention" and count == 3:
        return ("q", "k", "v")
    return tuple(f"input {i}" for i in range(count))


def _index_name(case: Case) -> str:
    return "(b, h, s, d)" if case.operator == "attention" else "index"


def _check_seed(
    variant: Variant, case: Case, device: Any, seed: int, tol: Tolerance, calls: int, profile: str
) -> CheckResult:
    import torch

    def failed(error: str, calls_done: int = 0) -> CheckResult:
        return CheckResult(
            case.id, seed, None, None, tol.atol, tol.rtol, False, error=error, calls=calls_done, profile=profile
        )

    try:
        with input_profile(profile):
            prepared = variant.prepare(case, device, seed)
        _synchronize(device)
    except Exception as exc:  # a broken variant costs its case, never the run
        return failed(_error_text("prepare", exc))
    operator = get_operator(case.operator)
    assert prepared.inputs is not None  # Prepared.__post_init__ sets it
    inputs = tuple(prepared.inputs)
    names = _input_names(case, len(inputs))
    expected = input_shape(case) if case.operator == "attention" else None
    for name, tensor in zip(names, inputs):
        problem = _layout_problem(name, tensor, case, expected)
        if problem:
            return failed(f"prepare: {problem}")
    originals = [t.clone() for t in inputs]
    try:
        ref = cached_reference(operator, case, inputs, seed, profile)
    except Exception as exc:
        return failed(_error_text("reference", exc))
    if prepared.out is not None:
        problem = _layout_problem("Prepared.out", prepared.out, case, tuple(ref.shape))
        if problem:
            return failed(f"prepare: {problem}")

    worst: CheckResult | None = None
    for call in range(1, calls + 1):
        try:
            if prepared.out is not None:
                prepared.out.fill_(float("nan"))
            result = prepared.fn()
            _synchronize(device)
        except Exception as exc:
            return failed(_error_text(f"call {call}", exc), call)
        out: Any = result if result is not None else prepared.out  # checked to be a tensor next
        problem = _layout_problem("output", out, case, tuple(ref.shape), contiguous=out is prepared.out)
        if problem:
            return failed(f"call {call}: {problem}", call)
        if out.device != inputs[0].device:
            return failed(f"call {call}: output on {out.device}, inputs on {inputs[0].device}", call)
        try:
            cmp = compare(out, ref, tol.atol, tol.rtol)
        except Exception as exc:  # e.g. out of memory for the float64 comparison
            return failed(_error_text(f"call {call}: compare", exc), call)
        passed = cmp.nonfinite == 0 and cmp.violations == 0
        error = None
        if cmp.nonfinite:
            error = f"call {call}: {cmp.nonfinite} NaN/Inf (or unwritten) output elements"
        elif cmp.violations:
            error = (
                f"call {call}: {cmp.violations} elements outside atol={tol.atol:g} + rtol={tol.rtol:g}*|ref|, "
                f"worst at {_index_name(case)} = {cmp.worst_index}"
            )
        current = CheckResult(
            case.id,
            seed,
            cmp.max_abs_err,
            cmp.rel_err,
            tol.atol,
            tol.rtol,
            passed,
            cmp.nonfinite,
            error,
            cmp.violations,
            cmp.tolerance_used,
            cmp.worst_index,
            call,
            profile,
        )
        if (
            worst is None
            or (worst.passed and not passed)
            or (worst.passed == passed and (current.max_abs_err or 0.0) > (worst.max_abs_err or 0.0))
        ):
            worst = current
        worst.calls = call
    assert worst is not None
    try:
        changed = [n for n, before, now in zip(names, originals, inputs) if not torch.equal(before, now)]
    except Exception as exc:
        return failed(_error_text("input check", exc), calls)
    if changed:
        worst.passed = False
        note = f"the kernel modified its input(s) {', '.join(changed)}"
        worst.error = f"{worst.error}; {note}" if worst.error else note
    return worst


def check_case(
    variant: Variant | str,
    case: Case,
    device: Any | None = None,
    seeds: Iterable[int] = (0, 1, 2),
    *,
    calls: int = 2,
    tolerances: dict[str, Tolerance] | None = None,
    profile: str = "normal",
) -> list[CheckResult]:
    """Check `case` of `variant` on `device` (default: `runnable_device()`), one result per seed.

    `profile` picks the inputs (kernels.inputs.INPUT_PROFILES): "normal" is the suite;
    "large_logits" is the opt-in stress of the online-softmax max subtraction.

    Raises UnsupportedCase when the case is not run here (with the reason: callers record it
    as a skip, never as a failure); every failure of the variant itself is a result.
    """
    variant = get(variant) if isinstance(variant, str) else variant
    if case.variant != variant.name:
        raise ValueError(f"case {case.id} is not a case of variant {variant.name!r}")
    reason = skip_reason(variant, case)
    if reason:
        raise UnsupportedCase(f"{case.id}: {reason}")
    if calls < 1:
        raise ValueError("calls must be >= 1")
    if profile not in INPUT_PROFILES:
        raise ValueError(f"unknown input profile {profile!r}; known: {', '.join(INPUT_PROFILES)}")
    tol = tolerance_for(case.dtype, tolerances, operator_tolerances_path(case.operator))
    device = runnable_device() if device is None else device
    return [_check_seed(variant, case, device, int(seed), tol, calls, profile) for seed in seeds]
