"""A trial of the fault battery (scripts/fault_check.py, and the fast part of it in
tests/test_history_faults.py and tests/test_history_recover.py): the three bundles every trial
ingests, a new history in a directory of its own for each trial, and the verdict on what the file
holds afterwards: that it opens, holds every run an ingest reported and whole, no run never
ingested, that a failing command failed in one line, and that it takes writes again. The kinds of
fault live in fault_check.py; each adds its trials' verdicts to a `Tally`, whose table is printed
at the end."""

from __future__ import annotations

import random
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests"))  # the shared test bundle factory and fault helpers

from bundle_factory import case_id, make_bundle  # noqa: E402
from fault_env import inspect, one_line_error  # noqa: E402

RUNS = ("run-a", "run-b", "run-c")
RESULTS_PER_RUN = 4  # make_bundle with one variant: 2 shapes x 2 causal modes
INCORRECT = case_id("sdpa", "l4_mission", "fp16", False)  # run-c's failed correctness check: detect's alert


def trial(db: Path) -> str:
    """The trial's directory name (t0042), for a history in it or in its `disk` subdirectory."""
    return next(p.name for p in (db.parent, db.parent.parent) if p.name.startswith("t"))


@dataclass
class Tally:
    kind: str
    trials: int = 0
    held: int = 0
    failures: list[str] = field(default_factory=list)

    def add(self, failure: str | None) -> None:
        self.trials += 1
        if failure is None:
            self.held += 1
        else:
            self.failures.append(failure)


class Trials:
    """The bundles (run-a, run-b, run-c; run-c's correctness check failed) and, per trial, a fresh
    history and the verdict on it. fault_check.Battery's kinds of fault build on it."""

    def __init__(self, workdir: Path, rng: random.Random) -> None:
        self.workdir, self.rng = workdir, rng
        self.bundles = [
            make_bundle(
                workdir / "bundles" / run_id,
                run_id=run_id,
                seed=i,
                variants=("sdpa",),
                n_samples=5,
                incorrect=(INCORRECT,) if run_id == "run-c" else (),
            )
            for i, run_id in enumerate(RUNS)
        ]
        self.counter = 0

    def fresh(self, seed_runs: int = 0, schema: int | None = None, disk: str = "") -> Path:
        """A new trial directory with a history holding the first `seed_runs` runs (or none yet),
        in its subdirectory `disk` if given."""
        self.counter += 1
        directory = self.workdir / f"t{self.counter:04d}"
        (directory / disk).mkdir(parents=True)
        db = directory / disk / "history.duckdb"
        if schema is not None:
            from old_history import history_at_version

            history_at_version(db, schema, directory / "scratch")
        if seed_runs:
            from attnwatch.history.ingest.write import ingest_paths
            from attnwatch.history.store.location import HistoryLocation

            ingest_paths(HistoryLocation(path=db), self.bundles[:seed_runs])
        return db

    def held(self, db: Path, reported: set[str], attempted: int, result=None, must_fail: bool = False) -> str | None:
        """None when the history survived the trial as it must; else what went wrong."""
        if result is not None and result.returncode != 0 and result.returncode != -signal.SIGKILL:
            wrong = one_line_error(result)
            if wrong:
                return f"{trial(db)}: the failing command: {wrong}"
        if must_fail and result is not None and result.returncode == 0:
            return f"{trial(db)}: the command succeeded under a fault that must stop it"
        state = inspect(db)
        if not state.opens:
            return f"{trial(db)}: does not open: {state.error}"
        wanted = set(RUNS[:attempted])
        if missing := reported - set(state.runs):
            return f"{trial(db)}: reported inserted but missing: {sorted(missing)}"
        if extra := set(state.runs) - wanted:
            return f"{trial(db)}: runs never ingested: {sorted(extra)}"
        if partial := [r for r, n in state.runs.items() if n != RESULTS_PER_RUN]:
            return f"{trial(db)}: half-written runs: {partial}"
        return self.writable(db, attempted)

    def writable(self, db: Path, attempted: int) -> str | None:
        from attnwatch.history.ingest.write import ingest_paths
        from attnwatch.history.store.location import HistoryLocation

        try:
            ingest_paths(HistoryLocation(path=db), self.bundles[:attempted], deadline_s=30)
        except Exception as exc:  # what matters is that it failed; the message says why
            return f"{trial(db)}: does not take writes afterwards: {type(exc).__name__}: {exc}"
        state = inspect(db)
        if sorted(state.runs) != sorted(RUNS[:attempted]) or set(state.runs.values()) - {RESULTS_PER_RUN}:
            return f"{trial(db)}: after a clean ingest holds {state.runs}"
        return None

    def statements(self, count: int, sample: int | None) -> list[int]:
        """Kill points 1..count, or `sample` of them; the last (before the final COMMIT, when
        everything before it would rest in an old-style log) always among them."""
        if sample is None or sample >= count:
            return list(range(1, count + 1))
        return sorted(self.rng.sample(range(1, count), sample - 1)) + [count]


def table(tallies: list[Tally]) -> str:
    rows = [("trial kind", "trials", "held", "failed")] + [
        (t.kind, str(t.trials), str(t.held), str(len(t.failures))) for t in tallies
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)
