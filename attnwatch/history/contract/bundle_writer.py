"""The one writer of run bundles (the layout history.contract.bundle documents, history.contract.validate reads).

Every producer writes through here: `attnwatch run` and `attnwatch compare` (ci.bundle_assembly
assembles their records), the ncu pass and the tests' factory. Before any file is written, each
document is encoded as it will be stored, parsed back from those bytes and checked by the
reader's own checks (the strict JSON reader of history.contract.json_limits, then
history.contract.validate.check_documents: every field, the latency floor, the timestamp rule, the
manifest's rules, the files' agreement), so a bundle the reader would refuse fails at the producer, with the file and
field named, never later at ingest: a writer and a reader of one contract cannot disagree.

Files are written to a hidden temporary name and renamed, so a reader never sees half a
file, and `manifest.json` is written last: a directory with a manifest is a complete bundle.
benchmark.json is passed as the pytest-benchmark document of the harness's host timing (its
entries name their case in `extra_info["attnwatch_case"]`) and written as it is; the GPU
timings go to timings.json (history.contract.timings, their one writer).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import (
    BENCHMARK_FILE,
    MANIFEST_FILE,
    NCU_FILE,
    NCU_RAW_FILE,
    RECORD_LISTS,
    SAMPLES_FILE,
    SASS_FILE,
    SCHEMA_VERSIONS,
    TIMINGS_FILE,
    BuildRecord,
    CaseOutcome,
    CaseTiming,
    CorrectnessRecord,
    Manifest,
    NcuCaseMetrics,
    NcuKernelRow,
    file_envelope,
)
from attnwatch.history.contract.checks import (
    build_dataclass,
    check_envelope,
    check_record,
    json_ready,
    parse_json_bytes,
)
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.ncu_csv import check_bundle_csv
from attnwatch.history.contract.sass_file import SassRecords, sass_document
from attnwatch.history.contract.timings import timings_document
from attnwatch.history.contract.validate import allows_constants, check_documents, read_documents

NOTES_LIMIT = 4000  # characters of a manifest's notes


@dataclass
class NcuFiles:
    """An ncu pass: ncu.json's records, when ncu printed any, its CSV (ncu_raw.csv), and when
    the profiled variants' binaries were read, their static code (sass.json)."""

    ncu_version: str | None
    kernels: list[NcuKernelRow]
    cases: list[NcuCaseMetrics]
    raw_csv: str = ""
    sass: SassRecords | None = None


@dataclass
class BundleContents:
    """Everything one bundle holds; optional parts are written only when given."""

    manifest: Manifest
    benchmark: dict[str, Any]  # pytest-benchmark's document of the host timing (no entries: none ran)
    outcomes: list[CaseOutcome]
    timings: list[CaseTiming] = field(default_factory=list)  # one per timed case
    correctness: list[CorrectnessRecord] | None = None
    builds: list[BuildRecord] | None = None
    samples: dict[str, list[float]] | None = None  # case id -> per-call latencies (µs)
    sample_clocks: dict[str, list[float | None]] | None = None  # case id -> each sample's SM clock (MHz)
    ncu: NcuFiles | None = None


def write_bundle(directory: str | Path, contents: BundleContents) -> Path:
    """Check every file as the reader will, then write them, the manifest last; returns the
    directory. A bundle the reader would refuse raises BundleError before any file is written."""
    out = Path(directory)
    documents: dict[str, Any] = {
        TIMINGS_FILE: timings_document(contents.timings, out),
        BENCHMARK_FILE: contents.benchmark,
    }
    files = {"timings": TIMINGS_FILE, "benchmark": BENCHMARK_FILE}
    for role in ("outcomes", "correctness", "builds"):  # RECORD_LISTS names, one list per file
        records = getattr(contents, role)
        if records is not None:
            files[role], documents[files[role]] = _list_document({role: records})
    if contents.samples is not None:
        files["samples"], documents[SAMPLES_FILE] = (
            SAMPLES_FILE,
            file_envelope(
                SAMPLES_FILE,
                unit="us",
                samples=json_ready(contents.samples),
                sm_clock_mhz=json_ready(contents.sample_clocks or {}),
            ),
        )
    if contents.ncu is not None:
        files["ncu"], documents[NCU_FILE] = _ncu_document(contents.ncu)
        files.update(_sass_file(contents.ncu, out, documents))
    manifest = dataclasses.replace(
        contents.manifest, files={**files, **_raw_csv_file(contents.ncu), **contents.manifest.files}
    )
    documents[MANIFEST_FILE] = json_ready(dataclasses.asdict(manifest))
    encoded = _checked_bytes(out, documents, contents.ncu, {})
    out.mkdir(parents=True, exist_ok=True)
    _write_all(out, encoded)
    return out


def write_ncu_files(directory: str | Path, ncu: NcuFiles) -> dict[str, str]:
    """Write ncu.json (and ncu_raw.csv when there is CSV) into `directory`, a bundle or an
    `attnwatch ncu` folder; returns role -> file name for a manifest's `files`."""
    directory = Path(directory)
    name, document = _ncu_document(ncu)
    for key, records in (("kernels", ncu.kernels), ("cases", ncu.cases)):  # as the reader checks them
        for i, record in enumerate(records):
            check_record(record, directory / name, f"{key}[{i}]")
    _check_raw_csv(directory, ncu)
    write_json_atomic(directory / name, document)
    _write_raw_csv(directory, ncu)
    return {"ncu": name, **_raw_csv_file(ncu)}


def add_ncu(directory: str | Path, ncu: NcuFiles, finished_at: str, note: str = "") -> Path:
    """Add an ncu pass to a bundle `write_bundle` already wrote (the pass can outlast a GPU job).

    The bundle with the pass added is checked as the reader will check it; then ncu.json (and
    ncu_raw.csv) are renamed into place first, the manifest last: its `files` then lists them,
    `finished_at` becomes the end of the ncu pass and `note` is appended to its notes. Killed at
    any point, the directory is still the valid bundle it was before.
    """
    directory = Path(directory)
    stored, _ = read_documents(directory)
    path = directory / MANIFEST_FILE
    schema = Manifest.schema
    current = SCHEMA_VERSIONS[schema]
    if isinstance(stored.get(MANIFEST_FILE), dict) and stored[MANIFEST_FILE].get("schema_version") != current:
        raise BundleError(
            path, "schema_version", f"an ncu pass is added only to a bundle of the current format ({current})"
        )
    document = check_envelope(stored.get(MANIFEST_FILE), path, schema, current, {})
    manifest: Manifest = build_dataclass(Manifest, document, path, "")
    name, ncu_document = _ncu_document(ncu)
    documents: dict[str, Any] = {NCU_FILE: ncu_document}
    files = {**manifest.files, "ncu": name, **_raw_csv_file(ncu), **_sass_file(ncu, directory, documents)}
    notes = "; ".join(filter(None, [manifest.notes, note]))[:NOTES_LIMIT]
    manifest = dataclasses.replace(manifest, files=files, finished_at=finished_at, notes=notes)
    documents[MANIFEST_FILE] = json_ready(dataclasses.asdict(manifest))
    _write_all(directory, _checked_bytes(directory, documents, ncu, stored))
    return directory


def _checked_bytes(
    out: Path, documents: dict[str, Any], ncu: NcuFiles | None, stored: dict[str, Any]
) -> dict[str, bytes]:
    """Each document's bytes as they will be stored, after the bundle they make (with the
    `stored` files it keeps) passed the reader's checks on those very bytes."""
    encoded = {name: _encode(out / name, document) for name, document in documents.items()}
    parsed = {
        **stored,
        **{
            name: parse_json_bytes(data, out / name, allow_constants=allows_constants(name))
            for name, data in encoded.items()
        },
    }
    if ncu is not None and _raw_csv_file(ncu):
        encoded[NCU_RAW_FILE] = ncu.raw_csv.encode("utf-8")
        parsed[NCU_RAW_FILE] = ncu.raw_csv
    check_documents(parsed, out, known_commit=False)  # a commit outside git is compare's; ingest refuses it
    return encoded


def _write_all(out: Path, encoded: dict[str, bytes]) -> None:
    """Every file through a rename, the manifest last (a directory with a manifest is complete)."""
    for name, data in encoded.items():
        if name != MANIFEST_FILE:
            write_bytes_atomic(out / name, data)
    write_bytes_atomic(out / MANIFEST_FILE, encoded[MANIFEST_FILE])


def _encode(path: Path, document: Any) -> bytes:
    try:
        return json.dumps(document, indent=1, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:  # NaN or Infinity, which JSON has not; a value of no JSON type
        raise BundleError(path, "json", f"cannot be written as JSON: {exc}") from None


def _list_document(lists: dict[str, list], **fields: Any) -> tuple[str, dict]:
    """(file name, JSON document) of the file holding these record lists (RECORD_LISTS names);
    checked with the rest of the bundle (_checked_bytes)."""
    specs = {name: RECORD_LISTS[name] for name in lists}
    (file_name,) = {spec.file for spec in specs.values()}
    payload = {spec.key: [json_ready(dataclasses.asdict(r)) for r in lists[name]] for name, spec in specs.items()}
    return file_name, file_envelope(file_name, **fields, **payload)


def _ncu_document(ncu: NcuFiles) -> tuple[str, dict]:
    return _list_document({"ncu_kernels": ncu.kernels, "ncu_cases": ncu.cases}, ncu_version=ncu.ncu_version)


def _sass_file(ncu: NcuFiles, out: Path, documents: dict[str, Any]) -> dict[str, str]:
    """sass.json's document added to `documents` when the pass read binaries; its role and name."""
    if ncu.sass is None:
        return {}
    documents[SASS_FILE] = sass_document(ncu.sass, out)
    return {"sass": SASS_FILE}


def _raw_csv_file(ncu: NcuFiles | None) -> dict[str, str]:
    return {"ncu_raw": NCU_RAW_FILE} if ncu is not None and ncu.raw_csv else {}


def _check_raw_csv(directory: Path, ncu: NcuFiles) -> None:
    """The CSV as the reader will check it: whole ncu tables only (history.contract.ncu_csv)."""
    if _raw_csv_file(ncu):
        check_bundle_csv(directory / NCU_RAW_FILE, ncu.raw_csv)


def _write_raw_csv(directory: Path, ncu: NcuFiles | None) -> None:
    if ncu is not None and _raw_csv_file(ncu):
        write_bytes_atomic(directory / NCU_RAW_FILE, ncu.raw_csv.encode("utf-8"))


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
