"""The comment's account of a selective compare (ci/compare/select.py): what was not measured and
why, in one folded line, and the A/A canary's verdicts, shown as a check rather than as changes.

Every value comes from compare.json (untrusted): names are escaped as in the rest of the comment.
"""

from __future__ import annotations

from collections import Counter

from attnwatch.ci.integration.comment.escape import md_code, md_text
from attnwatch.ci.compare.report import CompareReport
from attnwatch.ci.compare.select import BECAUSE, REFERENCE

MOVED = ("regression", "improvement")


def selection_lines(report: CompareReport) -> list[str]:
    """Lines for the comment (none when the compare measured every variant without selecting)."""
    selection = report.selection
    if selection is None:
        return []
    if selection.everything:
        return [f"Every variant measured: {md_text(selection.everything, 300)}.", ""]
    lines = []
    skipped = selection.skipped
    if skipped:
        cases = sum(v.cases for v in skipped)
        names = ", ".join(f"{md_code(v.variant)} ({v.cases})" for v in skipped[:60])
        more = f" and {len(skipped) - 60} more" if len(skipped) > 60 else ""
        lines += [
            f"<details><summary>Not measured: {len(skipped)} variants ({cases} cases), unchanged: identical code "
            f"and binaries on both sides (fingerprints in compare.json)</summary>",
            "",
            names + more,
            "",
            "</details>",
            "",
        ]
    lines += _baseline_lines(selection)
    lines += _canary_lines(report)
    return lines


def _baseline_lines(selection) -> list[str]:
    """The baselines measured (compare.json's selection `reference`) and why each was: the
    reference always, another operator's for a change of its operator (ci/compare/select.py)."""
    why = {v.variant: v.reason for v in selection.variants if v.measured}

    def role(name: str) -> str:
        reason = why.get(name, "")
        if reason == REFERENCE:
            return "the reference, always"
        if BECAUSE in reason:
            return "because " + md_text(reason.rsplit(BECAUSE, 1)[1], 200)
        return "changed itself"

    names = [n for n in (selection.reference or "").split(", ") if n][:20]
    return [f"Baselines measured: {', '.join(f'{md_code(n)} ({role(n)})' for n in names)}.", ""] if names else []


def _canary_lines(report: CompareReport) -> list[str]:
    cases = report.canary_cases
    if not cases or report.selection is None:  # canary cases come only with a selection
        return []
    verdicts = Counter(c.verdict for c in cases)
    names = ", ".join(md_code(v) for v in report.selection.canary)
    said = ", ".join(f"{n} {verdict}" for verdict, n in sorted(verdicts.items()))
    if any(verdicts[v] for v in MOVED):
        return [
            f"> ⚠️ **A/A canary moved**: {names}, identical on both sides, read {said}: the fingerprint missed "
            "a change, or the noise floor is off. Its verdicts count like any other case's.",
            "",
        ]
    return [f"A/A canary {names} (identical on both sides, measured as a check): {said}.", ""]
