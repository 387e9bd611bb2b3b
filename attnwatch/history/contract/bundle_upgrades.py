"""Explicit upgrades of older bundle files to the current formats (history.contract.bundle.SCHEMA_VERSIONS).

The reader (history.contract.checks.check_envelope) applies them one version at a time, so a bundle
written by any earlier attnwatch still ingests. One function per format change, registered in
UPGRADERS under (schema name, the version it upgrades from); never edit a shipped one.
A change across files, the bundle's format (the manifest's schema_version), is upgraded by
history.contract.timings.BUNDLE_UPGRADERS first: format 2 moved the timings into timings.json,
format 3 (`bundle_v2_to_v3`, here) added the optional packages' versions to the environment,
format 4 (`bundle_v3_to_v4`) each variant's fingerprint and four environment fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnwatch.history.contract.bundle import MANIFEST_FILE
from attnwatch.history.contract.checks import Upgrader

# Fields correctness records gained in v2. A v1 record did not carry them (the producer of the
# time dropped them), so they are unknown: None, which the history stores as NULL.
_CORRECTNESS_V2_FIELDS = ("profile", "calls", "tolerance_used", "violations", "worst_index")


def correctness_v1_to_v2(document: dict) -> dict:
    """attnwatch.correctness v1 -> v2: records gain the check's profile, calls, tolerance used,
    violations and worst index (unknown for v1: None); `nonfinite` and `error`, optional in v1
    (0 and None when absent), become required."""
    records = document.get("records")
    if isinstance(records, list):
        upgraded = []
        for record in records:
            if isinstance(record, dict):  # anything else is left for the reader to refuse
                record = {"nonfinite": 0, "error": None, **record}
                for name in _CORRECTNESS_V2_FIELDS:
                    record.setdefault(name, None)
            upgraded.append(record)
        document["records"] = upgraded
    document["schema_version"] = 2
    return document


# What format 1 meant by a build record's absent field.
_BUILD_V1_DEFAULTS: dict[str, Any] = {
    "error": None,
    "target": "",
    "cached": False,
    "source_hash": None,
    "compile_seconds": None,
    "registers_per_thread": None,
    "shared_mem_bytes": None,
    "stack_frame_bytes": None,
    "spill_store_bytes": None,
    "spill_load_bytes": None,
    "config": {},
    "log_tail": "",
}


def builds_v1_to_v2(document: dict) -> dict:
    """attnwatch.builds v1 -> v2: the same fields, all required; an absent one gets the value
    format 1 gave it by default."""
    builds = document.get("builds")
    if isinstance(builds, list):
        document["builds"] = [{**_BUILD_V1_DEFAULTS, **b} if isinstance(b, dict) else b for b in builds]
    document["schema_version"] = 2
    return document


def case_timing_v1_to_v2(document: dict) -> dict:
    """attnwatch.case_timing v1 -> v2: a timing gains the launch configuration its kernel ran
    with and how it was chosen; v1 did not record them, so both are unknown (None)."""
    document.setdefault("kernel_config", None)
    document.setdefault("kernel_config_source", None)
    document["schema_version"] = 2
    return document


def outcomes_v1_to_v2(document: dict) -> dict:
    """attnwatch.outcomes v1 -> v2: each case names its operator; every v1 case was attention."""
    cases = document.get("cases")
    if isinstance(cases, list):
        document["cases"] = [{"operator": "attention", **c} if isinstance(c, dict) else c for c in cases]
    document["schema_version"] = 2
    return document


def samples_v1_to_v2(document: dict) -> dict:
    """attnwatch.samples v1 -> v2: the per-sample SM clocks; v1 recorded none."""
    document.setdefault("sm_clock_mhz", {})
    document["schema_version"] = 2
    return document


def case_timing_v2_to_v3(document: dict) -> dict:
    """attnwatch.case_timing v2 -> v3: operators (issue 29). Every v2 timing was attention, its
    gaps taken against sdpa: gap_to_sdpa becomes gap_to_baseline with baseline_variant "sdpa"
    (None where no gap was taken), gap_to_fastest_backend / fastest_backend become
    gap_to_fastest_reference / fastest_reference (the SDPA backend then fastest); the bound is
    attention's, "compute"; the byte model's figure was not recorded (None)."""
    gap = document.pop("gap_to_sdpa", None)
    document["gap_to_baseline"] = gap
    document["baseline_variant"] = "sdpa" if gap is not None else None
    document["gap_to_fastest_reference"] = document.pop("gap_to_fastest_backend", None)
    document["fastest_reference"] = document.pop("fastest_backend", None)
    document.setdefault("operator", "attention")
    document.setdefault("bound", "compute")  # attention's roofline is the GEMM peak
    document.setdefault("bytes", None)
    document["schema_version"] = 3
    return document


# The fields case_timing v4 added (history.contract.bundle.CaseTiming): how the samples were
# taken under a power or thermal cap. A v3 run recorded none of them: all unknown.
CASE_TIMING_V4_FIELDS = (
    "timing_recipe",
    "sm_clock_median_mhz",
    "sm_clock_min_mhz",
    "sm_clock_max_mhz",
    "reference_clock_mhz",
    "clock_normalised_median_us",
    "pacing_gap_s",
    "band_discarded_samples",
)


def case_timing_v3_to_v4(document: dict) -> dict:
    """attnwatch.case_timing v3 -> v4: a timing gains its recipe and clock summary (None: v3
    took samples the way the "plain" recipe does, but did not say so, so it stays unknown)."""
    for name in CASE_TIMING_V4_FIELDS:
        document.setdefault(name, None)
    document["schema_version"] = 4
    return document


def case_timing_v4_to_v5(document: dict) -> dict:
    """attnwatch.case_timing v4 -> v5: a timing gains the digest of the binary its kernel ran
    (None: v4 did not record it)."""
    document.setdefault("kernel_binary_sha256", None)
    document["schema_version"] = 5
    return document


def bundle_v2_to_v3(documents: dict, directory: Path) -> dict:
    """Bundle format 2 -> 3 (file name -> parsed document): the manifest's environment gains
    `packages`, the optional packages' versions; format 2 did not record them, so it is {} (not
    recorded, which is not "absent": an absent package is a key with None). Nothing else changes."""
    manifest = dict(documents[MANIFEST_FILE])
    environment = manifest.get("environment")
    if isinstance(environment, dict):  # anything else is left for the reader to refuse
        manifest["environment"] = {"packages": {}, **environment}
    manifest["schema_version"] = 3
    return {**documents, MANIFEST_FILE: manifest}


def bundle_v3_to_v4(documents: dict, directory: Path) -> dict:
    """Bundle format 3 -> 4: the manifest gains `fingerprints` ({}: format 3 recorded none, so an
    alert over such runs is attributed "unknown (no fingerprints recorded)", never guessed) and
    the environment cudnn_version, cublas_version, power_limit_w and harness_digest (None: not
    recorded). Nothing else changes."""
    manifest = dict(documents[MANIFEST_FILE])
    manifest.setdefault("fingerprints", {})
    environment = manifest.get("environment")
    if isinstance(environment, dict):  # anything else is left for the reader to refuse
        manifest["environment"] = {
            "cudnn_version": None,
            "cublas_version": None,
            "power_limit_w": None,
            "harness_digest": None,
            **environment,
        }
    manifest["schema_version"] = 4
    return {**documents, MANIFEST_FILE: manifest}


UPGRADERS: dict[tuple[str, int], Upgrader] = {
    ("attnwatch.correctness", 1): correctness_v1_to_v2,
    ("attnwatch.builds", 1): builds_v1_to_v2,
    ("attnwatch.case_timing", 1): case_timing_v1_to_v2,
    ("attnwatch.case_timing", 2): case_timing_v2_to_v3,
    ("attnwatch.case_timing", 3): case_timing_v3_to_v4,
    ("attnwatch.case_timing", 4): case_timing_v4_to_v5,
    ("attnwatch.outcomes", 1): outcomes_v1_to_v2,
    ("attnwatch.samples", 1): samples_v1_to_v2,
}
