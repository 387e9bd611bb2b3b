"""pytest-benchmark JSON (format 2.x and later) as history data.

Two uses:
  - `parse_benchmark_document`: the `benchmark.json` inside a bundle, or any pytest-benchmark
    file, to BenchmarkEntry records (host statistics in microseconds, the case each timed) and,
    in a plain file an attnwatch harness of format 1 wrote, the CaseTiming of its
    `extra_info["attnwatch"]` (a bundle keeps its timings in timings.json: history.contract.timings).
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
from dataclasses import replace
from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import (
    CASE_LINK_KEY,
    EXTRA_INFO_KEY,
    CaseOutcome,
    CaseTiming,
    Environment,
    Manifest,
)
from attnwatch.history.contract.checks import (
    check_type,
    parse_utc,
    read_json_file,
    require_latency,
    require_non_negative,
)
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.loaded_bundle import BenchmarkEntry, HostStats, LoadedBundle
from attnwatch.history.contract.names import CASE_ID, LABEL, name_problem
from attnwatch.history.contract.pytest_record import (
    ENVIRONMENT_KEY,
    MEASUREMENT_KEY,
    Measurement,
    parse_environment,
    parse_measurement,
)
from attnwatch.history.contract.timings import parse_case_timing

# Host statistics that are per-call latencies, each at least the floor of history/contract/limits.toml
# (stddev and iqr are spreads, which may be 0).
_PER_CALL_STATS = ("median_us", "mean_us", "min_us", "max_us", "q1_us", "q3_us")
# pytest-benchmark before this major version wrote `datetime` from datetime.utcnow(): UTC by its
# writer's definition, without an offset (5.0 writes datetime.now(timezone.utc), with one).
_NAIVE_UTC_BEFORE_MAJOR = 5
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


def parse_benchmark_document(
    doc: Any, path: Path | str, inline_timings: bool = False
) -> tuple[str | None, list[BenchmarkEntry], list[CaseTiming]]:
    """Validate a pytest-benchmark document; return (its version, entries, the timings it carries).

    `inline_timings`: a plain file may carry format-1 CaseTimings in `extra_info["attnwatch"]`
    and the plugin's measurements; a bundle's benchmark.json (format 2) may not: its timings
    are in timings.json, once.
    """
    version, entries, measurements = _parse_document(doc, path, inline_timings)
    return version, entries, [m.timing for m in measurements]


def _parse_document(
    doc: Any, path: Path | str, inline_timings: bool
) -> tuple[str | None, list[BenchmarkEntry], list[Measurement]]:
    if not isinstance(doc, dict):
        raise BundleError(path, "benchmarks", "a pytest-benchmark file is a JSON object with a 'benchmarks' list")
    version = doc.get("version")
    if version is not None:
        if not isinstance(version, str) or not re.match(r"^\d+\.", version):
            raise BundleError(path, "version", f"not a pytest-benchmark version: {version!r}")
        if int(version.split(".")[0]) < _MIN_MAJOR_VERSION:
            raise BundleError(path, "version", f"pytest-benchmark {version} is older than 2.0; not supported")
        if int(version.split(".")[0]) > _MAX_MAJOR_VERSION:
            raise BundleError(
                path,
                "version",
                f"pytest-benchmark {version} is newer than the formats this attnwatch "
                f"reads ({_MIN_MAJOR_VERSION}.x to {_MAX_MAJOR_VERSION}.x); upgrade "
                "attnwatch, or save the file with a supported pytest-benchmark",
            )
    benchmarks = doc.get("benchmarks")
    if not isinstance(benchmarks, list):
        raise BundleError(path, "benchmarks", "missing or not a list")
    entries, measurements = [], []
    seen: dict[str, int] = {}
    for i, bench in enumerate(benchmarks):
        entry, measurement = _parse_entry(bench, path, f"benchmarks[{i}]", inline_timings)
        keys = [entry.case_id or entry.fullname]
        if measurement is not None and measurement.reference is not None:
            keys.append(measurement.reference.case_id)
        for key in keys:
            if key in seen:
                raise BundleError(path, f"benchmarks[{i}]", f"duplicate case id {key!r} (also benchmarks[{seen[key]}])")
            seen[key] = i
        entries.append(entry)
        if measurement is not None:
            measurements.append(measurement)
    return version, entries, measurements


def _parse_entry(
    bench: Any, path: Path | str, where: str, inline_timings: bool
) -> tuple[BenchmarkEntry, Measurement | None]:
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
    measurement, timing, case_id = None, None, None
    extra = bench.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise BundleError(path, f"{where}.extra_info", "not an object")
    for key in (EXTRA_INFO_KEY, MEASUREMENT_KEY):
        if key in extra and not inline_timings:
            raise BundleError(
                path,
                f"{where}.extra_info.{key}",
                "a bundle of format 2 keeps its timings in timings.json, not in benchmark.json",
            )
    if EXTRA_INFO_KEY in extra and MEASUREMENT_KEY in extra:
        raise BundleError(
            path,
            f"{where}.extra_info.{EXTRA_INFO_KEY}",
            f"an entry carries {MEASUREMENT_KEY} or a format-1 timing, not both",
        )
    if EXTRA_INFO_KEY in extra:
        timing = parse_case_timing(extra[EXTRA_INFO_KEY], path, f"{where}.extra_info.{EXTRA_INFO_KEY}")
        measurement = Measurement(timing, "format-1 harness timing", [])
    if MEASUREMENT_KEY in extra:
        measurement = parse_measurement(extra[MEASUREMENT_KEY], path, f"{where}.extra_info.{MEASUREMENT_KEY}")
        timing = measurement.timing
    if timing is not None:
        case_id = timing.case_id
    if CASE_LINK_KEY in extra:
        case_id = check_type(str, extra[CASE_LINK_KEY], path, f"{where}.extra_info.{CASE_LINK_KEY}")
        problem = name_problem(case_id, CASE_ID)
        if problem:
            raise BundleError(path, f"{where}.extra_info.{CASE_LINK_KEY}", problem)
        if timing is not None and timing.case_id != case_id:
            raise BundleError(
                path, f"{where}.extra_info.{CASE_LINK_KEY}", f"{case_id!r} but its timing is of {timing.case_id!r}"
            )
    return BenchmarkEntry(name=name, fullname=fullname, group=group, host=host, case_id=case_id), measurement


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
        if ours in _PER_CALL_STATS:
            require_latency(values[ours], path, f"{where}.{theirs}")
    for key in ("rounds", "iterations"):
        raw = stats.get(key)
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 0):
            raise BundleError(path, f"{where}.{key}", f"expected a non-negative integer, got {raw!r}")
        values[key] = raw
    return HostStats(**values)


def pytest_benchmark_run_id(content_sha256: str) -> str:
    """The run id of a plain pytest-benchmark file: its content hash, so re-imports are no-ops."""
    return f"pb-{content_sha256[:20]}"


def load_pytest_benchmark_file(path: Path) -> LoadedBundle:
    """A plain pytest-benchmark JSON file as a run (see module docstring)."""
    doc, raw = read_json_file(path, allow_constants=True)  # pytest-benchmark writes NaN/Infinity
    version, entries, measurements = _parse_document(doc, path, inline_timings=True)
    timings = [t for m in measurements for t in (m.timing, m.reference) if t is not None]
    timed = {m.timing.case_id: m.timing for m in measurements}
    # A format-2 bundle's benchmark.json names its cases, but their timings are not in it: its
    # entries are plain pytest-benchmark entries, keyed by their own names.
    entries = [e if e.case_id in timed else replace(e, case_id=None) for e in entries]
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
    started = parse_utc(doc["datetime"], path, "datetime", naive_is_utc=_naive_utc(version))
    sha = _optional_str(commit, "id", path, "commit_info")
    env = _environment(machine, timings, path)
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
    outcomes = [_outcome(e, timed.get(e.case_id) if e.case_id is not None else None) for e in entries]
    outcomes += [_outcome(None, m.reference) for m in measurements if m.reference is not None]
    return LoadedBundle(
        source_path=str(path),
        source="pytest-benchmark",
        manifest=manifest,
        content_sha256=digest,
        pytest_benchmark_version=version,
        benchmarks=entries,
        outcomes=outcomes,
        timings=timings,
        correctness=[m.correctness for m in measurements if m.correctness is not None],
        samples={
            t.case_id: s
            for m in measurements
            for t, s in ((m.timing, m.samples_us), (m.reference, m.reference_samples_us))
            if t is not None and s
        },
    )


def _environment(machine: dict, timings: list[CaseTiming], path: Path | str) -> Environment:
    """The plugin's Environment record when the file has one, else what pytest-benchmark says."""
    if ENVIRONMENT_KEY in machine:
        return parse_environment(machine[ENVIRONMENT_KEY], path, f"machine_info.{ENVIRONMENT_KEY}")
    return Environment(
        device_kind="cuda" if any(t.timing_mode.startswith("cuda") for t in timings) else "host",
        hostname=_optional_str(machine, "node", path, "machine_info") or "",
        os=" ".join(
            filter(
                None,
                [
                    _optional_str(machine, "system", path, "machine_info"),
                    _optional_str(machine, "release", path, "machine_info"),
                ],
            )
        ),
        python_version=_optional_str(machine, "python_version", path, "machine_info") or "",
        cpu=_cpu_text(machine),
    )


def _outcome(e: BenchmarkEntry | None, timing: CaseTiming | None) -> CaseOutcome:
    """A plain file's entry as an ok case: its timing's case, else pytest's names."""
    if timing is not None:
        return CaseOutcome(
            timing.case_id, timing.variant, timing.shape_id, timing.dtype, timing.causal, "ok", operator=timing.operator
        )
    assert e is not None  # only a timed reference comes without an entry
    return CaseOutcome(e.fullname, e.group or e.name, "", "", False, "ok")


def _check_imported_names(entries: list[BenchmarkEntry], path: Path | str) -> None:
    """An entry without our timing keys its series by pytest's names (its fullname is the case
    id, its group or name the variant): they must be names (history.contract.names, LABEL)."""
    for i, e in enumerate(entries):
        if e.case_id is not None:
            continue  # a case id was checked as a name (and a CaseTiming's own fields too)
        for key, value in (("fullname", e.fullname), ("group" if e.group else "name", e.group or e.name)):
            problem = name_problem(value, LABEL)
            if problem:
                raise BundleError(path, f"benchmarks[{i}].{key}", problem)


def _naive_utc(version: str | None) -> bool:
    """Whether the file's `datetime` is UTC without saying so: its pytest-benchmark version is one
    that wrote datetime.utcnow() (checks.parse_utc's rule refuses any other timestamp without an offset)."""
    return version is not None and int(version.split(".")[0]) < _NAIVE_UTC_BEFORE_MAJOR


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
