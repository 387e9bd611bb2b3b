"""What one A/B round measured for one side: per case, samples, gap-to-SDPA, correctness, ncu.

A round is one run bundle (one process running the suite with one side's kernels). This module
reads the bundle files `compare` needs, by the contract in history.bundle, and nothing else;
it needs no database, so compare runs on a GPU host without duckdb.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ci.errors import UserError
from history.bundle import (
    BENCHMARK_FILE,
    CORRECTNESS_FILE,
    MANIFEST_FILE,
    MAX_FILE_BYTES,
    NCU_FILE,
    OUTCOMES_FILE,
    SAMPLES_FILE,
)

# ncu case metrics worth showing next to a regression (NcuCaseMetrics field names).
NCU_FIELDS = (
    "duration_us", "sm_throughput_pct", "dram_throughput_pct", "dram_bytes", "achieved_occupancy_pct",
    "tensor_pipe_pct", "l2_hit_rate_pct", "registers_per_thread", "shared_mem_per_block_bytes",
    "local_memory_bytes", "sm_clock_mhz",
)


@dataclass
class CaseRound:
    case_id: str
    variant: str
    shape_id: str
    dtype: str
    causal: bool
    status: str
    samples_us: list[float] = field(default_factory=list)
    gap_to_sdpa: float | None = None
    correct: bool | None = None
    max_abs_err: float | None = None
    rel_err: float | None = None
    error: str | None = None
    ncu: dict[str, float] = field(default_factory=dict)


@dataclass
class RoundData:
    bundle: str
    gpu_name: str | None
    commit_sha: str
    cases: dict[str, CaseRound]
    environment: dict = field(default_factory=dict)


def _load(bundle: Path, name: str, required: bool = True):
    path = bundle / name
    if not path.is_file():
        if required:
            raise UserError(f"{path}: missing from the bundle")
        return None
    if path.stat().st_size > MAX_FILE_BYTES:
        raise UserError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: not valid JSON: {exc}") from None


def _positive_list(path: Path, case_id: str, values) -> list[float]:
    if not isinstance(values, list) or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in values
    ):
        raise UserError(f"{path}: samples.{case_id}: expected a list of positive finite numbers")
    return [float(v) for v in values]


def read_round(bundle_dir: str | Path) -> RoundData:
    """Read one bundle's cases for comparison; raises UserError naming the file and field."""
    bundle = Path(bundle_dir)
    manifest = _load(bundle, MANIFEST_FILE)
    outcomes = _load(bundle, OUTCOMES_FILE)
    benchmark = _load(bundle, BENCHMARK_FILE, required=False) or {"benchmarks": []}
    samples = (_load(bundle, SAMPLES_FILE, required=False) or {}).get("samples", {})
    correctness = (_load(bundle, CORRECTNESS_FILE, required=False) or {}).get("records", [])
    ncu = (_load(bundle, NCU_FILE, required=False) or {}).get("cases", [])
    if not isinstance(manifest, dict) or not isinstance(outcomes, dict) or not isinstance(outcomes.get("cases"), list):
        raise UserError(f"{bundle / OUTCOMES_FILE}: cases: expected a list of case outcomes")
    cases: dict[str, CaseRound] = {}
    for o in outcomes["cases"]:
        try:
            cases[o["case_id"]] = CaseRound(o["case_id"], o["variant"], o["shape_id"], o["dtype"], bool(o["causal"]),
                                            o["status"], error=o.get("error"))
        except (KeyError, TypeError) as exc:
            raise UserError(f"{bundle / OUTCOMES_FILE}: cases: missing field {exc}") from None
    for b in benchmark.get("benchmarks", []):
        timing = ((b or {}).get("extra_info") or {}).get("attnwatch") or {}
        case = cases.get(timing.get("case_id"))
        if case is not None and isinstance(timing.get("gap_to_sdpa"), (int, float)):
            case.gap_to_sdpa = float(timing["gap_to_sdpa"])
    for case_id, values in samples.items():
        if case_id in cases:
            cases[case_id].samples_us = _positive_list(bundle / SAMPLES_FILE, case_id, values)
    for rec in correctness:
        case = cases.get(rec.get("case_id"))
        if case is None:
            continue
        passed = bool(rec.get("passed"))
        case.correct = passed if case.correct is None else (case.correct and passed)
        for name in ("max_abs_err", "rel_err"):
            value = rec.get(name)
            if isinstance(value, (int, float)) and math.isfinite(value):
                setattr(case, name, max(value, getattr(case, name) or 0.0))
        if not passed and rec.get("error") and not case.error:
            case.error = str(rec["error"])
    for row in ncu:
        case = cases.get(row.get("case_id"))
        if case is not None:
            case.ncu = {k: float(row[k]) for k in NCU_FIELDS
                        if isinstance(row.get(k), (int, float)) and math.isfinite(row[k])}
    env = manifest.get("environment") or {}
    return RoundData(str(bundle), env.get("gpu_name"), str(manifest.get("commit_sha", "")), cases, env)
