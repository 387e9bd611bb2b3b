"""Kernels' results as the bundle's records: explicit, complete conversions.

kernels/ and history/ may not import each other (docs/design.md), so a check's result and a
build's report are defined in kernels/ (kernels.correctness.CheckResult, kernels.registry's
BuildReport: what the check and the compiler produce) and the records a bundle stores in
history/ (history.bundle.CorrectnessRecord, BuildRecord: the contract, with the case a record
belongs to and every field required). ci, which may import both, converts here, naming every
field; nothing else copies one into the other.

Nothing is dropped on the way: every field of a kernels result is converted or listed in
NOT_STORED with the reason, and a result carrying a field this module does not know (one added
in kernels/ and not here) is refused with its name (UnmappedField), failing the case loudly.
The record built is then checked by the bundle writer as the reader will check it, so a
missing or mistyped field fails too, naming the file and field.

The measuring child may run another checkout's kernels/ (compare measures the merge base that
way), so a result can come from an older kernels/: fields are read by name, and the classes'
shape is kept stable for that reason.
"""

from __future__ import annotations

import dataclasses

from ci.plan import PlannedCase
from history.bundle import BuildRecord, CorrectnessRecord


class UnmappedField(ValueError):
    """A kernels result has a field that no bundle field takes and that is not listed as unstored."""


# Fields of kernels' results the bundle does not store, with the reason.
CHECK_NOT_STORED = {"case_id": "the record's case id is the planned case's (checked to be the same)"}


def correctness_record(case: PlannedCase, result) -> CorrectnessRecord:
    """One seed's check of `case` (a kernels.correctness.CheckResult) as the bundle's record."""
    _check_known(result, CHECK_FIELDS, CHECK_NOT_STORED)
    if result.case_id != case.case_id:
        raise ValueError(f"a check of {result.case_id!r} given for case {case.case_id!r}")
    # kernels leaves its counts at 0 when the check failed before any output was compared
    # (prepare raised, a wrong layout): the record says None, not measured, instead.
    measured = result.max_abs_err is not None or result.nonfinite > 0
    return CorrectnessRecord(
        case_id=case.case_id,
        variant=case.variant,
        shape_id=case.shape_id,
        batch=case.batch,
        heads=case.heads,
        seq_len=case.seq_len,
        head_dim=case.head_dim,
        dtype=case.dtype,
        causal=case.causal,
        seed=result.seed,
        profile=result.profile,
        calls=result.calls,
        passed=result.passed,
        error=result.error,
        atol=result.atol,
        rtol=result.rtol,
        max_abs_err=result.max_abs_err,
        rel_err=result.rel_err,
        tolerance_used=result.tolerance_used,
        violations=result.violations if measured else None,
        nonfinite=result.nonfinite if measured else None,
        worst_index=tuple(result.worst_index) if result.worst_index is not None else None,
    )


# Every CheckResult field correctness_record reads.
CHECK_FIELDS = frozenset({
    "seed", "profile", "calls", "passed", "error", "atol", "rtol", "max_abs_err", "rel_err", "tolerance_used",
    "violations", "nonfinite", "worst_index",
})


def build_record(report) -> BuildRecord:
    """A variant's build report (kernels.registry.BuildReport) as the bundle's record."""
    _check_known(report, BUILD_FIELDS, {})
    return BuildRecord(
        variant=report.variant,
        ok=report.ok,
        target=report.target,
        compile_seconds=report.compile_seconds,
        registers_per_thread=report.registers_per_thread,
        shared_mem_bytes=report.shared_mem_bytes,
        spill_store_bytes=report.spill_store_bytes,
        spill_load_bytes=report.spill_load_bytes,
        stack_frame_bytes=report.stack_frame_bytes,
        source_hash=report.source_hash,
        cached=report.cached,
        config=dict(report.config),
        log_tail=report.log_tail,
        error=report.error,
    )


# Every BuildReport field build_record reads.
BUILD_FIELDS = frozenset({
    "variant", "ok", "target", "compile_seconds", "registers_per_thread", "shared_mem_bytes", "spill_store_bytes",
    "spill_load_bytes", "stack_frame_bytes", "source_hash", "cached", "config", "log_tail", "error",
})


def _check_known(result, converted: frozenset[str], not_stored: dict[str, str]) -> None:
    cls = type(result)
    unknown = sorted({f.name for f in dataclasses.fields(cls)} - converted - set(not_stored))
    if unknown:
        raise UnmappedField(f"{cls.__module__}.{cls.__name__}.{unknown[0]}: no bundle field takes it; convert it in "
                            "ci/records.py (adding it to the bundle's record) or list it as not stored, with the reason")
