"""The measurement the pytest plugin keeps in a benchmark entry: one writer, one validator.

A user's own pytest-benchmark suite that calls the `gpu_benchmark` fixture (ci/pytest_plugin)
gets, in each entry's `extra_info`, under MEASUREMENT_KEY:

    {"schema": "attnwatch.pytest_measurement", "schema_version": 1,
     "timing": CaseTiming,                 the engine's statistics (timing_mode cuda_events, or
                                           cpu_wall on a CPU: host wall-clock, never GPU figures)
     "timing_note": str,                   what the latencies are, in words
     "samples_us": [float, ...],           every per-call latency (len == timing.n)
     "flops_per_call": float | null,       what the test said one call does (flops=, bytes=)
     "bytes_per_call": float | null,
     "bandwidth_gbps": float | null,       bytes_per_call / median
     "correctness": CorrectnessRecord | null,   expected= / check= given
     "reference": CaseTiming | null,       reference= given: timed interleaved with the test's
     "reference_samples_us": [float, ...]}      call, its gap in timing.gap_to_baseline

and in pytest-benchmark's `machine_info`, under ENVIRONMENT_KEY, the Environment of the
measuring machine (the GPU model keys every series). `measurement_block` is the writer: it
parses what it produced with `parse_measurement`, the reader `history.contract.
pytest_benchmark_import` uses, so an entry the importer would refuse is never written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import CaseTiming, CorrectnessRecord, Environment, to_json_dict
from attnwatch.history.contract.checks import (
    build_dataclass,
    check_type,
    json_ready,
    require_latency,
    require_non_negative,
)
from attnwatch.history.contract.timings import parse_case_timing
from attnwatch.history.errors import BundleError

MEASUREMENT_KEY = "attnwatch_measurement"
ENVIRONMENT_KEY = "attnwatch_environment"
SCHEMA = "attnwatch.pytest_measurement"
SCHEMA_VERSION = 1
_WRITER = "<gpu_benchmark>"  # the "file" a writer-side refusal names


@dataclass
class Measurement:
    """One benchmark entry's measurement (module docstring)."""

    timing: CaseTiming
    timing_note: str
    samples_us: list[float]
    flops_per_call: float | None = None
    bytes_per_call: float | None = None
    bandwidth_gbps: float | None = None
    correctness: CorrectnessRecord | None = None
    reference: CaseTiming | None = None
    reference_samples_us: list[float] = field(default_factory=list)


_FIELDS = (
    "schema",
    "schema_version",
    "timing",
    "timing_note",
    "samples_us",
    "flops_per_call",
    "bytes_per_call",
    "bandwidth_gbps",
    "correctness",
    "reference",
    "reference_samples_us",
)


def measurement_block(measurement: Measurement) -> dict[str, Any]:
    """The JSON block to put in `extra_info[MEASUREMENT_KEY]`, checked as the importer checks it."""
    body = {name: to_json_dict(getattr(measurement, name)) for name in _FIELDS[2:]}
    block = json_ready({"schema": SCHEMA, "schema_version": SCHEMA_VERSION, **body})
    parse_measurement(block, _WRITER, f"extra_info.{MEASUREMENT_KEY}")
    return block


def parse_measurement(data: Any, path: Path | str, where: str) -> Measurement:
    """Validate one `extra_info[MEASUREMENT_KEY]` block; errors name the file and the field."""
    if not isinstance(data, dict):
        raise BundleError(path, where, "expected an object")
    if data.get("schema") != SCHEMA:
        raise BundleError(path, f"{where}.schema", f"expected {SCHEMA!r}, got {data.get('schema')!r}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise BundleError(
            path,
            f"{where}.schema_version",
            f"{version!r}: this attnwatch reads version {SCHEMA_VERSION}; upgrade attnwatch",
        )
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise BundleError(path, f"{where}.{unknown[0]}", "unknown field")
    missing = [name for name in _FIELDS if name not in data]
    if missing:
        raise BundleError(path, f"{where}.{missing[0]}", "missing")
    timing = parse_case_timing(data["timing"], path, f"{where}.timing")
    samples = _samples(data["samples_us"], timing, path, f"{where}.samples_us")
    note = check_type(str, data["timing_note"], path, f"{where}.timing_note")
    numbers = {}
    for name in ("flops_per_call", "bytes_per_call", "bandwidth_gbps"):
        value = data[name]
        numbers[name] = None if value is None else check_type(float, value, path, f"{where}.{name}")
        require_non_negative(numbers[name], path, f"{where}.{name}")
    correctness = None
    if data["correctness"] is not None:
        correctness = build_dataclass(CorrectnessRecord, data["correctness"], path, f"{where}.correctness")
        if correctness.case_id != timing.case_id:
            raise BundleError(
                path, f"{where}.correctness.case_id", f"{correctness.case_id!r} but the timing is of {timing.case_id!r}"
            )
    reference, reference_samples = None, []
    if data["reference"] is not None:
        reference = parse_case_timing(data["reference"], path, f"{where}.reference")
        if reference.case_id == timing.case_id:
            raise BundleError(path, f"{where}.reference.case_id", "the reference is a case of its own, not the test's")
        reference_samples = _samples(data["reference_samples_us"], reference, path, f"{where}.reference_samples_us")
    elif data["reference_samples_us"]:
        raise BundleError(path, f"{where}.reference_samples_us", "samples without a reference timing")
    return Measurement(
        timing,
        note,
        samples,
        correctness=correctness,
        reference=reference,
        reference_samples_us=reference_samples,
        **numbers,
    )


def parse_environment(data: Any, path: Path | str, where: str) -> Environment:
    """machine_info[ENVIRONMENT_KEY]: the Environment record (history.contract.bundle)."""
    return build_dataclass(Environment, data, path, where)


def environment_block(env: Environment) -> dict[str, Any]:
    """The writer of machine_info[ENVIRONMENT_KEY], checked as the importer checks it."""
    block = json_ready(to_json_dict(env))
    parse_environment(block, _WRITER, f"machine_info.{ENVIRONMENT_KEY}")
    return block


def _samples(data: Any, timing: CaseTiming, path: Path | str, where: str) -> list[float]:
    if not isinstance(data, list):
        raise BundleError(path, where, "expected a list of latencies")
    values = [check_type(float, v, path, f"{where}[{i}]") for i, v in enumerate(data)]
    for i, v in enumerate(values):
        require_non_negative(v, path, f"{where}[{i}]")
        require_latency(v, path, f"{where}[{i}]")
    if len(values) != timing.n:
        raise BundleError(path, where, f"{len(values)} samples but the timing says n={timing.n}")
    return values
