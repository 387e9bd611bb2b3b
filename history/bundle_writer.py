"""Writing a run bundle directory in the layout history.validate reads.

Producers (the harness on a GPU runner, test factories) build history.bundle dataclasses and
call `write_bundle`; benchmark.json is passed as the pytest-benchmark document the harness
produced (its `extra_info["attnwatch"]` entries are CaseTiming dicts).
Files are written to a temporary name and renamed, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from history.bundle import (
    BENCHMARK_FILE,
    BUILDS_FILE,
    CORRECTNESS_FILE,
    MANIFEST_FILE,
    NCU_FILE,
    NCU_RAW_FILE,
    OUTCOMES_FILE,
    SAMPLES_FILE,
    BuildRecord,
    CaseOutcome,
    CorrectnessRecord,
    Manifest,
    NcuCaseMetrics,
    NcuKernelRow,
    file_envelope,
    to_json_dict,
)


def write_bundle(
    directory: str | Path,
    manifest: Manifest,
    benchmark_document: dict[str, Any],
    outcomes: list[CaseOutcome],
    correctness: list[CorrectnessRecord] | None = None,
    builds: list[BuildRecord] | None = None,
    samples: dict[str, list[float]] | None = None,
    ncu_kernels: list[NcuKernelRow] | None = None,
    ncu_cases: list[NcuCaseMetrics] | None = None,
    ncu_raw_csv: str | None = None,
    ncu_version: str | None = None,
) -> Path:
    """Write every file of one bundle; optional parts are written only when given."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    files = {"benchmark": BENCHMARK_FILE, "outcomes": OUTCOMES_FILE}
    write_json_atomic(out / BENCHMARK_FILE, benchmark_document)
    write_json_atomic(out / OUTCOMES_FILE, file_envelope(OUTCOMES_FILE, cases=outcomes))
    if correctness is not None:
        write_json_atomic(out / CORRECTNESS_FILE, file_envelope(CORRECTNESS_FILE, records=correctness))
        files["correctness"] = CORRECTNESS_FILE
    if builds is not None:
        write_json_atomic(out / BUILDS_FILE, file_envelope(BUILDS_FILE, builds=builds))
        files["builds"] = BUILDS_FILE
    if samples is not None:
        write_json_atomic(out / SAMPLES_FILE, file_envelope(SAMPLES_FILE, unit="us", samples=samples))
        files["samples"] = SAMPLES_FILE
    if ncu_kernels is not None or ncu_cases is not None:
        write_json_atomic(out / NCU_FILE, file_envelope(
            NCU_FILE, ncu_version=ncu_version, kernels=ncu_kernels or [], cases=ncu_cases or []
        ))
        files["ncu"] = NCU_FILE
    if ncu_raw_csv is not None:
        write_bytes_atomic(out / NCU_RAW_FILE, ncu_raw_csv.encode("utf-8"))
        files["ncu_raw"] = NCU_RAW_FILE
    manifest.files = {**files, **manifest.files}
    write_json_atomic(out / MANIFEST_FILE, to_json_dict(manifest))  # last: its presence marks a complete bundle
    return out


def write_json_atomic(path: Path, data: Any) -> None:
    """JSON (no NaN/Inf: JSON has none) through a temporary file and a rename."""
    write_bytes_atomic(path, json.dumps(data, indent=1, sort_keys=False, allow_nan=False).encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write beside the target under a hidden temporary name, then rename: readers (and a
    validator running while a producer is killed) see the old file or the new one, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def finite_record(record: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN/Inf: a non-finite float becomes None (a record's own fields say why)."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
