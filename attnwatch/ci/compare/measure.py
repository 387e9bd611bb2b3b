"""Measure base and head in alternating rounds on one GPU, in one job, with two warm workers.

One worker per side lives for the whole compare (ci/compare/side.py, ci/workers): each imports
its revision's `kernels`, builds and checks them once, then times "these cases, now" when
asked. The two start at once, and nothing is measured until both are ready (one side's build
is no neighbour for the other's timed round). Rounds alternate A B | B A | A B ... (an ABBA
design): slow drift (clocks, temperature) hits both sides alike, and neither side always runs
first after the other has warmed the GPU.

Each round draws fresh inputs, a fresh L2-flush buffer at a new allocation placement and a new
pool of timing streams in each worker (ci/engine/rounds.py), and re-tunes autotuned launch
choices, so what those change is in the rounds' spread and the interval sees it. What a warm
worker kept for the whole compare before the stream pool, and so was not in the between-round
spread, was the launch-cost offset of its one stream (on the H200 -0.70% to +0.60% per compare,
shared by most cases; with the pool renewed every round -0.26% to +0.14%, docs/benchmarks/compare.md
"Where the process offset came from"); the min_effect threshold on the median ratio keeps what
is left from being a verdict (history.analysis.ab). Triton's tuned block configuration was
such a per-process choice until every round re-tuned it. The A/A
compares of scripts/gpu_compare.py measure what is left (docs/benchmarks.md).

After each round from the design's first look, every undecided case is judged
(ci/compare/sequential.py); decided cases are not measured again, the others continue up to
the cap. The bootstraps of one look run in a thread pool (numpy releases the GIL for most of
the work) while the workers wait.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from attnwatch.ci.bundle_assembly import utc_now
from attnwatch.ci.compare.rounds import CaseRound, RoundData
from attnwatch.ci.compare.sequential import SequentialDesign, decide
from attnwatch.ci.compare.side_group import SideGroup
from attnwatch.ci.plan import PlannedCase
from attnwatch.history.analysis.ab import ratio_interval


@dataclass
class Measured:
    base: list[RoundData]
    head: list[RoundData]
    decided: dict[str, str] = field(default_factory=dict)  # case id -> decided verdict, at its stopping look
    rounds_used: dict[str, int] = field(default_factory=dict)  # case id -> rounds measured per side
    schedule: list[tuple[str, int, int]] = field(default_factory=list)  # (side, round, cases asked), in order
    wall_s: float = 0.0
    looks_s: float = 0.0  # parent time spent judging undecided cases


def round_order(round_index: int) -> tuple[str, str]:
    """Which side runs first in a round: base first in even rounds, head first in odd ones."""
    return ("base", "head") if round_index % 2 == 0 else ("head", "base")


def _comparable(rounds: list[CaseRound]) -> bool:
    return bool(rounds) and all(r.status == "ok" and r.samples_us for r in rounds)


def measure_rounds(
    cases: list[PlannedCase],
    sides: dict[str, SideGroup],
    design: SequentialDesign,
    *,
    min_effect: float,
    sampling: dict,
    method: str,
    resamples: int,
    seed: int = 0,
    log: Callable[[str], None] = print,
    choose: Callable[[list[PlannedCase]], list[PlannedCase]] | None = None,
) -> Measured:
    """Alternating rounds until every case is decided, lost on a side, or at the cap.

    `choose`: once both sides are built, the cases to measure (ci/compare/select.py: those whose
    variant's fingerprint differs); None measures every case."""
    started = time.monotonic()
    measured = Measured([], [])
    for side in sides.values():
        side.start()  # both start (imports, builds) in parallel ...
    for side in sides.values():
        side.ready()  # ... and nothing is measured until both are done: a build is no neighbour for a timed round
    active = choose(list(cases)) if choose is not None else list(cases)
    history: dict[str, dict[str, list[CaseRound]]] = {c.case_id: {"base": [], "head": []} for c in active}
    threads = max(1, min(8, (os.cpu_count() or 2)))
    with ThreadPoolExecutor(threads) as pool:
        for r in range(design.max_rounds):
            if not active:
                break
            per_side: dict[str, dict[str, CaseRound]] = {}
            when: dict[str, tuple[str, str]] = {}
            for name in round_order(r):
                log(f"compare: round {r + 1}/{design.max_rounds}: measuring {name} ({len(active)} cases)")
                began = utc_now()
                per_side[name] = sides[name].measure(active, r, sampling)
                when[name] = (began, utc_now())
                measured.schedule.append((name, r + 1, len(active)))
            for name, rounds in (("base", measured.base), ("head", measured.head)):
                side = sides[name]
                rounds.append(
                    RoundData(
                        f"{name}-round{r + 1}",
                        side.environment.get("gpu_name"),
                        side.commit_sha,
                        per_side[name],
                        side.environment,
                        *when[name],
                    )
                )
                for cid, record in per_side[name].items():
                    history[cid][name].append(record)
            t0 = time.monotonic()
            active = _judge(active, history, r + 1, design, measured, min_effect, method, resamples, seed, pool)
            measured.looks_s += time.monotonic() - t0
    for cid, sides_rounds in history.items():
        measured.rounds_used[cid] = min(len(sides_rounds["base"]), len(sides_rounds["head"]))
    measured.wall_s = time.monotonic() - started
    return measured


def _judge(
    active: list[PlannedCase],
    history,
    rounds_done: int,
    design: SequentialDesign,
    measured: Measured,
    min_effect: float,
    method: str,
    resamples: int,
    seed: int,
    pool: ThreadPoolExecutor,
) -> list[PlannedCase]:
    """The cases still to measure after `rounds_done` rounds (decided and lost ones leave)."""
    still, jobs = [], {}
    for case in active:
        base, head = history[case.case_id]["base"], history[case.case_id]["head"]
        if not (_comparable(base) and _comparable(head)):
            continue  # lost, skipped or unsupported on a side: nothing to decide, nothing to gain
        if not design.is_look(rounds_done):
            still.append(case)
            continue
        jobs[case.case_id] = pool.submit(
            ratio_interval,
            [r.samples_us for r in base],
            [r.samples_us for r in head],
            method=method,
            confidence=design.per_look_confidence,
            resamples=resamples,
            seed=seed,
        )
    for case in active:
        job = jobs.get(case.case_id)
        if job is None:
            continue
        verdict = decide(job.result(), min_effect)
        if verdict is None:
            still.append(case)
        else:
            measured.decided[case.case_id] = verdict
    return still
