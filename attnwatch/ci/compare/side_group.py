"""Several warm workers for one side of a compare, taking the rounds in turn.

Why: a worker process carried an offset for its whole life that no round varied. On the H200
(2026-11-23) the head worker's medians sat between -0.7% and +0.6% from the base worker's,
the same sign for most of a compare's cases, and the next compare drew a new offset
(docs/benchmarks/compare.md, "The PR check on the H200"). Its cause was the stream the worker timed
on, which each worker now renews every round (ci/timing/timers.py); side groups remain for
whatever else a process may keep. With one worker per side that offset is a
bias the rounds' interval cannot see. With k workers per side, round r is measured by worker
r mod k of each side, so the rounds' spread contains the process offsets (the interval sees
them) and the point estimate averages k of them instead of resting on one.

Not the default (`--workers-per-side`, ci/run_config.toml): on the H200 two workers per side
made the warm pr-set compare 159.5 s, against 128.0-149.7 s with one worker on other machines
that day (every worker prepares every case once), and the cold one miss its 270 s slot (four
workers compiling at once), without a clearer result.

What a group shares: a case lost by any member (crashed, timed out) is lost for the side and
not asked again, as with one worker (ci/compare/side.py). Only the first member checks
correctness; the others only time (a check is the same computation whoever runs it). Start-up
and builds of the members run in parallel, so the group's start-up and build times are the
slowest member's; the other times add up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from attnwatch.ci.compare.rounds import CaseRound
from attnwatch.ci.compare.side import Side, SideTimes
from attnwatch.ci.plan import PlannedCase

# Members start and build at once: the slowest one's (by variant: each variant's slowest build).
PARALLEL_TIMES = ("startup_s", "build_s", "build_by_variant", "fingerprint_s")


@dataclass
class SideGroup:
    name: str
    members: list[Side]
    measured_by: list[str] = field(default_factory=list)  # the member that measured each round, in order

    @classmethod
    def of(cls, first: Side, workers: int) -> "SideGroup":
        """`first` and `workers - 1` more like it (own names and logs; no correctness checks)."""
        if workers < 1:
            raise ValueError(f"workers per side must be at least 1, got {workers}")
        members = [first]
        for k in range(2, workers + 1):
            spec = replace(first.spec, plan=replace(first.spec.plan, correctness=False), failed_builds={})
            members.append(
                Side(
                    f"{first.name}.{k}",
                    spec,
                    commit_sha=first.commit_sha,
                    max_restarts=first.max_restarts,
                    log=first.log,
                )
            )
        return cls(first.name, members)

    # -- what the session reads, as from one Side ----------------------------------------------

    @property
    def spec(self):
        return self.members[0].spec

    @property
    def commit_sha(self) -> str:
        return self.members[0].commit_sha

    @property
    def environment(self) -> dict:
        return self.members[0].environment

    @property
    def kernels_path(self) -> str:
        return self.members[0].kernels_path

    @property
    def harness_api_version(self) -> int | None:
        return self.members[0].harness_api_version

    @property
    def builds(self) -> list[dict]:
        return self.members[0].builds

    @property
    def fingerprints(self) -> dict[str, dict]:
        return self.members[0].fingerprints

    @property
    def restarts(self) -> int:
        return sum(m.restarts for m in self.members)

    @property
    def final(self) -> dict[str, CaseRound]:
        return {cid: record for m in self.members for cid, record in m.final.items()}

    @property
    def notes(self) -> list[str]:
        return [n for m in self.members for n in m.attribution.notes]

    @property
    def times(self) -> SideTimes:
        out = SideTimes()
        for f in fields(SideTimes):
            values = [getattr(m.times, f.name) for m in self.members]
            if isinstance(values[0], dict):  # seconds by variant, key by key
                keys = {k for m in values for k in m}
                combine = max if f.name in PARALLEL_TIMES else sum
                setattr(out, f.name, {k: combine(m.get(k, 0.0) for m in values) for k in keys})
            else:
                setattr(out, f.name, max(values) if f.name in PARALLEL_TIMES else sum(values))
        return out

    # -- the workers ---------------------------------------------------------------------------

    def start(self) -> None:
        self._each("start")

    def ready(self) -> None:
        self._each("ready")

    def stop(self) -> None:
        self._each("stop")

    def close(self, deadline: float | None = None) -> None:
        for m in self.members:
            m.close(deadline)

    def _each(self, action: str) -> None:
        """Every member's `action` in turn (start and stop return at once, so members overlap)."""
        for m in self.members:
            getattr(m, action)()

    def check_only(self, case_ids: set[str]) -> None:
        """Check correctness of `case_ids` only (the first member is the one that checks)."""
        for m in self.members:
            m.checks = set(case_ids)

    def measure(self, cases: list[PlannedCase], round_index: int, sampling: dict) -> dict[str, CaseRound]:
        """Round `round_index` by member round_index mod k; cases lost by any member stay lost."""
        lost = self.final
        out = {c.case_id: lost[c.case_id] for c in cases if c.case_id in lost}
        member = self.members[round_index % len(self.members)]
        self.measured_by.append(member.name)
        out.update(member.measure([c for c in cases if c.case_id not in out], round_index, sampling))
        return out
