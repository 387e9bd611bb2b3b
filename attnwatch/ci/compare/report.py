"""compare.json: the A/B result, as dataclasses, read back by the project's one validator.

compare.json leaves the GPU job as an artifact and is read by the PR-comment workflow, which
must treat it as untrusted data (anyone who can open a PR can shape it). `load_report`
therefore checks everything, with the checker every bundle file goes through
(history.contract.checks.load_document): size before parsing, strict JSON, schema and version (older
versions through COMPARE_UPGRADERS), every field's type, unknown and missing fields, and
what the field rules below add: ranges, enumerations, string lengths (no control characters)
and the number of cases. Any problem raises `ReportError(path, field, message)`; nothing
from a rejected file is used.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.history.contract.bundle import OPERATOR_BOUNDS
from attnwatch.history.contract.checks import TextRule, Upgrader, load_document, rule, rule_metadata
from attnwatch.history.errors import BundleError
from attnwatch.history.analysis.kernel_config import changed

COMPARE_SCHEMA = "attnwatch.compare"
COMPARE_SCHEMA_VERSION = 9  # v2: SideResult.kernel_configs; v3: CaseComparison.min_effect, .ignored, .explanation;
# v4: CompareReport.selection (which variants were measured, and why) and .times (where the wall time went);
# v5: SideResult.gap_to_baseline and .baseline_variant (were gap_to_sdpa: the baseline was always sdpa);
# v6: SideResult.throttle_reasons; v7: CaseComparison.bound and .bytes (a memory-bound case's bandwidth);
# v8: NcuExplanation.exact (exact counters that differ), RuleChange.band and .accounts_us;
# v9: CompareReport.base_dirty and .head_dirty (a side measured uncommitted changes)
COMPARE_FILE = "compare.json"

MAX_REPORT_BYTES = 8 * 1024 * 1024
MAX_CASES = 5000
MAX_TEXT = 2000  # longest free-text field (errors, notes)
MAX_NAME = 200  # longest identifier-like field (case ids, branch names, GPU names)

# failed: the head did not measure (crash, timeout, error); new: no base measurement;
# removed: the head no longer has the case; skipped: the head does not run it on this GPU.
# The start of a note saying an interval cannot contain between-round variation (one round per
# side, or the pooled method): the comment shows it as a warning (ci/integration/comment/render.py).
NO_RUN_NOISE = "interval does not include run-to-run noise"
VERDICTS = ("regression", "improvement", "no change", "failed", "new", "removed", "skipped")
SIDES = ("base", "head")
SIDE_STATUSES = ("ok", "failed", "crashed", "timeout", "skipped", "unsupported", "missing")
METHODS = ("rounds-t", "hierarchical", "pooled")  # history.analysis.ab.METHODS
# Every string is an identifier-like name unless its field says otherwise.
TEXT = TextRule(max_len=MAX_NAME)


def compare_v1_to_v2(document: dict) -> dict:
    """compare.json v1 -> v2: each side gains the kernel configurations it ran with (v1 did
    not record them: none)."""
    for case in document.get("cases") or []:
        for side in SIDES:
            if isinstance(case, dict) and isinstance(case.get(side), dict):
                case[side].setdefault("kernel_configs", [])
    document["schema_version"] = 2
    return document


def compare_v2_to_v3(document: dict) -> dict:
    """compare.json v2 -> v3: each case gains its own min_effect and ignore rule (v2 had neither:
    the report's min_effect, not ignored) and the counter rules' explanation (v2 had none)."""
    for case in document.get("cases") or []:
        if isinstance(case, dict):
            case.setdefault("min_effect", None)
            case.setdefault("ignored", None)
            case.setdefault("explanation", None)
    document["schema_version"] = 3
    return document


def compare_v3_to_v4(document: dict) -> dict:
    """compare.json v3 -> v4: v3 measured every variant (no selection) and kept no time breakdown."""
    document.setdefault("selection", None)
    document.setdefault("times", {})
    document["schema_version"] = 4
    return document


def compare_v4_to_v5(document: dict) -> dict:
    """compare.json v4 -> v5: a side's gap_to_sdpa is its gap_to_baseline, the baseline sdpa (the
    only one before operators, issue 29)."""
    for case in document.get("cases") or []:
        for side in SIDES:
            if isinstance(case, dict) and isinstance(case.get(side), dict) and "gap_to_sdpa" in case[side]:
                gap = case[side].pop("gap_to_sdpa")
                case[side].update(gap_to_baseline=gap, baseline_variant="sdpa" if gap is not None else None)
    document["schema_version"] = 5
    return document


def compare_v5_to_v6(document: dict) -> dict:
    """compare.json v5 -> v6: each side gains the clocks-event reasons its rounds reported (v5
    did not keep them: none)."""
    for case in document.get("cases") or []:
        for side in SIDES:
            if isinstance(case, dict) and isinstance(case.get(side), dict):
                case[side].setdefault("throttle_reasons", [])
    document["schema_version"] = 6
    return document


def compare_v6_to_v7(document: dict) -> dict:
    """compare.json v6 -> v7: each case gains its operator's bound and byte model (v6 did not
    record them: unknown, so no bandwidth is shown)."""
    for case in document.get("cases") or []:
        if isinstance(case, dict):
            case.setdefault("bound", None)
            case.setdefault("bytes", None)
    document["schema_version"] = 7
    return document


def compare_v7_to_v8(document: dict) -> dict:
    """compare.json v7 -> v8: an explanation gains its exact counter differences and each fired
    rule its noise band and the time it accounts for (v7 compared no counter exactly and judged
    rules by fixed thresholds: none of either)."""
    for case in document.get("cases") or []:
        explanation = case.get("explanation") if isinstance(case, dict) else None
        if isinstance(explanation, dict):
            explanation.setdefault("exact", [])
            for change in explanation.get("changes") or []:
                if isinstance(change, dict):
                    change.setdefault("band", None)
                    change.setdefault("accounts_us", None)
    document["schema_version"] = 8
    return document


def compare_v8_to_v9(document: dict) -> dict:
    """compare.json v8 -> v9: each side gains whether it measured uncommitted changes (v8 did not
    say: not known, taken as clean, as v8's comment showed it)."""
    document.setdefault("base_dirty", False)
    document.setdefault("head_dirty", False)
    document["schema_version"] = 9
    return document


# (schema, version) -> upgrade to version + 1.
COMPARE_UPGRADERS: dict[tuple[str, int], Upgrader] = {
    (COMPARE_SCHEMA, 1): compare_v1_to_v2,
    (COMPARE_SCHEMA, 2): compare_v2_to_v3,
    (COMPARE_SCHEMA, 3): compare_v3_to_v4,
    (COMPARE_SCHEMA, 4): compare_v4_to_v5,
    (COMPARE_SCHEMA, 5): compare_v5_to_v6,
    (COMPARE_SCHEMA, 6): compare_v6_to_v7,
    (COMPARE_SCHEMA, 7): compare_v7_to_v8,
    (COMPARE_SCHEMA, 8): compare_v8_to_v9,
}


class ReportError(UserError):
    def __init__(self, path: str | Path, field_name: str, message: str) -> None:
        self.path = str(path)
        self.field = field_name
        super().__init__(f"{self.path}: {field_name}: {message}")


@dataclass
class SideResult:
    """One side (base or head) of one case, over all rounds."""

    status: str = field(
        metadata=rule_metadata(choices=SIDE_STATUSES)
    )  # "ok" unless every round failed; else the worst outcome
    median_us: float | None = rule(None, latency=True)  # mean of per-round medians
    round_medians_us: list[float] = rule(default_factory=list, latency=True, max_items=1000)
    n_samples: int = rule(0, low=0)
    gap_to_baseline: float | None = rule(None, positive=True)  # mean over rounds, each measured in its own round
    baseline_variant: str | None = None  # the operator's baseline the gap was taken against
    correct: bool | None = None  # None: not checked
    max_abs_err: float | None = None
    rel_err: float | None = None
    error: str | None = rule(None, max_len=MAX_TEXT)
    # The launch configurations the side's kernel ran with, in the order first seen over the
    # rounds (CaseTiming.kernel_config); one name when every round agreed, none when the
    # variant reports none.
    kernel_configs: list[str] = rule(default_factory=list, max_items=100)
    # The NVML clocks-event reasons any of the side's rounds reported (CaseTiming.throttle_reasons,
    # first seen first): the comment marks a side measured under a power or thermal cap
    # (history.analysis.caps).
    throttle_reasons: list[str] = rule(default_factory=list, max_items=20)

    @property
    def kernel_config(self) -> str | None:
        """The side's configuration when every round used one and the same."""
        return self.kernel_configs[0] if len(self.kernel_configs) == 1 else None


@dataclass
class NcuDelta:
    """One ncu metric of a case, base vs head (only for cases with ncu on both sides)."""

    metric: str
    base: float
    head: float


@dataclass
class RuleChange:
    """One counter rule that fired (history.analysis.ncu_explain.CounterChange): the rule, its
    title, its signal on both sides, the relative move, the move over its noise band (or, where
    no noise was measured, its threshold), the band, and the µs of the change it accounts for."""

    rule: str
    title: str = field(metadata=rule_metadata(max_len=MAX_TEXT))
    base: float
    head: float
    change: float
    score: float
    band: float | None = None  # relative; None: judged by the rule's fixed threshold
    accounts_us: float | None = None  # about: the rule's time model (history/analysis/ncu_rules.toml)


@dataclass
class ExactDelta:
    """One exact counter of one kernel that differs (history.analysis.exact_counters.ExactChange)."""

    kernel: str = field(metadata=rule_metadata(max_len=MAX_TEXT))
    metric: str
    label: str
    base: float | None
    head: float | None


@dataclass
class NcuExplanation:
    """Why a regressed or improved case moved, by the counter rules: one line, then the evidence."""

    cause: str = field(metadata=rule_metadata(max_len=MAX_TEXT))
    changes: list[RuleChange] = rule(default_factory=list, max_items=50)
    exact: list[ExactDelta] = rule(default_factory=list, max_items=200)


@dataclass
class CaseComparison:
    case_id: str
    variant: str
    shape_id: str
    dtype: str
    causal: bool
    verdict: str = field(metadata=rule_metadata(choices=VERDICTS))
    base: SideResult
    head: SideResult
    ratio: float | None = rule(None, positive=True)  # head / base
    low: float | None = rule(None, positive=True)
    high: float | None = rule(None, positive=True)
    correctness_failed: bool = False  # head failed correctness (base's failures are not the PR's)
    ncu: list[NcuDelta] = rule(default_factory=list, max_items=100)
    # The case's own min_effect where history/analysis/case_rules.toml gives one (None: the report's), and
    # the ignore rule it fell under ("ignored until DATE: reason"; None: not ignored).
    min_effect: float | None = rule(None, positive=True)
    ignored: str | None = rule(None, max_len=MAX_TEXT)
    explanation: NcuExplanation | None = (
        None  # every decided case (regressions, improvements, sure-but-small) profiled on both sides
    )
    # The operator's roofline bound and minimum DRAM bytes of one call (CaseTiming.bound, .bytes):
    # the comment shows a memory-bound case's achieved bandwidth. None: not recorded.
    bound: str | None = rule(None, choices=OPERATOR_BOUNDS)
    bytes: float | None = rule(None, positive=True)

    def effect(self, report_min_effect: float) -> float:
        """The min_effect this case was judged by."""
        return report_min_effect if self.min_effect is None else self.min_effect

    @property
    def config_change(self) -> tuple[str, str] | None:
        """(base, head) configuration when each side ran one and they differ."""
        b, h = self.base.kernel_config, self.head.kernel_config
        return (b, h) if b is not None and h is not None and changed(b, h) else None


@dataclass
class VariantChoice:
    """One variant's part in the selection (ci/compare/select.py): measured or not, and why, with
    its fingerprint on each side (sha256; None where unknown or absent)."""

    variant: str
    measured: bool
    reason: str = field(metadata=rule_metadata(max_len=MAX_TEXT))
    cases: int = rule(0, low=0)  # planned cases of the variant
    base_fingerprint: str | None = rule(None, max_len=64)
    head_fingerprint: str | None = rule(None, max_len=64)


@dataclass
class SelectionRecord:
    """Which variants a compare measured. `everything`: why all were (--all, a change to the shared
    harness or the libraries); None: selected by fingerprint. `canary`: the unchanged variants
    measured anyway as an A/A check, whose verdicts are shown as such."""

    variants: list[VariantChoice] = field(metadata=rule_metadata(max_items=1000))
    reference: str | None = None
    canary: list[str] = rule(default_factory=list, max_items=100)
    everything: str | None = rule(None, max_len=MAX_TEXT)

    @property
    def skipped(self) -> list[VariantChoice]:
        return [v for v in self.variants if not v.measured]


TIME_PARTS = (
    "startup_s",
    "builds_s",
    "fingerprint_s",
    "correctness_s",
    "timing_s",
    "judging_s",
    "profiling_s",
    "other_s",
    "wall_s",
)


@dataclass
class CompareReport:
    base_sha: str = field(metadata=rule_metadata(max_len=64))
    head_sha: str = field(metadata=rule_metadata(max_len=64))
    merge_base_sha: str = field(metadata=rule_metadata(max_len=64))
    gpu_name: str
    rounds: int = field(metadata=rule_metadata(low=1, high=1000))
    method: str = field(metadata=rule_metadata(choices=METHODS))
    confidence: float
    min_effect: float
    shape_set: str
    created_at: str = field(
        metadata=rule_metadata(timestamp=True)
    )  # ISO 8601 with its UTC offset (history.contract.checks.parse_utc)
    cases: list[CaseComparison] = field(metadata=rule_metadata(max_items=MAX_CASES))
    base_ref: str = ""
    head_ref: str = ""
    repo: str = ""  # OWNER/NAME (ci.environment.repository_identity); "" only in reports written before v8
    # A side measured a checkout with uncommitted changes (its rounds' manifests say `dirty`): its
    # numbers are not its commit's. The comment says so; `--fail-on regression` refuses it.
    base_dirty: bool = False
    head_dirty: bool = False
    # Scalars only (GPU, driver and library versions); text up to MAX_TEXT.
    environment: dict[str, str | int | float | bool | None] = rule(
        default_factory=dict, max_items=100, max_len=MAX_TEXT
    )
    notes: list[str] = rule(default_factory=list, max_items=50, max_len=MAX_TEXT)
    selection: SelectionRecord | None = None  # None: every variant measured, none selected (also bundles compared)
    # Seconds of the compare's wall time per part (TIME_PARTS); empty when nothing was measured.
    times: dict[str, float] = rule(default_factory=dict, max_items=len(TIME_PARTS))
    schema: str = COMPARE_SCHEMA
    schema_version: int = COMPARE_SCHEMA_VERSION

    @property
    def regressions(self) -> list[CaseComparison]:
        """Regressions that count. An ignored case (history/analysis/case_rules.toml) counts in none of these
        lists and fails no check: it is listed apart, with its rule."""
        return [c for c in self.cases if c.verdict == "regression" and not c.ignored]

    @property
    def ignored(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.ignored]

    @property
    def canary_cases(self) -> list[CaseComparison]:
        """The A/A canary's cases: variants identical on both sides, measured as a check."""
        canary = set(self.selection.canary) if self.selection else set()
        return [c for c in self.cases if c.variant in canary]

    @property
    def improvements(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == "improvement" and not c.ignored]

    @property
    def correctness_failures(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.correctness_failed and not c.ignored]

    @property
    def failed(self) -> list[CaseComparison]:
        return [c for c in self.cases if c.verdict == "failed" and not c.ignored]

    def dirty_sides(self) -> list[tuple[str, str]]:
        """(side, its commit) of each side that measured uncommitted changes."""
        return [
            (side, sha)
            for side, sha, dirty in (
                ("base", self.merge_base_sha, self.base_dirty),
                ("head", self.head_sha, self.head_dirty),
            )
            if dirty
        ]

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


def load_report(path: str | Path) -> CompareReport:
    """Read and validate compare.json from an untrusted artifact (raises ReportError)."""
    path = Path(path)
    try:
        report: CompareReport = load_document(
            path,
            CompareReport,
            schema=COMPARE_SCHEMA,
            current=COMPARE_SCHEMA_VERSION,
            upgraders=COMPARE_UPGRADERS,
            max_bytes=MAX_REPORT_BYTES,
            text=TEXT,
        )
    except BundleError as exc:
        raise ReportError(exc.path, exc.field, exc.message) from None
    ids = [c.case_id for c in report.cases]
    if len(set(ids)) != len(ids):
        raise ReportError(path, "cases", "duplicate case ids")
    for part, seconds in report.times.items():
        if part not in TIME_PARTS:
            raise ReportError(path, "times", f"unknown part {part!r} (known: {', '.join(TIME_PARTS)})")
        if seconds < 0:
            raise ReportError(path, f"times.{part}", f"expected seconds >= 0, got {seconds}")
    return report
