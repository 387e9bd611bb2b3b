"""Kernels' results as the bundle's records: explicit, complete conversions.

kernels/ and history/ may not import each other (docs/design.md), so a check's result and a
build's report are defined in kernels/ (kernels.correctness.CheckResult, kernels.registry's
BuildReport: what the check and the compiler produce) and the records a bundle stores in
history/ (history.contract.bundle.CorrectnessRecord, BuildRecord: the contract, with the case a record
belongs to and every field required). ci, which may import both, converts here, naming every
field; nothing else copies one into the other.

Nothing is dropped on the way: every field of a kernels result is stored under its own name,
converted, or listed as not stored with the reason (the tables below), and a result carrying
a field this module does not know (one added in kernels/ and not here) is refused with its
name (UnmappedField), failing the case loudly.
The record built is then checked by the bundle writer as the reader will check it, so a
missing or mistyped field fails too, naming the file and field.

The measuring child may run another checkout's kernels/ (compare measures the merge base that
way), so a result can come from an older kernels/: fields are read by name, and the classes'
shape is kept stable for that reason.
"""

from __future__ import annotations

import dataclasses

from attnwatch.ci.plan import PlannedCase
from attnwatch.history.contract.bundle import BuildRecord, CaseKey, CorrectnessRecord


class UnmappedField(ValueError):
    """A kernels result has a field that no bundle field takes and that is not listed as unstored."""


# kernels.correctness.CheckResult: the fields stored under their own name, those converted
# (counts that mean "not measured" when nothing was compared; the index as a tuple), and those
# not stored, with the reason.
CHECK_SAME = frozenset(
    {"seed", "profile", "calls", "passed", "error", "atol", "rtol", "max_abs_err", "rel_err", "tolerance_used"}
)
CHECK_CONVERTED = frozenset({"violations", "nonfinite", "worst_index"})
CHECK_NOT_STORED = {"case_id": "the record's case id is the planned case's (checked to be the same)"}
# kernels' BuildReport: every field is stored under its own name.
BUILD_SAME = frozenset(
    {
        "variant",
        "ok",
        "error",
        "target",
        "cached",
        "source_hash",
        "compile_seconds",
        "registers_per_thread",
        "shared_mem_bytes",
        "stack_frame_bytes",
        "spill_store_bytes",
        "spill_load_bytes",
        "config",
        "log_tail",
    }
)


def correctness_record(case: PlannedCase, result) -> CorrectnessRecord:
    """One seed's check of `case` (a kernels.correctness.CheckResult) as the bundle's record."""
    _check_known(result, CHECK_SAME | CHECK_CONVERTED | set(CHECK_NOT_STORED))
    if result.case_id != case.case_id:
        raise ValueError(f"a check of {result.case_id!r} given for case {case.case_id!r}")
    # kernels leaves its counts at 0 when the check failed before any output was compared
    # (prepare raised, a wrong layout): the record says None, not measured, instead.
    measured = result.max_abs_err is not None or result.nonfinite > 0
    return CorrectnessRecord(
        **{f.name: getattr(case, f.name) for f in dataclasses.fields(CaseKey)},
        **{name: getattr(result, name) for name in CHECK_SAME},
        case_id=case.case_id,
        violations=result.violations if measured else None,
        nonfinite=result.nonfinite if measured else None,
        worst_index=tuple(result.worst_index) if result.worst_index is not None else None,
    )


def build_record(report) -> BuildRecord:
    """A variant's build report (kernels.registry.BuildReport) as the bundle's record."""
    _check_known(report, BUILD_SAME)
    return BuildRecord(**{name: getattr(report, name) for name in BUILD_SAME - {"config"}}, config=dict(report.config))


def failed_build(variant: str, error: str, compile_seconds: float | None = None) -> BuildRecord:
    """The record of a build that produced no report (it raised, crashed or hung)."""
    return BuildRecord(
        variant=variant,
        ok=False,
        error=error,
        target="",
        cached=False,
        source_hash=None,
        compile_seconds=compile_seconds,
        registers_per_thread=None,
        shared_mem_bytes=None,
        stack_frame_bytes=None,
        spill_store_bytes=None,
        spill_load_bytes=None,
        config={},
        log_tail="",
    )


def _check_known(result, known: frozenset[str]) -> None:
    cls = type(result)
    unknown = sorted({f.name for f in dataclasses.fields(cls)} - known)
    if unknown:
        raise UnmappedField(
            f"{cls.__module__}.{cls.__name__}.{unknown[0]}: no bundle field takes it; convert it in "
            "ci/records.py (adding it to the bundle's record) or list it as not stored, with the reason"
        )
