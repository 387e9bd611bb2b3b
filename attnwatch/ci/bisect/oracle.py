"""The bisect's oracle: one same-job compare of the good revision against a candidate commit.

Each call checks the candidate out as a git worktree (ci.compare.revisions) and runs one
compare session (ci.compare.session: a warm worker per side, alternating rounds, the
sequential design and interval of ci.compare.sequential) with the good revision as the base
and the candidate as the head, so drift within the job hits both alike. The good revision's
worktree is made once and reused by every call; every worker builds through the shared compile
cache (kernels/compile_cache.py, keyed by the kernel's content: an unchanged kernel is compiled
once for the whole bisect), and Triton's own cache likewise.

A candidate is judged on the tracked cases (all given cases, narrowed to those that are slow
at the bad revision once it was measured): `slow` when any is decided a regression, `same`
when every one is decided no change or improvement, or its interval lies wholly below
1 + min_effect, else `undecided` (an interval that decides neither within the round cap, or a
side that did not measure). The bisect asks one-sided whether a candidate carries a step of at
least min_effect (the bad revision's was decided one): an interval whose upper end is below it
answers no at the interval's one-sided level (1 - alpha/2), however far its lower end reaches,
where the compare's two-sided "no change" would also need the lower end inside -min_effect and
leaves a noisy candidate undecided. Attempt 1 doubles the round cap (at most 50): the search's
one re-measure (ci/bisect/search.py).
"""

from __future__ import annotations

import subprocess
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from attnwatch.ci.bisect.search import Judgement
from attnwatch.ci.compare.report import CaseComparison
from attnwatch.ci.compare.sequential import SequentialDesign
from attnwatch.ci.errors import UserError
from attnwatch.ci.plan import PlannedCase

MAX_ROUNDS = 50


@dataclass(frozen=True)
class Measurement:
    """What one compare of the good revision against `sha` found (Judgement.data)."""

    sha: str
    attempt: int
    cases: list[CaseComparison]
    decided: dict[str, str]
    rounds: int
    wall_s: float
    out_dir: Path


def planned_cases(case_ids: list[str]) -> list[PlannedCase]:
    """The named cases (kernels.cases ids) as a plan; a one-line error for an unknown one."""
    from attnwatch.kernels.cases import parse_case_id
    from attnwatch.kernels.operators import operator_of_shape
    from attnwatch.kernels.shapes import SHAPES

    out = []
    for text in dict.fromkeys(case_ids):
        try:
            variant, shape_id, dtype, mode = parse_case_id(text)
        except ValueError as exc:
            raise UserError(f"--case: {exc}") from None
        if shape_id not in SHAPES:
            raise UserError(f"--case {text}: unknown shape {shape_id!r}")
        shape = SHAPES[shape_id]
        operator = operator_of_shape(shape)
        if operator is None or mode not in operator.modes:
            raise UserError(f"--case {text}: mode {mode!r} is not one of shape {shape_id!r}'s operator")
        out.append(PlannedCase.of(variant, shape, dtype, mode, operator.name))
    return out


def shape_set_of(cases: list[PlannedCase]) -> str:
    """The first named shape set holding the first case's shape (recorded in the round bundles)."""
    from attnwatch.kernels.shapes import SHAPE_SETS

    return next((name for name, ids in SHAPE_SETS.items() if cases[0].shape_id in ids), "")


def git_text(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise UserError(f"git {args[0]}: {(done.stderr or done.stdout).strip()[:300]}")
    return done.stdout.strip()


def _is_ancestor(repo: Path, older: str, newer: str) -> bool:
    return (
        subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", older, newer], capture_output=True, timeout=120
        ).returncode
        == 0
    )


def commit_range(repo: Path, good: str, bad: str, within: str | None = None) -> list[str]:
    """[good, ..., bad]: the good commit, then bad's first-parent line after it, oldest first
    (a merged pull request is one step, as the default branch received it). `within`: a
    revision both must be reachable from (a trusted job measures default-branch code only)."""
    if not _is_ancestor(repo, good, bad):
        raise UserError(f"--good {good[:12]} is not an ancestor of --bad {bad[:12]}")
    if within is not None and not _is_ancestor(repo, bad, within):
        raise UserError(f"--bad {bad[:12]} is not reachable from --within {within[:12]}: not measured here")
    between = git_text(repo, "rev-list", "--reverse", "--first-parent", "--ancestry-path", f"{good}..{bad}").split()
    if not between:
        raise UserError(f"no commits between {good[:12]} and {bad[:12]}")
    return [good, *between]


def subject(repo: Path, sha: str) -> str:
    return git_text(repo, "log", "-1", "--format=%s", sha)[:200]


def judge(
    cases: list[CaseComparison], decided: dict[str, str], tracked: set[str], min_effect: float
) -> tuple[str, str]:
    """(state, why) of a candidate from its compare (module doc); `min_effect`: the compare's,
    where a case has none of its own."""
    states, reasons = [], []
    for c in cases:
        if c.case_id not in tracked:
            continue
        verdict = decided.get(c.case_id)
        if verdict == "regression":
            states.append("slow")
            reasons.append(f"{c.case_id} {_interval(c)} regression")
        elif verdict in ("no change", "improvement"):
            states.append("same")
            reasons.append(f"{c.case_id} {_interval(c)} {verdict}")
        elif c.ratio is not None and c.high is not None and c.high < 1.0 + c.effect(min_effect):
            states.append("same")
            reasons.append(f"{c.case_id} {_interval(c)}: surely below +{c.effect(min_effect):.1%}")
        elif c.ratio is not None:
            states.append("undecided")
            reasons.append(f"{c.case_id} {_interval(c)}: neither surely beyond the threshold nor inside it")
        else:
            side = c.head if c.head.status != "ok" else c.base
            states.append("undecided")
            reasons.append(f"{c.case_id} not compared ({c.verdict}: {side.status} {side.error or ''})".strip())
    if not states:
        return "undecided", "none of the cases was measured"
    state = "slow" if "slow" in states else "same" if all(s == "same" for s in states) else "undecided"
    return state, "; ".join(reasons)[:1500]


def _interval(c: CaseComparison) -> str:
    return f"x{c.ratio:.3f} [{c.low:.3f}, {c.high:.3f}]"


class CompareOracle:
    """`oracle(sha, attempt)` for ci.bisect.search; a context manager holding the good worktree."""

    def __init__(
        self,
        repo: Path,
        good: str,
        bad: str,
        cases: list[PlannedCase],
        options,
        thresholds,
        out_dir: Path,
        log: Callable[[str], None] = print,
    ):
        self.repo, self.good, self.bad, self.cases = repo, good, bad, cases
        self.options, self.thresholds, self.out_dir, self.log = options, thresholds, Path(out_dir), log
        self.tracked = {c.case_id for c in cases}
        self.measurements: list[Measurement] = []
        self._stack = ExitStack()
        self._good_root: Path | None = None

    def __enter__(self) -> "CompareOracle":
        from attnwatch.ci.compare.revisions import worktree
        from attnwatch.ci.kernels_api import check_measurable

        self._good_root = self._stack.enter_context(worktree(self.repo, self.good, "bisect-good"))
        try:
            check_measurable(self._good_root, "good revision", self.good[:12])
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._stack.close()

    def __call__(self, sha: str, attempt: int) -> Judgement:
        from attnwatch.ci.compare.revisions import worktree
        from attnwatch.ci.kernels_api import check_measurable

        options = self.options
        if attempt:
            design = options.design
            options = replace(
                options,
                design=SequentialDesign(design.min_rounds, min(MAX_ROUNDS, design.max_rounds * 2), design.confidence),
            )
        out = self.out_dir / f"{len(self.measurements) + 1:02d}-{sha[:12]}"
        self.log(f"bisect: measuring {sha[:12]} against the good {self.good[:12]} ({options.design.describe()})")
        with worktree(self.repo, sha, "bisect") as root:
            try:
                check_measurable(root, "head", sha[:12])
            except UserError as exc:  # another harness API: this commit cannot be measured here
                return Judgement("undecided", str(exc)[:300])
            measurement = self._measure(sha, attempt, root, options, out)
        state, why = judge(measurement.cases, measurement.decided, self.tracked, options.min_effect)
        if sha == self.bad and state == "slow":
            self.tracked = {c.case_id for c in measurement.cases if measurement.decided.get(c.case_id) == "regression"}
        self.log(f"bisect: {sha[:12]}: {state} ({why[:300]})")
        return Judgement(state, why, measurement)

    def _measure(self, sha: str, attempt: int, root: Path, options, out: Path) -> Measurement:
        from attnwatch.ci.compare.analysis import compare_rounds
        from attnwatch.ci.compare.revisions import CompareSide
        from attnwatch.ci.compare.rounds import read_round
        from attnwatch.ci.compare.session import run_session

        out.mkdir(parents=True, exist_ok=True)
        sides = (CompareSide("base", self.good, self._good_root), CompareSide("head", sha, root))
        session = run_session(self.cases, sides=sides, out_dir=out, options=options, log=self.log)
        base, head = ([read_round(p) for p in session.bundles[name]] for name in ("base", "head"))
        cases = compare_rounds(
            base,
            head,
            self.thresholds,
            method=options.method,
            confidence=options.design.per_look_confidence,
            resamples=options.resamples,
        )
        measurement = Measurement(
            sha,
            attempt,
            cases,
            dict(session.measured.decided),
            len(session.measured.base),
            session.measured.wall_s,
            out,
        )
        self.measurements.append(measurement)
        return measurement
