"""Turn A/B rounds into per-case comparisons with verdicts (pure: no GPU, no database)."""

from __future__ import annotations

import statistics
from typing import Sequence

from attnwatch.ci.compare.report import (
    NO_RUN_NOISE,
    CaseComparison,
    ExactDelta,
    NcuDelta,
    SideResult,
    NcuExplanation,
    RuleChange,
)
from attnwatch.ci.compare.rounds import NCU_FIELDS, CaseRound, RoundData
from attnwatch.history.analysis.ab import ratio_interval, verdict
from attnwatch.history.analysis.thresholds import Thresholds
from attnwatch.history.analysis.statistics import median
from attnwatch.history.analysis.case_rules import CaseRules
from attnwatch.history.analysis.ncu_explain import explain
from attnwatch.history.analysis.sass_diff import BinaryDiff, case_code_change
from attnwatch.history.analysis.tiers import SLOWER_UNDER, UNDER, tier

# The tiers a compare explains: every decided change, the sure-but-small ones included
# (history.analysis.tiers); a case whose interval holds 1 has nothing to explain.
EXPLAINED = ("regression", "improvement", *UNDER)


def _side(rounds: list[CaseRound | None]) -> SideResult:
    present = [r for r in rounds if r is not None]
    measured = [r for r in present if r.status == "ok" and r.samples_us]
    if not present:
        return SideResult(status="missing", error="case not in this side's runs")
    checked = [r.correct for r in present if r.correct is not None]
    correct = all(checked) if checked else None
    worst = lambda name: max((getattr(r, name) for r in present if getattr(r, name) is not None), default=None)  # noqa: E731
    errors = [r.error for r in present if r.error]
    gaps = [r.gap_to_baseline for r in measured if r.gap_to_baseline is not None]
    baseline = next((r.baseline_variant for r in measured if r.baseline_variant), None)
    if len(measured) < len(present):  # a round that did not measure makes the side unusable for A/B
        bad = next(r for r in present if not (r.status == "ok" and r.samples_us))
        return SideResult(
            status=bad.status if bad.status != "ok" else "failed",
            correct=correct,
            max_abs_err=worst("max_abs_err"),
            rel_err=worst("rel_err"),
            error=(errors[0] if errors else f"no samples in {len(present) - len(measured)} round(s)"),
        )
    medians = [median(r.samples_us) for r in measured]
    configs = list(dict.fromkeys(r.kernel_config for r in measured if r.kernel_config))
    reasons = list(dict.fromkeys(str(x) for r in measured for x in ((r.timing or {}).get("throttle_reasons") or [])))
    return SideResult(
        status="ok",
        median_us=statistics.fmean(medians),
        round_medians_us=medians,
        n_samples=sum(len(r.samples_us) for r in measured),
        gap_to_baseline=statistics.fmean(gaps) if gaps else None,
        baseline_variant=baseline if gaps else None,
        correct=correct,
        max_abs_err=worst("max_abs_err"),
        rel_err=worst("rel_err"),
        error=errors[0] if errors else None,
        kernel_configs=configs,
        throttle_reasons=reasons,
    )


def _ncu_deltas(base: list[CaseRound | None], head: list[CaseRound | None]) -> list[NcuDelta]:
    b = next((r.ncu for r in base if r is not None and r.ncu), {})
    h = next((r.ncu for r in head if r is not None and r.ncu), {})
    return [NcuDelta(k, b[k], h[k]) for k in NCU_FIELDS if k in b and k in h]


THROTTLED = "timing__throttled_share"  # ncu_rules.toml's "throttled" rule reads it


def _throttled_share(rounds: list[CaseRound | None]) -> float | None:
    """The share of the side's timed calls that NVML flagged as throttled (CaseTiming)."""
    timed = [(r.timing, r.samples_us) for r in rounds if r is not None and r.timing and r.samples_us]
    calls = sum(len(samples) for _, samples in timed)
    if not calls:
        return None
    return sum(int(timing.get("throttled_samples") or 0) for timing, _ in timed) / calls


def explain_change(
    base: list[CaseRound | None],
    head: list[CaseRound | None],
    slower: bool,
    case_id: str | None = None,
    time_change_us: float | None = None,
    code_change: BinaryDiff | None = None,
) -> NcuExplanation | None:
    """The exact counters that differ and the counter rules beyond their noise
    (history.analysis.ncu_explain) when both sides were profiled, with the kernels their calls
    launch differently; the timed rounds' throttled share joins the counters, for the rule that
    exonerates. `time_change_us`: the timed rounds' change, which the rules' shares are of.
    `code_change`: the variant's binaries' diff (ci/compare/binaries.py), of which the cause
    names the kernels this case's calls launched (sass_diff.launched_only), and nothing when
    those did not change."""
    b_round = next((r for r in base if r is not None and r.counters), None)
    h_round = next((r for r in head if r is not None and r.counters), None)
    if b_round is None or h_round is None:
        return None
    b, h = dict(b_round.counters), dict(h_round.counters)
    for counters, rounds in ((b, base), (h, head)):
        share = _throttled_share(rounds)
        if share is not None:
            counters[THROTTLED] = share
    code = case_code_change(code_change, [k.name for k in (*b_round.launches, *h_round.launches)])
    found = explain(
        b,
        h,
        slower,
        launches=(b_round.launches, h_round.launches),
        case_id=case_id,
        time_change_us=time_change_us,
        code_change=code,
    )
    return NcuExplanation(
        found.cause,
        [RuleChange(c.rule, c.title, c.base, c.head, c.change, c.score, c.band, c.accounts_us) for c in found.changes],
        [ExactDelta(e.kernel, e.metric, e.label, e.base, e.head) for e in found.exact],
    )


_NOT_RUN = ("skipped", "unsupported")


def _unmeasured_verdict(base_status: str, head_status: str) -> str:
    """When a side has no measurement: only the head's own failures are the PR's fault."""
    if head_status in _NOT_RUN:
        return "skipped"
    if head_status == "missing":
        return "removed"
    if head_status == "ok":
        return "new"  # the base has no measurement (new case, or broken before this PR)
    return "failed"


def compare_rounds(
    base: Sequence[RoundData],
    head: Sequence[RoundData],
    thresholds: Thresholds,
    *,
    method: str,
    resamples: int,
    seed: int = 0,
    confidence: float | None = None,
    rules: CaseRules = CaseRules(),
    code_changes: dict[str, BinaryDiff] | None = None,
) -> list[CaseComparison]:
    """One CaseComparison per case seen on either side, sorted by case id.

    A case is judged on the rounds it was measured in (a sequential compare stops measuring a
    decided case: ci/compare/sequential.py). `confidence`: the interval's level, default the
    thresholds'; a sequential compare passes its per-look level, which reproduces the interval
    of the look the case stopped at (same rounds, same seed). `rules` (history/analysis/case_rules.toml):
    a case's own min_effect, and the ignore rule it falls under, both recorded on the case.
    `code_changes`: variant -> how its kernels' binaries differ (ci/compare/binaries.py), and
    case id -> how the binary it compiled at run time differs (ci/compare/runtime_binaries.py),
    whose part about a case's launched kernels leads the cause of its explained cases.
    """
    ids = sorted({cid for rd in (*base, *head) for cid in rd.cases})
    out = []
    for cid in ids:
        b_rounds = [rd.cases.get(cid) for rd in base]
        h_rounds = [rd.cases.get(cid) for rd in head]
        info = next(r for r in (*h_rounds, *b_rounds) if r is not None)
        b_side, h_side = _side(b_rounds), _side(h_rounds)
        model = next((r.timing for r in (*h_rounds, *b_rounds) if r is not None and r.timing), None) or {}
        comp = CaseComparison(
            case_id=cid,
            variant=info.variant,
            shape_id=info.shape_id,
            dtype=info.dtype,
            causal=info.causal,
            verdict="failed",
            base=b_side,
            head=h_side,
            correctness_failed=h_side.correct is False,
            bound=model.get("bound"),
            bytes=model.get("bytes"),
        )
        min_effect = rules.min_effect(cid, thresholds.gpu, thresholds.min_effect)
        comp.min_effect = None if min_effect == thresholds.min_effect else min_effect
        rule = rules.ignored(cid, thresholds.gpu)
        comp.ignored = rule.text() if rule else None
        if b_side.status == "ok" and h_side.status == "ok":
            iv = ratio_interval(
                [r.samples_us for r in b_rounds if r is not None],
                [r.samples_us for r in h_rounds if r is not None],
                method=method,
                confidence=confidence or thresholds.confidence,
                resamples=resamples,
                seed=seed,
            )
            comp.ratio, comp.low, comp.high = iv.ratio, iv.low, iv.high
            comp.verdict = verdict(iv, min_effect)
        else:
            comp.verdict = _unmeasured_verdict(b_side.status, h_side.status)
        decided = tier(comp.verdict, comp.low, comp.high)
        if decided in EXPLAINED:
            comp.ncu = _ncu_deltas(b_rounds, h_rounds)
            change = (h_side.median_us - b_side.median_us) if b_side.median_us and h_side.median_us else None
            comp.explanation = explain_change(
                b_rounds,
                h_rounds,
                slower=decided in ("regression", SLOWER_UNDER),
                case_id=cid,
                time_change_us=change,
                code_change=(code_changes or {}).get(cid) or (code_changes or {}).get(info.variant),
            )
        out.append(comp)
    return out


def noise_warnings(cases: Sequence[CaseComparison], method: str) -> list[str]:
    """Warnings for intervals that cannot contain between-round variation (issue 11).

    The round-level intervals (paired t, two-level bootstrap) get run-to-run variation only from
    the spread between rounds: with one round per side there is none to see, and the pooled
    method ignores rounds altogether. Such an interval is narrower than the truth (an A/A on
    an H200 with one round excluded zero for many cases), so it is never shown silently.
    """
    compared = [c for c in cases if c.ratio is not None]
    out = []
    if method == "pooled" and compared:
        out.append(f"{NO_RUN_NOISE}: the pooled bootstrap ignores the rounds (use --method rounds-t)")
    single = [c for c in compared if min(len(c.base.round_medians_us), len(c.head.round_medians_us)) < 2]
    if single and method != "pooled":
        out.append(
            f"{NO_RUN_NOISE}: {len(single)} of {len(compared)} compared cases have one round per side, "
            f"so between-round variation cannot be estimated and their intervals are too narrow "
            f"(use at least 3 rounds)"
        )
    return out
