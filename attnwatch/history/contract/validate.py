"""Load and validate a run bundle directory into a LoadedBundle, or refuse it.

Every known file is checked before anything is written: the directory is walked without
following links and holds none (check_tree), names are UTF-8, sizes are capped
before parsing (MAX_FILE_BYTES), content is UTF-8 JSON read by the strict reader
(history.contract.json_limits: no key given twice, bounded depth, 64-bit integers, floats that
do not overflow or underflow, no NaN/Infinity except in pytest-benchmark's benchmark.json), each
file's schema and schema_version are known (older versions are upgraded by
history.contract.bundle_upgrades), fields have their declared types, latencies are finite and at
least the floor of history/contract/limits.toml (not zero, negative or subnormal), timestamps
carry their UTC offset (checks.parse_utc: one without is refused), case ids are
unique, and the files agree with each other (outcomes vs. timings and benchmark entries,
samples vs. timings). A bundle of an older format is upgraded first (history.contract.timings). Names
that key a series fit history.contract.names; ncu_raw.csv holds whole ncu tables (history.contract.ncu_csv).
The first problem raises BundleError(path, field, message). The writer runs the same checks
(check_documents) on what it is about to write.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, TypedDict

from attnwatch.history.contract.bundle import (
    BENCHMARK_FILE,
    BUILDS_FILE,
    CASE_LINK_KEY,
    CASE_STATUSES,
    CORRECTNESS_FILE,
    FILE_SCHEMAS,
    MAX_FILE_BYTES,
    MANIFEST_FILE,
    NCU_FILE,
    NCU_RAW_FILE,
    OUTCOMES_FILE,
    REQUIRED_FILES,
    RUN_STATUSES,
    SAMPLES_FILE,
    SASS_FILE,
    SCHEMA_VERSIONS,
    RECORD_LISTS,
    TIMINGS_FILE,
    TRIGGERS,
    UNKNOWN_COMMIT,
    CaseOutcome,
    Environment,
    Manifest,
    RecordList,
)
from attnwatch.history.contract.bundle_upgrades import UPGRADERS
from attnwatch.history.contract.checks import (
    build_dataclass,
    check_envelope,
    check_type,
    check_utf8_name,
    first_below_floor,
    first_negative,
    parse_json_bytes,
    parse_utc,
    read_json_file,
    require_latency,
    require_non_negative,
)
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.loaded_bundle import LoadedBundle
from attnwatch.history.contract.names import CASE_ID, name_problem
from attnwatch.history.contract.ncu_csv import check_bundle_csv
from attnwatch.history.contract.series_key import pool_problem
from attnwatch.history.contract.pytest_benchmark_import import (
    load_pytest_benchmark_file,
    parse_benchmark_document,
    pytest_benchmark_run_id,
)
from attnwatch.history.contract.sass_file import check_sass
from attnwatch.history.contract.timings import BUNDLE_UPGRADERS, check_timings

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
SHA_PATTERN = re.compile(r"^[0-9a-f]{7,64}$")
PCI_BUS_ID_PATTERN = re.compile(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")
KNOWN_FILES = (*FILE_SCHEMAS, BENCHMARK_FILE, NCU_RAW_FILE)
# Most entries (files and folders, at any depth) a bundle directory may hold: it has 8 files of
# its own; a directory holding more is not a bundle, and walking it must not cost without bound.
MAX_BUNDLE_ENTRIES = 1000
# Statuses whose case never produced a timing; a benchmark entry for them contradicts outcomes.
UNTIMED_STATUSES = ("crashed", "timeout", "skipped", "unsupported")


def load_input(path: Path) -> LoadedBundle:
    """A bundle directory or a pytest-benchmark .json file; anything else is refused."""
    path = Path(path)
    check_utf8_name(path)
    if path.is_dir():
        return load_bundle(path)
    if path.is_file() and path.suffix == ".json":
        return load_pytest_benchmark_file(path)
    # The path is the subject: no field name after it ("PATH: path: ..." read as a doubled prefix).
    if not path.exists():
        raise BundleError(path, "", "no such file or directory")
    raise BundleError(path, "", "not a bundle directory or a pytest-benchmark .json file")


def load_bundle(directory: Path, known_commit: bool = True) -> LoadedBundle:
    """Read and validate every file of a bundle directory (the contract's one reader).

    `known_commit=False` accepts a manifest whose commit is UNKNOWN_COMMIT (a run measured
    outside a git checkout): compare can compare such a round, the history cannot place it.
    """
    directory = Path(directory)
    check_tree(directory)
    documents, content_sha256 = read_documents(directory)
    return check_documents(documents, directory, content_sha256, known_commit)


def read_documents(directory: Path) -> tuple[dict[str, Any], str]:
    """Every known file of a bundle directory, parsed (ncu_raw.csv as text), and the content
    hash of their bytes as stored (an upgraded bundle keeps the hash it was ingested under)."""
    documents: dict[str, Any] = {}
    hasher = hashlib.sha256()
    for name in KNOWN_FILES:
        path = directory / name
        if not path.exists() and not path.is_symlink():
            continue
        if name == NCU_RAW_FILE:
            raw = _read_raw(path)
            documents[name] = raw.decode("utf-8")
        else:
            documents[name], raw = read_json_file(path, allow_constants=allows_constants(name))
        _hash_file(hasher, name, raw)
    return documents, hasher.hexdigest()


def allows_constants(name: str) -> bool:
    """Whether a bundle file may hold NaN/Infinity, which JSON has not: only benchmark.json,
    pytest-benchmark's own file (it writes them; its fields are checked one by one). The writer
    parses what it writes with the same answer (history.contract.bundle_writer)."""
    return name == BENCHMARK_FILE


def check_documents(
    documents: dict[str, Any], directory: Path, content_sha256: str = "", known_commit: bool = True
) -> LoadedBundle:
    """The reader's checks of a bundle's files (file name -> parsed JSON; ncu_raw.csv its text),
    after upgrading an older bundle format (history.contract.timings.BUNDLE_UPGRADERS).

    load_bundle runs it on what it read, and history.contract.bundle_writer on what it is about to
    write: one set of rules for both sides of the contract.
    """
    directory = Path(directory)
    documents = _upgrade_format(documents, directory)
    for name in REQUIRED_FILES:
        if name not in documents:
            raise BundleError(directory / name, "file", "required bundle file is missing")
    manifest = _manifest(documents[MANIFEST_FILE], directory / MANIFEST_FILE, known_commit)
    for role, name in manifest.files.items():
        if name not in documents:
            raise BundleError(directory / MANIFEST_FILE, f"files.{role}", f"{name!r} is not a file of this bundle")
    if NCU_RAW_FILE in documents:
        check_bundle_csv(directory / NCU_RAW_FILE, documents[NCU_RAW_FILE])
    version, benchmarks, _ = parse_benchmark_document(documents[BENCHMARK_FILE], directory / BENCHMARK_FILE)
    bundle = LoadedBundle(
        source_path=str(directory),
        source="bundle",
        manifest=manifest,
        content_sha256=content_sha256,
        pytest_benchmark_version=version,
        benchmarks=benchmarks,
        timings=check_timings(documents[TIMINGS_FILE], directory / TIMINGS_FILE),
        **{name: _records(documents, directory, spec) for name, spec in RECORD_LISTS.items()},
        **_samples(documents, directory),
        ncu_version=_ncu_version(documents, directory),
        sass=check_sass(documents[SASS_FILE], directory / SASS_FILE) if SASS_FILE in documents else None,
    )
    _check_consistency(bundle, directory)
    return bundle


def _upgrade_format(documents: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Bring a bundle of an older format (its manifest's schema_version) to the current one,
    one format at a time; a manifest without a usable version is left for _manifest to refuse."""
    schema = FILE_SCHEMAS[MANIFEST_FILE]
    current = SCHEMA_VERSIONS[schema]
    while True:
        manifest = documents.get(MANIFEST_FILE)
        if not isinstance(manifest, dict) or manifest.get("schema") != schema:
            return documents
        version = manifest.get("schema_version")
        if isinstance(version, bool) or not isinstance(version, int) or version >= current:
            return documents
        step = BUNDLE_UPGRADERS.get(version)
        if step is None:
            raise BundleError(
                directory / MANIFEST_FILE, "schema_version", f"unknown bundle format {version} (no upgrader)"
            )
        documents = step(documents, directory)


def check_tree(directory: Path) -> list[tuple[Path, int]]:
    """Every entry under a bundle directory, with its size, walked without following a link.

    A symbolic link anywhere inside, or the directory itself being one, is refused: a bundle is
    data its producer wrote, and a link would make the reader open whatever the link names on
    the reading machine (`extra -> /etc`). So are a name that is not UTF-8 and a tree of more
    than MAX_BUNDLE_ENTRIES entries.
    Every reader of bundles (ingest, pull-request ingest, compare's rounds) comes through
    load_bundle, which calls this first.
    """
    directory = Path(directory)
    if directory.is_symlink():
        raise BundleError(directory, "path", "is a symbolic link; a bundle is a plain directory")
    if not directory.is_dir():
        raise BundleError(directory, "path", "not a directory")
    entries: list[tuple[Path, int]] = []
    pending = [directory]
    while pending:
        with os.scandir(pending.pop()) as listing:
            for entry in listing:  # unsorted: a huge folder costs only MAX_BUNDLE_ENTRIES steps
                path = Path(entry.path)
                check_utf8_name(path)
                if entry.is_symlink():
                    raise BundleError(path, "file", "is a symbolic link; bundles hold plain files only")
                if len(entries) >= MAX_BUNDLE_ENTRIES:
                    raise BundleError(directory, "path", f"holds more than {MAX_BUNDLE_ENTRIES} entries; not a bundle")
                entries.append((path, entry.stat(follow_symlinks=False).st_size))
                if entry.is_dir(follow_symlinks=False):
                    pending.append(path)
    return entries


def _hash_file(hasher, name: str, raw: bytes) -> None:
    """The bundle's content hash covers each known file's name, length and bytes, in KNOWN_FILES order."""
    hasher.update(f"{name}\0{len(raw)}\0".encode())
    hasher.update(raw)


def input_identity(path: Path) -> tuple[str, str] | None:
    """(run_id, content_sha256) of an input, computed without validating it; None when unsure.

    Lets ingest skip re-validating an input whose exact content is already stored (a stored
    run passed validation when it was ingested). Anything unusual returns None, and the full
    validation then runs and reports it.
    """
    path = Path(path)
    try:
        if path.is_symlink():
            return None
        if path.is_file() and path.suffix == ".json":
            if path.stat().st_size > MAX_FILE_BYTES:
                return None
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            return pytest_benchmark_run_id(digest), digest
        if not path.is_dir():
            return None
        check_tree(path)  # a link inside: validate it, so that it is refused rather than skipped
        hasher = hashlib.sha256()
        manifest_raw = b""
        for name in KNOWN_FILES:
            file = path / name
            if file.is_symlink():
                return None
            if not file.exists():
                continue
            if not file.is_file() or file.stat().st_size > MAX_FILE_BYTES:
                return None
            raw = file.read_bytes()
            manifest_raw = raw if name == MANIFEST_FILE else manifest_raw
            _hash_file(hasher, name, raw)
        # The strict reader, as everywhere (a manifest nested 100,000 deep is a BundleError here,
        # not a RecursionError); a manifest it refuses is then refused by the full validation.
        run_id = parse_json_bytes(manifest_raw, path / MANIFEST_FILE).get("run_id") if manifest_raw else None
    except (OSError, ValueError, AttributeError, BundleError):
        return None
    return (run_id, hasher.hexdigest()) if isinstance(run_id, str) else None


def _read_raw(path: Path) -> bytes:
    """ncu_raw.csv's bytes, which must be UTF-8 (check_documents checks its tables: history.contract.ncu_csv)."""
    if path.is_symlink() or not path.is_file():
        raise BundleError(path, "file", "not a regular file")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise BundleError(path, "size", f"over the {MAX_FILE_BYTES}-byte limit; refused unread")
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(path, "encoding", f"not UTF-8 (byte {exc.start})") from None
    return raw


def _envelope(doc: Any, path: Path, schema: str) -> dict:
    return check_envelope(doc, path, schema, SCHEMA_VERSIONS[schema], UPGRADERS)


def _manifest(doc: Any, path: Path, known_commit: bool = True) -> Manifest:
    doc = _envelope(doc, path, FILE_SCHEMAS[MANIFEST_FILE])
    manifest: Manifest = build_dataclass(Manifest, doc, path, "")
    if not RUN_ID_PATTERN.match(manifest.run_id):
        raise BundleError(path, "run_id", f"{manifest.run_id[:80]!r}: use 1-128 of A-Z a-z 0-9 . _ : -")
    if known_commit or manifest.commit_sha != UNKNOWN_COMMIT:
        _check_sha(manifest.commit_sha, path)
    if manifest.parent_sha is not None and not SHA_PATTERN.match(manifest.parent_sha):
        raise BundleError(path, "parent_sha", f"{manifest.parent_sha[:80]!r} is not a lowercase hex git SHA")
    if manifest.trigger not in TRIGGERS:
        raise BundleError(path, "trigger", f"{manifest.trigger!r} is not one of {TRIGGERS}")
    if manifest.status not in RUN_STATUSES:
        raise BundleError(path, "status", f"{manifest.status!r} is not one of {RUN_STATUSES}")
    for name in ("started_at", "finished_at", "commit_date"):  # to UTC, by checks.parse_utc's rule
        value = getattr(manifest, name)
        if value is not None:
            setattr(manifest, name, parse_utc(value, path, name))
    if manifest.finished_at < manifest.started_at:
        raise BundleError(path, "finished_at", "is before started_at")
    if manifest.pr_number is not None and manifest.pr_number < 1:
        raise BundleError(path, "pr_number", f"{manifest.pr_number} is not a pull request number")
    if manifest.environment.device_kind not in ("cuda", "cpu"):
        raise BundleError(
            path, "environment.device_kind", f"{manifest.environment.device_kind!r}: expected 'cuda' or 'cpu'"
        )
    _check_gpu_identity(manifest.environment, path)
    return manifest


def _check_gpu_identity(env: Environment, path: Path) -> None:
    """The GPU identity and pool fields key series and alerts: well-formed, or the bundle is refused."""
    if env.pool is not None and (problem := pool_problem(env.pool)):
        raise BundleError(path, "environment.pool", problem)
    if env.gpu_pci_bus_id is not None and not PCI_BUS_ID_PATTERN.match(env.gpu_pci_bus_id):
        raise BundleError(
            path,
            "environment.gpu_pci_bus_id",
            f"{env.gpu_pci_bus_id[:80]!r} is not a PCI bus id as NVML prints it (00000000:19:00.0)",
        )
    if env.gpu_index is not None and not 0 <= env.gpu_index < 4096:
        raise BundleError(path, "environment.gpu_index", f"{env.gpu_index} is not an NVML device index")


def _check_sha(sha: str, path: Path) -> None:
    if not SHA_PATTERN.match(sha):
        raise BundleError(path, "commit_sha", f"{sha[:80]!r} is not a lowercase hex git SHA")


def _records(docs: dict, directory: Path, spec: RecordList) -> list[Any]:
    """spec.file's records, each a spec.record (a list of Any: the record type varies with spec)."""
    if spec.file not in docs:
        return []
    path = directory / spec.file
    doc = _envelope(docs[spec.file], path, FILE_SCHEMAS[spec.file])
    items = doc.get(spec.key, [])
    if not isinstance(items, list):
        raise BundleError(path, spec.key, "expected a list")
    return [build_dataclass(spec.record, item, path, f"{spec.key}[{i}]") for i, item in enumerate(items)]


def _ncu_version(docs: dict, directory: Path) -> str | None:
    if NCU_FILE not in docs:
        return None
    version = docs[NCU_FILE].get("ncu_version")
    if version is not None and not isinstance(version, str):
        raise BundleError(directory / NCU_FILE, "ncu_version", "expected a string")
    return version


class _Samples(TypedDict):
    """LoadedBundle's fields that samples.json fills."""

    samples: dict[str, list[float]]
    sample_clocks: dict[str, list[float | None]]


def _samples(docs: dict, directory: Path) -> _Samples:
    """LoadedBundle's samples and sample_clocks from samples.json (both empty without it)."""
    if SAMPLES_FILE not in docs:
        return {"samples": {}, "sample_clocks": {}}
    path = directory / SAMPLES_FILE
    doc = _envelope(docs[SAMPLES_FILE], path, FILE_SCHEMAS[SAMPLES_FILE])
    if doc.get("unit", "us") != "us":
        raise BundleError(path, "unit", f"{doc.get('unit')!r}: samples are stored in microseconds ('us')")
    samples = check_samples(doc.get("samples", {}), path)
    clocks = check_type(dict[str, list[float | None]], doc.get("sm_clock_mhz", {}), path, "sm_clock_mhz")
    for case_id, values in clocks.items():
        if case_id not in samples:
            raise BundleError(path, f"sm_clock_mhz.{case_id[:80]}", "clocks for a case without samples")
        if len(values) != len(samples[case_id]):
            raise BundleError(
                path,
                f"sm_clock_mhz.{case_id}",
                f"{len(values)} clocks but {len(samples[case_id])} samples: one clock per sample",
            )
        bad = first_negative([v for v in values if v is not None])
        if bad is not None:
            raise BundleError(path, f"sm_clock_mhz.{case_id}", "a clock must be positive")
    return {"samples": samples, "sample_clocks": clocks}


def check_samples(samples: Any, path: Path) -> dict[str, list[float]]:
    """samples.json's payload: case id -> finite latencies (µs), each at least the latency floor
    (history/contract/limits.toml). Also what the writer checks before writing one."""
    samples = check_type(dict[str, list[float]], samples, path, "samples")
    for case_id, values in samples.items():
        problem = name_problem(case_id, CASE_ID)
        if problem:
            raise BundleError(path, "samples", f"key {problem}")
        bad = first_negative(values)
        if bad is not None:
            require_non_negative(values[bad], path, f"samples.{case_id}[{bad}]")
        bad = first_below_floor(values)
        if bad is not None:
            require_latency(values[bad], path, f"samples.{case_id}[{bad}]")
    return samples


def _check_consistency(b: LoadedBundle, directory: Path) -> None:
    """Cross-file checks: one outcome per case, timings only for cases that ran, and so on."""
    out_path = directory / OUTCOMES_FILE
    outcomes: dict[str, CaseOutcome] = {}
    for i, o in enumerate(b.outcomes):
        if o.case_id in outcomes:
            raise BundleError(out_path, f"cases[{i}].case_id", f"duplicate case id {o.case_id!r}")
        if o.status not in CASE_STATUSES:
            raise BundleError(out_path, f"cases[{i}].status", f"{o.status!r} is not one of {CASE_STATUSES}")
        require_non_negative(o.duration_s, out_path, f"cases[{i}].duration_s")
        outcomes[o.case_id] = o

    timings_path = directory / TIMINGS_FILE
    timed = {}
    for i, timing in enumerate(b.timings):
        case = timing.case_id
        outcome = outcomes.get(case)
        if outcome is None:
            raise BundleError(
                timings_path, f"timings[{i}].case_id", f"{case!r} has a timing but no entry in {OUTCOMES_FILE}"
            )
        if outcome.status in UNTIMED_STATUSES:
            raise BundleError(
                timings_path,
                f"timings[{i}].case_id",
                f"{case!r} has a timing but {OUTCOMES_FILE} says {outcome.status!r}",
            )
        if outcome.variant != timing.variant:
            raise BundleError(
                timings_path,
                f"timings[{i}].variant",
                f"{timing.variant!r} but {OUTCOMES_FILE} says {outcome.variant!r} for {case!r}",
            )
        timed[case] = timing
    for i, o in enumerate(b.outcomes):
        if o.status == "ok" and o.case_id not in timed:
            raise BundleError(
                out_path, f"cases[{i}].status", f"{o.case_id!r} is 'ok' but has no timing in {TIMINGS_FILE}"
            )
    for i, entry in enumerate(b.benchmarks):  # an entry naming no case is pytest-benchmark's alone
        if entry.case_id is not None and entry.case_id not in timed:
            raise BundleError(
                directory / BENCHMARK_FILE,
                f"benchmarks[{i}].extra_info.{CASE_LINK_KEY}",
                f"{entry.case_id!r} is not a case with a timing in {TIMINGS_FILE}",
            )

    samples_path = directory / SAMPLES_FILE
    for case, values in b.samples.items():
        if case not in timed:
            raise BundleError(samples_path, f"samples.{case}", "samples for a case without a timing")
        if len(values) != timed[case].n:
            raise BundleError(
                samples_path, f"samples.{case}", f"{len(values)} samples but the timing says n={timed[case].n}"
            )

    _unique(((r.case_id, r.seed) for r in b.correctness), directory / CORRECTNESS_FILE, "records", "case id and seed")
    _unique((r.variant for r in b.builds), directory / BUILDS_FILE, "builds", "variant")
    _unique(
        ((k.case_id, k.kernel_index) for k in b.ncu_kernels),
        directory / NCU_FILE,
        "kernels",
        "case id and kernel_index",
    )
    _unique((c.case_id for c in b.ncu_cases), directory / NCU_FILE, "cases", "case id")
    correctness_path = directory / CORRECTNESS_FILE
    for i, r in enumerate(b.correctness):
        for name in ("max_abs_err", "rel_err", "atol", "rtol", "tolerance_used", "violations", "nonfinite", "calls"):
            require_non_negative(getattr(r, name), correctness_path, f"records[{i}].{name}")


def _unique(keys, path: Path, where: str, what: str) -> None:
    seen = set()
    for i, key in enumerate(keys):
        if key in seen:
            raise BundleError(path, f"{where}[{i}]", f"duplicate {what} {key!r}")
        seen.add(key)
