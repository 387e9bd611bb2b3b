"""timings.json: a bundle's GPU timings (history.contract.bundle.CaseTiming), one writer and one validator.

    {"schema": "attnwatch.timings", "schema_version": 1, "timings": [CaseTiming, ...]}

Since bundle format 2 the timings are a file of their own: pytest-benchmark's file
(benchmark.json) holds only what pytest-benchmark measured, each entry naming the case it timed
in `extra_info["attnwatch_case"]`, so every result is stored once. A format-1 bundle kept each
CaseTiming in its benchmark entry's `extra_info["attnwatch"]`; `bundle_v1_to_v2` moves them
here on reading (the bundle format's upgrader, registered in BUNDLE_UPGRADERS: it lives here, not
in history.contract.bundle_upgrades, because it checks each timing where format 1 stored it, and the
record's own upgrades come from there). `timings_document` is the writer, and it calls
`check_timings`, the validator the reader uses, on what it returns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from attnwatch.history.contract.bundle import (
    BENCHMARK_FILE,
    CASE_LINK_KEY,
    EXTRA_INFO_KEY,
    MANIFEST_FILE,
    SCHEMA_VERSIONS,
    TIMINGS_FILE,
    CaseTiming,
    file_envelope,
    to_json_dict,
)
from attnwatch.history.contract.bundle_upgrades import UPGRADERS, bundle_v2_to_v3, bundle_v3_to_v4
from attnwatch.history.contract.checks import (
    build_dataclass,
    check_envelope,
    json_ready,
    require_latency,
    require_non_negative,
    upgrade,
)
from attnwatch.history.errors import BundleError

SCHEMA = "attnwatch.timings"
KEY = "timings"
LATENCY_FIELDS = ("median_us", "p10_us", "p90_us", "iqr_us", "mean_us", "stddev_us", "min_us", "max_us")
# Per-call latencies (not spreads, which may be 0): each at least the floor of history/contract/limits.toml.
PER_CALL_FIELDS = ("min_us", "p10_us", "median_us", "p90_us", "max_us", "mean_us", "graph_median_us")
TIMING_MODES = ("cuda_events", "cuda_graph", "cpu_wall", "host")


def timings_document(timings: list[CaseTiming], directory: Path | str) -> dict[str, Any]:
    """The timings.json document of these timings, checked by `check_timings` as the reader will."""
    document = file_envelope(TIMINGS_FILE, **{KEY: [json_ready(to_json_dict(t)) for t in timings]})
    check_timings(document, Path(directory) / TIMINGS_FILE)
    return document


def check_timings(document: Any, path: Path | str) -> list[CaseTiming]:
    """A timings.json document as CaseTimings: envelope, every field, one timing per case."""
    document = check_envelope(document, path, SCHEMA, SCHEMA_VERSIONS[SCHEMA], UPGRADERS)
    items = document.get(KEY)
    if not isinstance(items, list):
        raise BundleError(path, KEY, "missing or not a list")
    timings: list[CaseTiming] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        timing = parse_case_timing(item, path, f"{KEY}[{i}]")
        if timing.case_id in seen:
            raise BundleError(
                path,
                f"{KEY}[{i}].case_id",
                f"duplicate case id {timing.case_id!r} (also {KEY}[{seen[timing.case_id]}])",
            )
        seen[timing.case_id] = i
        timings.append(timing)
    return timings


def parse_case_timing(data: Any, path: Path | str, where: str) -> CaseTiming:
    """One case's GPU statistics, upgraded to the current CaseTiming and sanity-checked."""
    if not isinstance(data, dict):
        raise BundleError(path, where, "expected an object")
    schema = "attnwatch.case_timing"
    data = upgrade(schema, data, path, SCHEMA_VERSIONS[schema], UPGRADERS, f"{where}.schema_version")
    timing: CaseTiming = build_dataclass(CaseTiming, data, path, where)
    if timing.timing_mode not in TIMING_MODES:
        raise BundleError(path, f"{where}.timing_mode", f"{timing.timing_mode!r} is not one of {TIMING_MODES}")
    if timing.n < 1:
        raise BundleError(path, f"{where}.n", f"{timing.n}: a timing needs at least one sample")
    for name in LATENCY_FIELDS + (
        "us_per_head",
        "tflops",
        "bytes",
        "graph_median_us",
        "rel_spread",
        "guard_retimed_blocks",
        "guard_uncovered_blocks",
        "sm_clock_median_mhz",
        "sm_clock_min_mhz",
        "sm_clock_max_mhz",
        "reference_clock_mhz",
        "clock_normalised_median_us",
        "pacing_gap_s",
        "band_discarded_samples",
    ):
        require_non_negative(getattr(timing, name), path, f"{where}.{name}")
    for name in PER_CALL_FIELDS:
        require_latency(getattr(timing, name), path, f"{where}.{name}")
    order = [
        ("min_us", timing.min_us),
        ("p10_us", timing.p10_us),
        ("median_us", timing.median_us),
        ("p90_us", timing.p90_us),
        ("max_us", timing.max_us),
    ]
    for (lo_name, lo), (hi_name, hi) in zip(order, order[1:]):
        if lo > hi * (1 + 1e-9):
            raise BundleError(path, f"{where}.{lo_name}", f"{lo} exceeds {hi_name} {hi}: order statistics out of order")
    for name in ("batch", "heads", "seq_q", "seq_k", "head_dim"):
        if getattr(timing, name) < 1:
            raise BundleError(path, f"{where}.{name}", f"{getattr(timing, name)} must be positive")
    return timing


# The bundle format is the manifest's schema_version: format 2 moved the timings to timings.json.
BundleUpgrader = Callable[[dict[str, Any], Path], dict[str, Any]]


def bundle_v1_to_v2(documents: dict[str, Any], directory: Path) -> dict[str, Any]:
    """Bundle format 1 -> 2 (file name -> parsed document): each benchmark entry's
    `extra_info["attnwatch"]` CaseTiming moves to timings.json, in entry order, and the entry
    keeps the case id under `extra_info["attnwatch_case"]`. Each timing is checked where format 1
    stored it, so a refusal names benchmark.json and the entry; nothing else changes, so the
    rows ingested are those format 1 gave."""
    if TIMINGS_FILE in documents:
        raise BundleError(
            directory / TIMINGS_FILE,
            "file",
            "a format-1 bundle keeps its timings in benchmark.json; its manifest says format 1",
        )
    path = directory / BENCHMARK_FILE
    benchmark = documents.get(BENCHMARK_FILE)
    timings = []
    if isinstance(benchmark, dict) and isinstance(benchmark.get("benchmarks"), list):
        entries = []
        for i, entry in enumerate(benchmark["benchmarks"]):
            extra = entry.get("extra_info") if isinstance(entry, dict) else None
            if isinstance(extra, dict) and EXTRA_INFO_KEY in extra:
                extra = dict(extra)
                timing = parse_case_timing(
                    extra.pop(EXTRA_INFO_KEY), path, f"benchmarks[{i}].extra_info.{EXTRA_INFO_KEY}"
                )
                timings.append(timing)
                entry = {**entry, "extra_info": {**extra, CASE_LINK_KEY: timing.case_id}}
            entries.append(entry)
        documents = {**documents, BENCHMARK_FILE: {**benchmark, "benchmarks": entries}}
    manifest = {**documents[MANIFEST_FILE], "schema_version": 2}
    return {
        **documents,
        MANIFEST_FILE: manifest,
        TIMINGS_FILE: {"schema": SCHEMA, "schema_version": 1, KEY: [json_ready(to_json_dict(t)) for t in timings]},
    }


BUNDLE_UPGRADERS: dict[int, BundleUpgrader] = {1: bundle_v1_to_v2, 2: bundle_v2_to_v3, 3: bundle_v3_to_v4}
