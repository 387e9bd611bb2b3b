"""Replay recorded compares (`detection_power.py --compares DIR ...`, the `--out` folders of real
`attnwatch compare` runs, each with `bundles/<side>-round<k>`): every case's recorded rounds as
they were measured, the head's samples multiplied by each slowdown, judged at the first look (min
rounds, at the sequential design's per-look level) by the verdict rule on the `--method` interval
and, for contrast, by the earlier rule (the whole two-level bootstrap interval beyond
1 + min_effect). Nothing is resampled or modelled: the two warm workers' real offsets are in every
case. `--round-fractions 1,0.6,0.4` replays each compare again with every round cut to its first
60% and 40% of samples (stored in the order they were timed): the power and false alarms a
shorter per-round cap would have given, on the same rounds, and the calls it would have kept.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from attnwatch.ci.compare.sequential import SequentialDesign, decide  # noqa: E402
from attnwatch.ci.run_config import compare_setting  # noqa: E402
from attnwatch.history.analysis.ab import ratio_interval  # noqa: E402
from attnwatch.history.analysis.thresholds import load_thresholds  # noqa: E402
from power_tables import SLOWDOWNS, finish, pct  # noqa: E402


def load_compare_rounds(folder: Path) -> dict[str, tuple[list[np.ndarray], list[np.ndarray]]]:
    """case -> (base rounds, head rounds) of one compare's `--out` folder, read by the round reader."""
    from attnwatch.ci.compare.rounds import read_round

    sides: dict[str, dict[str, list[np.ndarray]]] = {"base": {}, "head": {}}
    for side, by_case in sides.items():
        paths = sorted((folder / "bundles").glob(f"{side}-round*"), key=lambda q: int(q.name.rsplit("round", 1)[1]))
        for path in paths:
            for case_id, case in read_round(path).cases.items():
                if case.samples_us:
                    by_case.setdefault(case_id, []).append(np.asarray(case.samples_us, dtype=np.float64))
    return {c: (sides["base"][c], sides["head"][c]) for c in sorted(set(sides["base"]) & set(sides["head"]))}


def shortened(rounds: list[np.ndarray], fraction: float) -> list[np.ndarray]:
    """Each round cut to its first `fraction` of samples (at least 10): what a round capped that much
    shorter would have kept, since a round's samples are stored in the order they were timed."""
    return [r[: max(10, math.ceil(fraction * len(r)))] for r in rounds]


def replay_compares(
    recorded: dict[str, dict[str, tuple[list[np.ndarray], list[np.ndarray]]]],
    seq: SequentialDesign,
    min_effect: float,
    resamples: int,
    seed: int,
    method: str,
    fraction: float = 1.0,
) -> dict:
    """The first look's verdicts on recorded compares (folder -> `load_compare_rounds`), head x
    (1 + slowdown); the module doc.
    The earlier rule is judged on the two-level bootstrap interval, as compare used it. With
    `fraction` < 1 every round is first cut to its first `fraction` of samples (`shortened`)."""

    def earlier(iv) -> str:
        if iv.low > 1 + min_effect:
            return "regression"
        return "improvement" if iv.high < 1 / (1 + min_effect) else "no change"

    print(
        f"Replay of {len(recorded)} recorded compares: first look ({seq.min_rounds} rounds per side, "
        f"{seq.per_look_confidence:.2%} {method} interval"
        + (f", each round cut to its first {fraction:.0%} of samples" if fraction < 1 else "")
        + "). Cells: regression verdicts (at 0%: any verdict) / decided "
        "'no change' / undecided, by the verdict rule; then regression verdicts by the earlier rule."
    )
    data = {
        name: {c: (shortened(b, fraction), shortened(h, fraction)) for c, (b, h) in cases.items()}
        for name, cases in recorded.items()
    }
    calls = sum(len(r) for cases in data.values() for b, h in cases.values() for r in (*b, *h))
    for name, cases in data.items():
        logs = [np.mean([np.log(np.median(h) / np.median(b)) for b, h in zip(*rounds)]) for rounds in cases.values()]
        print(
            f"  {name}: {len(cases)} cases, mean head/base offset {100 * np.mean(logs):+.2f}% "
            f"(cases from {100 * min(logs):+.2f}% to {100 * max(logs):+.2f}%)"
        )
    print(
        "| slowdown | regression (any at 0%) | no change decided | undecided | earlier rule, two-level: regression |\n|---:|---|---|---|---|"
    )
    table = {}
    for s in SLOWDOWNS:
        counts = {
            "regression": 0,
            "any_verdict": 0,
            "no_change": 0,
            "undecided": 0,
            "earlier_regression": 0,
            "earlier_any": 0,
            "total": 0,
        }
        for cases in data.values():
            for base, head in cases.values():
                if min(len(base), len(head)) < seq.min_rounds:
                    continue
                n = seq.min_rounds
                slowed = [h * (1 + s) for h in head[:n]]
                iv = ratio_interval(
                    base[:n], slowed, method=method, confidence=seq.per_look_confidence, resamples=resamples, seed=seed
                )
                decided = decide(iv, min_effect)
                if method != "hierarchical":
                    iv = ratio_interval(
                        base[:n],
                        slowed,
                        method="hierarchical",
                        confidence=seq.per_look_confidence,
                        resamples=resamples,
                        seed=seed,
                    )
                counts["regression"] += decided == "regression"
                counts["any_verdict"] += decided in ("regression", "improvement")
                counts["no_change"] += decided == "no change"
                counts["undecided"] += decided is None
                counts["earlier_regression"] += earlier(iv) == "regression"
                counts["earlier_any"] += earlier(iv) != "no change"
                counts["total"] += 1
        table[f"{s:.2f}"] = counts
        key = "any_verdict" if s == 0 else "regression"
        label = "0% (false alarms)" if s == 0 else f"{s:.0%}"
        print(
            f"| {label} | {pct(counts[key], counts['total'])} | {pct(counts['no_change'], counts['total'])} | "
            f"{pct(counts['undecided'], counts['total'])} | "
            f"{pct(counts['earlier_any' if s == 0 else 'earlier_regression'], counts['total'])} |"
        )
    print()
    return {
        "folders": list(data),
        "method": method,
        "fraction": fraction,
        "calls": calls,  # timed calls kept over every recorded round of both sides
        "min_rounds": seq.min_rounds,
        "per_look_confidence": seq.per_look_confidence,
        "rows": table,
    }


def replay_main(args) -> int:
    """detection_power's `--compares` mode: one replay per `--round-fractions` entry; 2 on a bad list."""
    th = load_thresholds(args.gpu)
    rounds = args.sequential or (int(compare_setting("min_rounds")), int(compare_setting("max_rounds")))
    seq = SequentialDesign(rounds[0], rounds[1], th.confidence)  # compare's design unless --sequential
    started = time.time()
    try:
        fractions = [float(f) for f in args.round_fractions.split(",") if f]
    except ValueError:
        fractions = []
    if not fractions or not all(0 < f <= 1 for f in fractions):
        print(f"--round-fractions: expected numbers in (0, 1], got {args.round_fractions!r}", file=sys.stderr)
        return 2
    recorded = {str(f): load_compare_rounds(f) for f in args.compares}  # read once, cut per fraction
    replays = [
        replay_compares(recorded, seq, th.min_effect, args.resamples, args.seed, args.method, fraction=f)
        for f in fractions
    ]
    out = {"gpu": args.gpu, "min_effect": th.min_effect, "replay": replays[0]}
    if len(replays) > 1:
        out["replay_by_fraction"] = {f"{r['fraction']:g}": r for r in replays}
    return finish(out, started, args.json)
