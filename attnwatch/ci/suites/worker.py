"""The run child's side of the engine: measure a group when pytest first asks, journal as it goes.

Runs inside the pytest child (`ci/suites/test_bench.py`), never in the parent. The first test
of an interleave group calls `GroupMeasurer.result(case)`, which has the engine
(ci/engine/group.py) measure the whole group (every variant of one shape/dtype/causal) and
caches the results; each test then reports its own case to pytest-benchmark, timing it once
more on the host (`phase`), and journals its `outcome`.

Every engine event goes to the journal as it happens (ci/journal.py, vocabulary in
ci/engine/events.py); the parent rebuilds the run from it (ci/suite_state.py) and handles what
the child cannot: a fault or an abort ends the child, and the journal's last `begin`/`beat`
names the case in flight (ci/supervisor.py, ci/attribution.py).
"""

from __future__ import annotations

import time
from typing import ContextManager

from attnwatch.ci.engine.group import CaseResult, Engine
from attnwatch.ci.journal import JournalWriter
from attnwatch.ci.plan import PlannedCase, RunPlan


class GroupMeasurer:
    """Session-scoped: the engine and the per-group result cache."""

    def __init__(self, plan: RunPlan, journal: JournalWriter) -> None:
        self.plan = plan
        self.journal = journal
        self.engine = Engine(plan, journal.write)
        self.config, self.flusher = self.engine.config, self.engine.flusher
        self._results: dict[str, CaseResult] = {}
        self._by_group: dict[str, list[PlannedCase]] = {}
        for case in plan.cases:
            self._by_group.setdefault(case.group, []).append(case)

    def case(self, case_id: str) -> PlannedCase:
        return self.engine.cases[case_id]

    def build_all(self) -> list[dict]:
        return self.engine.build_all()

    def phase(self, case_id: str, phase: str) -> ContextManager[None]:
        """A stage of the child's own (host timing): journalled, synchronized, a fault ends the child."""
        return self.engine.stage(case_id, phase)

    def outcome(self, case: PlannedCase, status: str, error: str | None = None) -> None:
        started = self._results[case.case_id].started if case.case_id in self._results else time.time()
        self.journal.write("outcome", case=case.case_id, status=status, error=error, duration_s=time.time() - started)

    def result(self, case: PlannedCase) -> CaseResult:
        if case.case_id not in self._results:
            self._release_other_groups(case.group)
            self._results.update(self.engine.measure(self._by_group[case.group], keep_callables=True))
        return self._results[case.case_id]

    def _release_other_groups(self, group: str) -> None:
        """Drop the callables (and so the device tensors) of groups already reported."""
        for other, cases in self._by_group.items():
            if other != group:
                for c in cases:
                    if c.case_id in self._results:
                        self._results[c.case_id].fn = None
