"""compare.json: the A/B result, as dataclasses, with a validator for reading it back.

compare.json leaves the GPU job as an artifact and is read by the PR-comment workflow, which
must treat it as untrusted data (anyone who can open a PR can shape it). `load_report`
therefore checks everything: size before parsing, schema and version, every field's type and
range, enumerations, string lengths and the number of cases. Any problem raises
`ReportError(path, field, message)`; nothing from a rejected file is used.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ci.errors import UserError

COMPARE_SCHEMA = "attnwatch.compare"
COMPARE_SCHEMA_VERSION = 1
COMPARE_FILE = "compare.json"

MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_CASES = 5000
MAX_TEXT = 2000  # longest free-text field (errors, notes)
MAX_NAME = 200  # longest identifier-like field (case ids, branch names, GPU names)

# failed: the head did not measure (crash, timeout, error); new: no base measurement;
# removed: the head no longer has the case; skipped: the head does not run it on this GPU.
# The start of a note saying an interval cannot contain between-round variation (one round per
# side, or the pooled method): the comment shows it as a warning (ci/comment/render.py).
NO_RUN_NOISE = "interval does not include run-to-run noise"
VERDICTS = ("regression", "improvement", "no change", "failed", "new", "removed", "skipped")
SIDES = ("base", "head")


class ReportError(UserError):
    def __init__(self, path: str | Path, field_name: str, message: str) -> None:
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{self.path}: {field_name}: {message}")


@dataclass
class SideResult:
    """One side (base or head) of one case, over all rounds."""

    status: str  # "ok" unless every round failed for this case; else the worst outcome
    median_us: float | None = None  # mean of per-round medians
    round_medians_us: list[float] = field(default_factory=list)
    n_samples: int = 0
    gap_to_sdpa: float | None = None  # mean over rounds, each measured in its own round
    correct: bool | None = None  # None: not checked
    max_abs_err: float | None = None
    rel_err: float | None = None
    error: str | None = None


@dataclass
class NcuDelta:
    """One ncu metric of a case, base vs head (only for cases with ncu on both sides)."""

    metric: str
    base: float
    head: float


@dataclass
class CaseComparison:
    case_id: str
    variant: str
    shape_id: str
    dtype: str
    causal: bool
    verdict: str  # one of VERDICTS
    base: SideResult
    head: SideResult
    ratio: float | None = None  # head / base
    low: float | None = None
    high: float | None = None
    correctness_failed: bool = False  # head failed correctness (base's failures are not the PR's)
    ncu: list[NcuDelta] = field(default_factory=list)


@dataclass
class CompareReport:
    base_sha: str
    head_sha: str
    merge_base_sha: str
    gpu_name: str
    rounds: int
    method: str
    confidence: float
    min_effect: float
    shape_set: str
    created_at: str
    cases: list[CaseComparison]
    base_ref: str = ""
    head_ref: str = ""
    repo: str = ""
    environment: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    schema: str = COMPARE_SCHEMA
    schema_version: int = COMPARE_SCHEMA_VERSION

    @property
    def regressions(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == "regression"]

    @property
    def improvements(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == "improvement"]

    @property
    def correctness_failures(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.correctness_failed]

    @property
    def failed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == "failed"]

    def should_fail(self) -> bool:
        """What `--fail-on regression` fails on: a regression, a correctness failure, a lost case,
        or nothing compared at all (an empty comparison vouches for nothing)."""
        return bool(self.regressions or self.correctness_failures or self.failed or not self.cases)


def write_report(report: CompareReport, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(asdict(report), indent=1, allow_nan=False), encoding="utf-8")
    tmp.replace(path)
    return path


# ---------------------------------------------------------------- validation of untrusted input


class _Checker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, message: str):
        raise ReportError(self.path, where, message)

    def obj(self, value, where: str) -> dict:
        if not isinstance(value, dict):
            self.fail(where, f"expected an object, got {type(value).__name__}")
        return value

    def text(self, value, where: str, limit: int = MAX_NAME, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            self.fail(where, f"expected a string, got {type(value).__name__}")
        if len(value) > limit:
            self.fail(where, f"longer than {limit} characters")
        if any(ord(ch) < 32 and ch not in "\n\t" for ch in value):
            self.fail(where, "contains control characters")
        return value

    def number(self, value, where: str, optional: bool = False, positive: bool = False) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            self.fail(where, f"expected a finite number, got {value!r}"[:200])
        if positive and value <= 0:
            self.fail(where, f"must be positive, got {value!r}")
        return float(value)

    def integer(self, value, where: str, low: int = 0, high: int = 10**9) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(where, f"expected an integer in [{low}, {high}], got {value!r}"[:200])
        return value

    def boolean(self, value, where: str, optional: bool = False) -> bool | None:
        if value is None and optional:
            return None
        if not isinstance(value, bool):
            self.fail(where, f"expected true/false, got {value!r}"[:200])
        return value

    def choice(self, value, where: str, allowed) -> str:
        if value not in allowed:
            self.fail(where, f"expected one of {', '.join(allowed)}, got {value!r}"[:200])
        return value

    def only_keys(self, data: dict, cls, where: str) -> None:
        known = {f.name for f in fields(cls)}
        extra = set(data) - known
        if extra:
            self.fail(where, f"unknown fields: {', '.join(sorted(map(str, extra)))[:200]}")


def _side(c: _Checker, data, where: str) -> SideResult:
    c.obj(data, where)
    c.only_keys(data, SideResult, where)
    medians = data.get("round_medians_us", [])
    if not isinstance(medians, list) or len(medians) > 1000:
        c.fail(f"{where}.round_medians_us", "expected a list of at most 1000 numbers")
    return SideResult(
        status=c.choice(data.get("status"), f"{where}.status",
                        ("ok", "failed", "crashed", "timeout", "skipped", "unsupported", "missing")),
        median_us=c.number(data.get("median_us"), f"{where}.median_us", optional=True, positive=True),
        round_medians_us=[c.number(m, f"{where}.round_medians_us[{i}]", positive=True) for i, m in enumerate(medians)],
        n_samples=c.integer(data.get("n_samples", 0), f"{where}.n_samples"),
        gap_to_sdpa=c.number(data.get("gap_to_sdpa"), f"{where}.gap_to_sdpa", optional=True, positive=True),
        correct=c.boolean(data.get("correct"), f"{where}.correct", optional=True),
        max_abs_err=c.number(data.get("max_abs_err"), f"{where}.max_abs_err", optional=True),
        rel_err=c.number(data.get("rel_err"), f"{where}.rel_err", optional=True),
        error=c.text(data.get("error"), f"{where}.error", MAX_TEXT, optional=True),
    )


def _case(c: _Checker, data, where: str) -> CaseComparison:
    c.obj(data, where)
    c.only_keys(data, CaseComparison, where)
    ncu = data.get("ncu", [])
    if not isinstance(ncu, list) or len(ncu) > 100:
        c.fail(f"{where}.ncu", "expected a list of at most 100 metrics")
    deltas = []
    for i, d in enumerate(ncu):
        c.obj(d, f"{where}.ncu[{i}]")
        c.only_keys(d, NcuDelta, f"{where}.ncu[{i}]")
        deltas.append(NcuDelta(c.text(d.get("metric"), f"{where}.ncu[{i}].metric"),
                               c.number(d.get("base"), f"{where}.ncu[{i}].base"),
                               c.number(d.get("head"), f"{where}.ncu[{i}].head")))
    return CaseComparison(
        case_id=c.text(data.get("case_id"), f"{where}.case_id"),
        variant=c.text(data.get("variant"), f"{where}.variant"),
        shape_id=c.text(data.get("shape_id"), f"{where}.shape_id"),
        dtype=c.text(data.get("dtype"), f"{where}.dtype"),
        causal=c.boolean(data.get("causal"), f"{where}.causal"),
        verdict=c.choice(data.get("verdict"), f"{where}.verdict", VERDICTS),
        base=_side(c, data.get("base"), f"{where}.base"),
        head=_side(c, data.get("head"), f"{where}.head"),
        ratio=c.number(data.get("ratio"), f"{where}.ratio", optional=True, positive=True),
        low=c.number(data.get("low"), f"{where}.low", optional=True, positive=True),
        high=c.number(data.get("high"), f"{where}.high", optional=True, positive=True),
        correctness_failed=c.boolean(data.get("correctness_failed", False), f"{where}.correctness_failed"),
        ncu=deltas,
    )


def parse_report(data: Any, path: str | Path = COMPARE_FILE) -> CompareReport:
    """Validate already-parsed JSON data into a CompareReport (raises ReportError)."""
    c = _Checker(Path(path))
    c.obj(data, "(top level)")
    if data.get("schema") != COMPARE_SCHEMA:
        c.fail("schema", f"expected {COMPARE_SCHEMA!r}, got {data.get('schema')!r}"[:200])
    version = data.get("schema_version")
    if version != COMPARE_SCHEMA_VERSION:
        c.fail("schema_version", f"this attnwatch reads version {COMPARE_SCHEMA_VERSION}, got {version!r}"[:200])
    c.only_keys(data, CompareReport, "(top level)")
    cases = data.get("cases")
    if not isinstance(cases, list) or len(cases) > MAX_CASES:
        c.fail("cases", f"expected a list of at most {MAX_CASES} cases")
    parsed = [_case(c, item, f"cases[{i}]") for i, item in enumerate(cases)]
    ids = [p.case_id for p in parsed]
    if len(set(ids)) != len(ids):
        c.fail("cases", "duplicate case ids")
    env = c.obj(data.get("environment", {}), "environment")
    clean_env = {}
    if len(env) > 100:
        c.fail("environment", "more than 100 entries")
    for key, value in env.items():
        if isinstance(value, (int, float, bool)) or value is None:
            clean_env[c.text(key, "environment")] = value
        else:
            clean_env[c.text(key, "environment")] = c.text(value, f"environment.{key}", MAX_TEXT)
    notes = data.get("notes", [])
    if not isinstance(notes, list) or len(notes) > 50:
        c.fail("notes", "expected a list of at most 50 strings")
    sha = lambda key: c.text(data.get(key), key, 64)  # noqa: E731
    return CompareReport(
        base_sha=sha("base_sha"),
        head_sha=sha("head_sha"),
        merge_base_sha=sha("merge_base_sha"),
        gpu_name=c.text(data.get("gpu_name"), "gpu_name"),
        rounds=c.integer(data.get("rounds"), "rounds", 1, 1000),
        method=c.choice(data.get("method"), "method", ("hierarchical", "pooled")),
        confidence=c.number(data.get("confidence"), "confidence"),
        min_effect=c.number(data.get("min_effect"), "min_effect"),
        shape_set=c.text(data.get("shape_set"), "shape_set"),
        created_at=c.text(data.get("created_at"), "created_at"),
        cases=parsed,
        base_ref=c.text(data.get("base_ref", ""), "base_ref"),
        head_ref=c.text(data.get("head_ref", ""), "head_ref"),
        repo=c.text(data.get("repo", ""), "repo"),
        environment=clean_env,
        notes=[c.text(n, f"notes[{i}]", MAX_TEXT) for i, n in enumerate(notes)],
    )


def load_report(path: str | Path) -> CompareReport:
    """Read and validate compare.json from an untrusted artifact."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise ReportError(path, "(file)", "not found") from None
    if not path.is_file():
        raise ReportError(path, "(file)", "not a regular file")
    if size > MAX_REPORT_BYTES:
        raise ReportError(path, "(file)", f"{size} bytes, over the {MAX_REPORT_BYTES}-byte limit")
    raw = path.read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ReportError(path, "(file)", f"not UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ReportError(path, f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise ReportError(path, "(file)", str(exc)) from None
    return parse_report(data, path)


def _reject_constant(name: str):
    raise ValueError(f"non-standard JSON constant {name} (NaN/Infinity are not allowed)")
