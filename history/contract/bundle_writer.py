"""The one writer of run bundles (the layout history.contract.bundle documents, history.contract.validate reads).

Every producer writes through here: the harness on a GPU runner (ci.bundle_writer assembles the
records from what its children measured), `attnwatch ncu` and the tests' factory. Each record
is checked as the reader will check it before anything is written (history.contract.checks.check_record),
so a record the reader would refuse fails at the producer with the file and field named,
never later at ingest, and no field can be dropped on the way: a writer and a reader of one
contract cannot disagree.

Files are written to a hidden temporary name and renamed, so a reader never sees half a
file, and `manifest.json` is written last: a directory with a manifest is a complete bundle.
benchmark.json is passed as the pytest-benchmark document the harness produced (its
`extra_info["attnwatch"]` entries are CaseTiming dicts), checked by the reader's own parser and
written as it is.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import (
    BENCHMARK_FILE,
    MANIFEST_FILE,
    NCU_FILE,
    NCU_RAW_FILE,
    RECORD_LISTS,
    SAMPLES_FILE,
    SCHEMA_VERSIONS,
    BuildRecord,
    CaseOutcome,
    CorrectnessRecord,
    Manifest,
    NcuCaseMetrics,
    NcuKernelRow,
    file_envelope,
)
from attnwatch.history.contract.bundle_upgrades import UPGRADERS
from attnwatch.history.contract.checks import build_dataclass, check_envelope, check_record, read_json_file
from attnwatch.history.contract.ncu_csv import check_bundle_csv
from attnwatch.history.contract.pytest_benchmark_import import parse_benchmark_document
from attnwatch.history.contract.validate import check_samples

NOTES_LIMIT = 4000  # characters of a manifest's notes


@dataclass
class NcuFiles:
    """An ncu pass: ncu.json's records and, when ncu printed any, its CSV (ncu_raw.csv)."""

    ncu_version: str | None
    kernels: list[NcuKernelRow]
    cases: list[NcuCaseMetrics]
    raw_csv: str = ""


@dataclass
class BundleContents:
    """Everything one bundle holds; optional parts are written only when given."""

    manifest: Manifest
    benchmark: dict[str, Any]  # the pytest-benchmark document
    outcomes: list[CaseOutcome]
    correctness: list[CorrectnessRecord] | None = None
    builds: list[BuildRecord] | None = None
    samples: dict[str, list[float]] | None = None  # case id -> per-call latencies (µs)
    ncu: NcuFiles | None = None


def write_bundle(directory: str | Path, contents: BundleContents) -> Path:
    """Check every record, then write every file of one bundle, the manifest last; returns the
    directory. A record the reader would refuse raises BundleError before any file is written."""
    out = Path(directory)
    parse_benchmark_document(contents.benchmark, out / BENCHMARK_FILE)  # its CaseTimings, as the reader checks them
    documents: dict[str, Any] = {BENCHMARK_FILE: contents.benchmark}
    files = {"benchmark": BENCHMARK_FILE}
    for role in ("outcomes", "correctness", "builds"):  # RECORD_LISTS names, one list per file
        records = getattr(contents, role)
        if records is not None:
            files[role], documents[files[role]] = _list_document(out, {role: records})
    if contents.samples is not None:
        path = out / SAMPLES_FILE
        files["samples"], documents[SAMPLES_FILE] = SAMPLES_FILE, file_envelope(
            SAMPLES_FILE, unit="us", samples=check_samples(contents.samples, path))
    if contents.ncu is not None:
        files["ncu"], documents[NCU_FILE] = _ncu_document(out, contents.ncu)
        _check_raw_csv(out, contents.ncu)
    manifest = dataclasses.replace(contents.manifest, files={**files, **_raw_csv_file(contents.ncu),
                                                             **contents.manifest.files})
    manifest_document = check_record(manifest, out / MANIFEST_FILE, "")
    out.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        write_json_atomic(out / name, document)
    _write_raw_csv(out, contents.ncu)
    write_json_atomic(out / MANIFEST_FILE, manifest_document)
    return out


def write_ncu_files(directory: str | Path, ncu: NcuFiles) -> dict[str, str]:
    """Write ncu.json (and ncu_raw.csv when there is CSV) into `directory`, a bundle or an
    `attnwatch ncu` folder; returns role -> file name for a manifest's `files`."""
    directory = Path(directory)
    name, document = _ncu_document(directory, ncu)
    _check_raw_csv(directory, ncu)
    write_json_atomic(directory / name, document)
    _write_raw_csv(directory, ncu)
    return {"ncu": name, **_raw_csv_file(ncu)}


def add_ncu(directory: str | Path, ncu: NcuFiles, finished_at: str, note: str = "") -> Path:
    """Add an ncu pass to a bundle `write_bundle` already wrote (the pass can outlast a GPU job).

    ncu.json (and ncu_raw.csv) are renamed into place first, the manifest last: its `files`
    then lists them, `finished_at` becomes the end of the ncu pass and `note` is appended to
    its notes. Killed at any point, the directory is still the valid bundle it was before.
    """
    directory = Path(directory)
    path = directory / MANIFEST_FILE
    schema = Manifest.schema
    document = check_envelope(read_json_file(path)[0], path, schema, SCHEMA_VERSIONS[schema], UPGRADERS)
    manifest: Manifest = build_dataclass(Manifest, document, path, "")
    files = {**manifest.files, **write_ncu_files(directory, ncu)}
    notes = "; ".join(filter(None, [manifest.notes, note]))[:NOTES_LIMIT]
    _write_manifest(directory, dataclasses.replace(manifest, files=files, finished_at=finished_at, notes=notes))
    return directory


def _list_document(directory: Path, lists: dict[str, list], **fields: Any) -> tuple[str, dict]:
    """(file name, JSON document) of the file holding these record lists (RECORD_LISTS names),
    every record checked as the reader will check it."""
    specs = {name: RECORD_LISTS[name] for name in lists}
    (file_name,) = {spec.file for spec in specs.values()}
    path = directory / file_name
    payload = {spec.key: [check_record(r, path, f"{spec.key}[{i}]") for i, r in enumerate(lists[name])]
               for name, spec in specs.items()}
    return file_name, file_envelope(file_name, **fields, **payload)


def _ncu_document(directory: Path, ncu: NcuFiles) -> tuple[str, dict]:
    return _list_document(directory, {"ncu_kernels": ncu.kernels, "ncu_cases": ncu.cases}, ncu_version=ncu.ncu_version)


def _raw_csv_file(ncu: NcuFiles | None) -> dict[str, str]:
    return {"ncu_raw": NCU_RAW_FILE} if ncu is not None and ncu.raw_csv else {}


def _check_raw_csv(directory: Path, ncu: NcuFiles) -> None:
    """The CSV as the reader will check it: whole ncu tables only (history.contract.ncu_csv)."""
    if _raw_csv_file(ncu):
        check_bundle_csv(directory / NCU_RAW_FILE, ncu.raw_csv)


def _write_raw_csv(directory: Path, ncu: NcuFiles | None) -> None:
    if _raw_csv_file(ncu):
        write_bytes_atomic(directory / NCU_RAW_FILE, ncu.raw_csv.encode("utf-8"))


def _write_manifest(out: Path, manifest: Manifest) -> None:
    write_json_atomic(out / MANIFEST_FILE, check_record(manifest, out / MANIFEST_FILE, ""))


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
