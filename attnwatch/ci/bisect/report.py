"""What a bisect says: the one-line outcome (printed and recorded on the alert), the table of
measured revisions, and `bisect.json` (every probe with its intervals, for the record)."""

from __future__ import annotations

from pathlib import Path

from attnwatch.ci.bisect.oracle import Measurement, subject
from attnwatch.ci.bisect.search import SearchResult
from attnwatch.history.contract.bundle_writer import write_json_atomic


def _intervals(measurement: Measurement | None, only_regressions: bool) -> list[str]:
    if measurement is None:
        return []
    out = []
    for c in measurement.cases:
        if (
            c.ratio is None
            or c.low is None
            or c.high is None
            or (only_regressions and measurement.decided.get(c.case_id) != "regression")
        ):
            continue
        out.append(
            f"{c.case_id} x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}] "
            f"({(c.ratio - 1) * 100:+.1f}% [{(c.low - 1) * 100:+.1f}%, {(c.high - 1) * 100:+.1f}%])"
        )
    return out


def _measurement(result: SearchResult, index: int) -> Measurement | None:
    judgement = result.last_judgement(index)
    return judgement.data if judgement is not None and isinstance(judgement.data, Measurement) else None


def outcome_line(result: SearchResult, repo: Path) -> str:
    """One line: the culprit with its interval against the good revision, or why there is none."""
    commits = result.commits
    sha = result.culprit
    if sha is not None:  # the outcome is "found"
        found = "; ".join(_intervals(_measurement(result, result.bad_index), only_regressions=True))
        parent = "the good revision" if result.good_index == 0 else f"its predecessor {commits[result.good_index][:12]}"
        return (
            f'found {sha[:12]} "{subject(repo, sha)}": {found} against the good {commits[0][:12]}, '
            f"{parent} measured not slower"
        )
    if result.outcome == "not reproduced":
        return f"not reproduced: {result.why}"
    low, high = commits[result.good_index], commits[result.bad_index]
    return f"undecided between {low[:12]} (not slower) and {high[:12]} (slower): {result.why}"


def print_report(result: SearchResult, repo: Path, wall_s: float) -> None:
    print(f"{'#':>2}  {'commit':<12}  {'try':>3}  {'state':<9}  {'rounds':>6}  {'wall s':>7}  subject")
    for n, probe in enumerate(result.probes, 1):
        m = probe.judgement.data if isinstance(probe.judgement.data, Measurement) else None
        rounds, wall = (str(m.rounds), f"{m.wall_s:.1f}") if m else ("-", "-")
        print(
            f"{n:>2}  {probe.sha[:12]:<12}  {probe.attempt + 1:>3}  {probe.judgement.state:<9}  {rounds:>6}  "
            f"{wall:>7}  {subject(repo, probe.sha)[:60]}"
        )
    print(outcome_line(result, repo))
    print(
        f"bisect: {result.revisions_measured} of {len(result.commits) - 1} revisions measured "
        f"({len(result.probes)} compares), wall time {wall_s:.1f} s"
    )


def write_result(path: Path, result: SearchResult, wall_s: float, text: str) -> Path:
    document = {
        "schema": "attnwatch.bisect",
        "schema_version": 1,
        "outcome": result.outcome,
        "summary": text,
        "culprit": result.culprit,
        "good": result.commits[0],
        "bad": result.commits[-1],
        "commits": result.commits,
        "range": [result.commits[result.good_index], result.commits[result.bad_index]],
        "why": result.why,
        "revisions_measured": result.revisions_measured,
        "wall_s": round(wall_s, 3),
        "probes": [
            {
                "sha": p.sha,
                "attempt": p.attempt,
                "state": p.judgement.state,
                "why": p.judgement.why,
                "intervals": _intervals(
                    p.judgement.data if isinstance(p.judgement.data, Measurement) else None, only_regressions=False
                ),
                "out": (
                    str(Path(p.judgement.data.out_dir).relative_to(path.parent))
                    if isinstance(p.judgement.data, Measurement)
                    else None
                ),
            }
            for p in result.probes
        ],
    }
    write_json_atomic(path, document)
    return path
