"""pytest-benchmark JSON (format 2.x and later) as history data.

Two uses:
  - `parse_benchmark_document`: the `benchmark.json` inside a bundle, or any pytest-benchmark
    file, to BenchmarkEntry records (host statistics in microseconds, our CaseTiming from
    `extra_info["attnwatch"]` when present).
  - `load_pytest_benchmark_file`: a plain pytest-benchmark file (for instance one a project
    kept from before attnwatch) becomes a run: its run id is derived from the file's content
    hash, the commit from `commit_info` when present; each benchmark becomes a result row with
    timing_mode "host", variant = the benchmark's group, else its name, shape fields NULL.
    When the file carries our `extra_info["attnwatch"]`, that GPU timing is used instead.

pytest-benchmark records seconds; the history stores microseconds (x 1e6).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import (
    EXTRA_INFO_KEY,
    SCHEMA_VERSIONS,
    CaseOutcome,
    CaseTiming,
    Environment,
    Manifest,
)
from attnwatch.history.contract.bundle_upgrades import UPGRADERS
from attnwatch.history.contract.checks import (
    build_dataclass,
    check_type,
    parse_utc,
    read_json_file,
    require_non_negative,
    upgrade,
)
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.loaded_bundle import BenchmarkEntry, HostStats, LoadedBundle
from attnwatch.history.contract.names import LABEL, name_problem

LATENCY_FIELDS = ("median_us", "p10_us", "p90_us", "iqr_us", "mean_us", "stddev_us", "min_us", "max_us")
TIMING_MODES = ("cuda_events", "cuda_graph", "cpu_wall", "host")
_HOST_STATS = {  # our name -> pytest-benchmark stats key (seconds)
    "median_us": "median",
    "mean_us": "mean",
    "stddev_us": "stddev",
    "min_us": "min",
    "max_us": "max",
    "iqr_us": "iqr",
    "q1_us": "q1",
    "q3_us": "q3",
}
_MIN_MAJOR_VERSION = 2
# The newest pytest-benchmark whose file format this reader was checked against (5.2): a file
# from a later major version may mean something else by the same fields, so it is refused.
_MAX_MAJOR_VERSION = 5


def parse_benchmark_document(doc: Any, path: Path | str) -> tuple[str | None, list[BenchmarkEntry]]:
    """Validate a pytest-benchmark document; return (its version, entries)."""
    if not isinstance(doc, dict):
        raise BundleError(path, "benchmarks", "a pytest-benchmark file is a JSON object with a 'benchmarks' list")
    version = doc.get("version")
    if version is not None:
        if not isinstance(version, str) or not re.match(r"^\d+\.", version):
            raise BundleError(path, "version", f"not a pytest-benchmark version: {version!r}")
        if int(version.split(".")[0]) < _MIN_MAJOR_VERSION:
            raise BundleError(path, "version", f"pytest-benchmark {version} is older than 2.0; not supported")
        if int(version.split(".")[0]) > _MAX_MAJOR_VERSION:
            raise BundleError(path, "version", f"pytest-benchmark {version} is newer than the formats this attnwatch "
                                               f"reads ({_MIN_MAJOR_VERSION}.x to {_MAX_MAJOR_VERSION}.x); upgrade "
                                               "attnwatch, or save the file with a supported pytest-benchmark")
    benchmarks = doc.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise BundleError(path, "benchmarks", "missing or not a list")
    entries = []
    seen: dict[str, int] = {}
    for i, bench in enumerate(benchmarks):
        entry = _parse_entry(bench, path, f"benchmarks[{i}]")
        key = entry.timing.case_id if entry.timing else entry.fullname
        if key in seen:
            raise BundleError(path, f"benchmarks[{i}]", f"duplicate case id {key!r} (also benchmarks[{seen[key]}])")
        seen[key] = i
        entries.append(entry)
    return version, entries


def _parse_entry(bench: Any, path: Path | str, where: str) -> BenchmarkEntry:
    if not isinstance(bench, dict):
        raise BundleError(path, where, "expected an object")
    name = bench.get("name")
    if not isinstance(name, str) or not name:
        raise BundleError(path, f"{where}.name", "missing or not a string")
    fullname = bench.get("fullname", name)
    if not isinstance(fullname, str):
        raise BundleError(path, f"{where}.fullname", "not a string")
    group = bench.get("group")
    if group is not None and not isinstance(group, str):
        raise BundleError(path, f"{where}.group", "not a string or null")
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        raise BundleError(path, f"{where}.stats", "missing or not an object")
    host = _host_stats(stats, path, f"{where}.stats")
    timing = None
    extra = bench.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise BundleError(path, f"{where}.extra_info", "not an object")
    if EXTRA_INFO_KEY in extra:
        timing = parse_case_timing(extra[EXTRA_INFO_KEY], path, f"{where}.extra_info.{EXTRA_INFO_KEY}")
    return BenchmarkEntry(name=name, fullname=fullname, group=group, host=host, timing=timing)


def _host_stats(stats: dict, path: Path | str, where: str) -> HostStats:
    values: dict[str, Any] = {}
    for ours, theirs in _HOST_STATS.items():
        raw = stats.get(theirs)
        if raw is None:
            values[ours] = None
            continue
        seconds = check_type(float, raw, path, f"{where}.{theirs}")
        require_non_negative(seconds, path, f"{where}.{theirs}")
        values[ours] = seconds * 1e6
    for key in ("rounds", "iterations"):
        raw = stats.get(key)
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 0):
            raise BundleError(path, f"{where}.{key}", f"expected a non-negative integer, got {raw!r}")
        values[key] = raw
    return HostStats(**values)


def parse_case_timing(data: Any, path: Path | str, where: str) -> CaseTiming:
    """Our GPU statistics of one case, upgraded to the current schema and sanity-checked."""
    if not isinstance(data, dict):
        raise BundleError(path, where, "expected an object")
    schema = "attnwatch.case_timing"
    data = upgrade(schema, data, path, SCHEMA_VERSIONS[schema], UPGRADERS, f"{where}.schema_version")
    timing: CaseTiming = build_dataclass(CaseTiming, data, path, where)
    if timing.timing_mode not in TIMING_MODES:
        raise BundleError(path, f"{where}.timing_mode", f"{timing.timing_mode!r} is not one of {TIMING_MODES}")
    if timing.n < 1:
        raise BundleError(path, f"{where}.n", f"{timing.n}: a timing needs at least one sample")
    for name in LATENCY_FIELDS + ("us_per_head", "tflops", "graph_median_us", "rel_spread",
                                  "guard_retimed_blocks", "guard_uncovered_blocks"):
        require_non_negative(getattr(timing, name), path, f"{where}.{name}")
    if timing.median_us <= 0:
        raise BundleError(path, f"{where}.median_us", f"{timing.median_us}: a latency must be positive")
    order = [("min_us", timing.min_us), ("p10_us", timing.p10_us), ("median_us", timing.median_us),
             ("p90_us", timing.p90_us), ("max_us", timing.max_us)]
    for (lo_name, lo), (hi_name, hi) in zip(order, order[1:]):
        if lo > hi * (1 + 1e-9):
            raise BundleError(path, f"{where}.{lo_name}", f"{lo} exceeds {hi_name} {hi}: order statistics out of order")
    for name in ("batch", "heads", "seq_q", "seq_k", "head_dim"):
        if getattr(timing, name) < 1:
            raise BundleError(path, f"{where}.{name}", f"{getattr(timing, name)} must be positive")
    return timing


def pytest_benchmark_run_id(content_sha256: str) -> str:
    """The run id of a plain pytest-benchmark file: its content hash, so re-imports are no-ops."""
    return f"pb-{content_sha256[:20]}"


def load_pytest_benchmark_file(path: Path) -> LoadedBundle:
    """A plain pytest-benchmark JSON file as a run (see module docstring)."""
    doc, raw = read_json_file(path)
    version, entries = parse_benchmark_document(doc, path)
    _check_imported_names(entries, path)
    digest = hashlib.sha256(raw).hexdigest()
    commit = doc.get("commit_info") or {}
    machine = doc.get("machine_info") or {}
    if not isinstance(commit, dict):
        raise BundleError(path, "commit_info", "not an object")
    if not isinstance(machine, dict):
        raise BundleError(path, "machine_info", "not an object")
    if not isinstance(doc.get("datetime"), str):
        raise BundleError(path, "datetime", "missing or not an ISO 8601 date-time string")
    started = parse_utc(doc["datetime"], path, "datetime")
    sha = _optional_str(commit, "id", path, "commit_info")
    env = Environment(
        device_kind="cuda" if any(e.timing and e.timing.timing_mode.startswith("cuda") for e in entries) else "host",
        hostname=_optional_str(machine, "node", path, "machine_info") or "",
        os=" ".join(filter(None, [_optional_str(machine, "system", path, "machine_info"), _optional_str(machine, "release", path, "machine_info")])),
        python_version=_optional_str(machine, "python_version", path, "machine_info") or "",
        cpu=_cpu_text(machine),
    )
    manifest = Manifest(
        run_id=pytest_benchmark_run_id(digest),
        repo=_optional_str(commit, "project", path, "commit_info") or "",
        commit_sha=sha or "",
        trigger="import",
        started_at=started,
        finished_at=started,
        runner=env.hostname,
        shape_set="",
        status="complete",
        environment=env,
        branch=_optional_str(commit, "branch", path, "commit_info"),
        commit_date=_commit_time(commit, path),
        dirty=bool(commit.get("dirty", False)),
        notes=f"imported from pytest-benchmark file {path.name}",
    )
    outcomes = [
        CaseOutcome(
            case_id=e.timing.case_id if e.timing else e.fullname,
            variant=e.timing.variant if e.timing else (e.group or e.name),
            shape_id=e.timing.shape_id if e.timing else "",
            dtype=e.timing.dtype if e.timing else "",
            causal=e.timing.causal if e.timing else False,
            status="ok",
        )
        for e in entries
    ]
    return LoadedBundle(
        source_path=str(path),
        source="pytest-benchmark",
        manifest=manifest,
        content_sha256=digest,
        pytest_benchmark_version=version,
        benchmarks=entries,
        outcomes=outcomes,
    )


def _check_imported_names(entries: list[BenchmarkEntry], path: Path | str) -> None:
    """An entry without our timing keys its series by pytest's names (its fullname is the case
    id, its group or name the variant): they must be names (history.contract.names, LABEL)."""
    for i, e in enumerate(entries):
        if e.timing is not None:
            continue  # CaseTiming's own fields were checked as names
        for key, value in (("fullname", e.fullname), ("group" if e.group else "name", e.group or e.name)):
            problem = name_problem(value, LABEL)
            if problem:
                raise BundleError(path, f"benchmarks[{i}].{key}", problem)


def _optional_str(obj: dict, key: str, path: Path | str, where: str) -> str | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise BundleError(path, f"{where}.{key}", f"expected a string, got {type(value).__name__}")
    return value


def _cpu_text(machine: dict) -> str:
    cpu = machine.get("cpu")
    if isinstance(cpu, dict):
        return str(cpu.get("brand_raw") or cpu.get("brand") or "")
    return str(machine.get("processor") or "")


def _commit_time(commit: dict, path: Path | str) -> str | None:
    text = _optional_str(commit, "time", path, "commit_info")
    return parse_utc(text, path, "commit_info.time") if text else None
