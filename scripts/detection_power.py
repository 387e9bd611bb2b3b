"""Detection quality on real recorded noise: power and false-alarm rate of both detectors.

    python scripts/detection_power.py [--samples FILE ...] [--trials 200] [--json OUT]

Input: per-call CUDA-event latencies per case from two or more separate processes
(tests/data/timing/h200_event_samples.json layout: {"processes": {name: {case: {"us": [...]}}}}).
Slowdowns of 0, 1, 2, 3, 5 and 10% are injected and the verdicts counted.

A/B (pull requests): each trial draws `rounds` rounds per side. Base rounds resample one real
process's samples and head rounds another's (so the real process-to-process offset is in every
trial); head samples are multiplied by the slowdown. Verdict with history.analysis.ab (both
interval methods) and the GPU's min_effect from history/analysis/thresholds.toml.

Main (change points): each trial builds a series of per-run medians, `runs` long with the step
`after` runs from the end. A run's median = the median of `n` samples resampled from a random
real process, times exp(N(0, sigma_between)), where sigma_between is the run-to-run spread of
medians estimated from the data (pooled over cases: sigma^2 = mean over cases of
(ln m_p - ln m_q)^2 / 2 for two processes). A detection is a regression step within two runs of
the planted one (history.analysis.changepoints.significant_steps); a false alarm is any step in a series
without one. Attribution (history.analysis.attribution, as `attnwatch detect` applies it): every
series carries a code change at the planted run (the variant's fingerprint changes there, also at
0%: a commit that changed the code but not the speed) and nothing else; each step found is
attributed by comparing the run before it with the run at it, and the table counts the
detections attributed "code" (what `attnwatch bisect` accepts; a step placed a run away from the
change reads "none (noise suspect)") and the false alarms attributed "code".

Sequential (`--sequential MIN MAX`, what compare does): rounds are drawn as in the A/B designs,
up to MAX per side; after every round from MIN on, an undecided case gets the `--method` interval
(default compare's paired t over rounds) at the Bonferroni-split level (ci.compare.sequential) and stops once it is decided; the table
gives the share of regression verdicts (any verdict at 0%) and the mean rounds per case.

Replay (`--compares DIR ...`, real `attnwatch compare` folders; `--round-fractions` cuts every
round shorter): scripts/compare_replay.py.

What two processes per case can tell: one difference per case, nine in all; sigma_between is
then known only to within a factor of about 1.8 (chi-square, 9 degrees of freedom, 95%). The
main-mode table is therefore also run at the upper 95% bound of sigma_between.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from attnwatch.ci.compare.sequential import SequentialDesign, decide, final_verdict  # noqa: E402
from attnwatch.ci.run_config import compare_setting  # noqa: E402
from attnwatch.history.analysis.attribution import attribute  # noqa: E402
from attnwatch.history.analysis.changepoints import significant_steps  # noqa: E402
from attnwatch.history.analysis.ab import METHODS, ratio_interval, verdict  # noqa: E402
from attnwatch.history.analysis.thresholds import load_thresholds  # noqa: E402
from attnwatch.history.contract.validate import load_bundle  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare_replay import replay_main  # noqa: E402
from power_tables import SLOWDOWNS, finish, pct  # noqa: E402


def chi2_lower(df: int) -> float:
    """Lower 2.5% point of chi-square(df) by the Wilson-Hilferty approximation (Wilson &
    Hilferty 1931): 2.67 at df = 9 against the tabulated 2.70, closer for larger df."""
    z = -1.959964
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def load_processes(paths: list[Path]) -> dict[str, list[np.ndarray]]:
    """case -> one array of samples per process (cases seen in at least two processes).

    A path is either a samples file in the fixture's layout or a run bundle directory (its
    samples.json is one "process" here): an `attnwatch run` bundle, or a round bundle of an
    `attnwatch compare` (`--out DIR/bundles/<side>-round<k>`, read by the bundle reader).
    A compare measures each side with one warm worker, so its rounds are not separate
    processes: each draws fresh inputs at a new allocation placement in the same process
    (ci/compare/measure.py). An A/A compare's round bundles therefore give the between-round
    spread compare's bootstrap sees, which lacks what a process fixes once (e.g. its Triton
    block configuration); separate `attnwatch run` bundles give the between-process spread.
    """
    cases: dict[str, list[np.ndarray]] = {}
    for path in paths:
        if path.is_dir():
            samples = load_bundle(path, known_commit=False).samples  # the bundle reader: format checked
            processes = [{case: {"us": us} for case, us in samples.items()}]
        else:
            processes = list(json.loads(path.read_text())["processes"].values())
        for proc in processes:
            for case, value in proc.items():
                if len(value["us"]) >= 2:
                    cases.setdefault(case, []).append(np.asarray(value["us"], dtype=np.float64))
    return {c: p for c, p in cases.items() if len(p) >= 2}


def between_process_sigma(cases: dict[str, list[np.ndarray]]) -> tuple[float, int]:
    """Pooled sd of ln(per-process median) and its degrees of freedom."""
    ss, df = 0.0, 0
    for procs in cases.values():
        logs = np.log([np.median(p) for p in procs])
        ss += float(np.sum((logs - logs.mean()) ** 2))
        df += len(logs) - 1
    return math.sqrt(ss / df), df


def ab_trials(
    cases, *, design, method, slowdown, trials, rounds, n, min_effect, confidence, resamples, rng, sigma_between=0.0
) -> tuple[int, int, int]:
    """(regression verdicts, any non-'no change' verdicts, intervals covering the true ratio).

    design "recorded": all base rounds from one real process, all head rounds from another (the
    real offset, fixed for the trial). design "per-round": every round is a new process: samples
    from a random real process times exp(N(0, sigma_between)), as in compare's ABBA rounds.
    """
    regress = alarms = covered = 0
    for procs in cases.values():
        for _ in range(trials):
            if design == "recorded":
                b, h = rng.choice(len(procs), size=2, replace=False)
                base = [rng.choice(procs[b], size=n) for _ in range(rounds)]
                head = [rng.choice(procs[h], size=n) * (1 + slowdown) for _ in range(rounds)]
            else:

                def draw():
                    return rng.choice(procs[rng.integers(len(procs))], size=n) * math.exp(
                        rng.normal(0.0, sigma_between)
                    )

                base = [draw() for _ in range(rounds)]
                head = [draw() * (1 + slowdown) for _ in range(rounds)]
            iv = ratio_interval(
                base, head, method=method, confidence=confidence, resamples=resamples, seed=int(rng.integers(1 << 31))
            )
            v = verdict(iv, min_effect)
            regress += v == "regression"
            alarms += v != "no change"
            covered += iv.low <= 1 + slowdown <= iv.high
    return regress, alarms, covered


def _draw_rounds(procs, *, design, slowdown, rounds, n, rng, sigma_between):
    """`rounds` rounds per side, as in ab_trials (one trial)."""
    if design == "recorded":
        b, h = rng.choice(len(procs), size=2, replace=False)
        return (
            [rng.choice(procs[b], size=n) for _ in range(rounds)],
            [rng.choice(procs[h], size=n) * (1 + slowdown) for _ in range(rounds)],
        )
    draw = lambda: rng.choice(procs[rng.integers(len(procs))], size=n) * math.exp(rng.normal(0.0, sigma_between))  # noqa: E731
    return [draw() for _ in range(rounds)], [draw() * (1 + slowdown) for _ in range(rounds)]


def sequential_trials(
    cases,
    *,
    design,
    seq: SequentialDesign,
    slowdown,
    trials,
    n,
    min_effect,
    resamples,
    rng,
    method: str,
    sigma_between=0.0,
) -> dict:
    """compare's sequential rule on drawn rounds: verdict counts, rounds used, undecided at the cap."""
    out = {"regression": 0, "any_verdict": 0, "covered": 0, "rounds": 0, "undecided": 0, "total": 0}
    for procs in cases.values():
        for _ in range(trials):
            base, head = _draw_rounds(
                procs,
                design=design,
                slowdown=slowdown,
                rounds=seq.max_rounds,
                n=n,
                rng=rng,
                sigma_between=sigma_between,
            )
            seed = int(rng.integers(1 << 31))
            for rounds in seq.looks:
                iv = ratio_interval(
                    base[:rounds],
                    head[:rounds],
                    method=method,
                    confidence=seq.per_look_confidence,
                    resamples=resamples,
                    seed=seed,
                )
                decided = decide(iv, min_effect)
                if decided is not None or rounds == seq.max_rounds:
                    break
            v = decided or final_verdict(iv, min_effect)
            out["undecided"] += decided is None
            out["regression"] += v == "regression"
            out["any_verdict"] += v != "no change"
            out["covered"] += iv.low <= 1 + slowdown <= iv.high
            out["rounds"] += rounds
            out["total"] += 1
    return out


def main_trials(cases, *, slowdown, trials, runs, after, n, sigma_between, th, rng) -> tuple[int, int, int, int]:
    """(step detected at the planted run, any step, of those detections the ones attributed
    "code", of the series with any step those whose first step is attributed "code") over trials x cases."""
    found = alarms = found_code = alarms_code = 0
    step_at = runs - after
    points = [{"code_digest": "before" if r < step_at else "after"} for r in range(runs)]
    for procs in cases.values():
        for _ in range(trials):
            medians = np.empty(runs)
            for r in range(runs):
                proc = procs[rng.integers(len(procs))]
                medians[r] = np.median(rng.choice(proc, size=n)) * math.exp(rng.normal(0.0, sigma_between))
            medians[step_at:] *= 1 + slowdown
            steps = significant_steps(
                medians,
                min_effect=th.min_effect,
                min_persist=th.min_persist,
                penalty_scale=th.penalty_scale,
                sigma_floor=th.sigma_floor,
            )
            alarms += bool(steps)
            detected = [s for s in steps if abs(s.index - step_at) <= 2 and s.ratio > 1]
            found += bool(detected)
            code = [attribute(points[s.index - 1], points[s.index]).has_code for s in steps if s.index > 0]
            found_code += (
                bool(detected) and attribute(points[detected[0].index - 1], points[detected[0].index]).has_code
            )
            alarms_code += bool(code) and code[0]
    return found, alarms, found_code, alarms_code


def main(argv=None) -> int:
    default_samples = Path(__file__).resolve().parent.parent / "tests" / "data" / "timing" / "h200_event_samples.json"
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--samples",
        nargs="+",
        type=Path,
        default=[default_samples],
        help="per-call sample files (fixture layout) or run bundle directories (one process each)",
    )
    p.add_argument("--gpu", default="NVIDIA H200", help="thresholds of this GPU (history/analysis/thresholds.toml)")
    p.add_argument("--trials", type=int, default=200, help="trials per case and slowdown")
    p.add_argument("--rounds", type=int, default=5, help="A/B rounds per side (compare's default)")
    p.add_argument("--n", type=int, default=100, help="samples per round / per run (the harness's minimum)")
    p.add_argument("--resamples", type=int, default=400, help="bootstrap resamples per interval")
    p.add_argument("--runs", type=int, default=30, help="main: runs per series")
    p.add_argument("--after", type=int, default=5, help="main: runs after the planted step")
    p.add_argument("--seed", type=int, default=20261121)
    p.add_argument("--json", type=Path, help="write every figure here as JSON")
    p.add_argument(
        "--sequential",
        nargs=2,
        type=int,
        metavar=("MIN", "MAX"),
        help="also measure compare's sequential rule with looks after rounds MIN..MAX",
    )
    p.add_argument(
        "--only-sequential", action="store_true", help="with --sequential: skip the fixed-size and main tables"
    )
    p.add_argument("--only-main", action="store_true", help="only the main (change point) table, with attribution")
    p.add_argument(
        "--method",
        choices=METHODS,
        default=compare_setting("method"),
        help="interval of the sequential and replay verdicts (default: compare's, ci/run_config.toml)",
    )
    p.add_argument(
        "--compares",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="replay recorded compares (their --out folders) at the first look, and stop there",
    )
    p.add_argument(
        "--round-fractions",
        default="1",
        help="with --compares: also replay with each round cut to its first F of samples, for each F of "
        "this comma-separated list (what a shorter per-round cap in ci/run_config.toml [compare.<kind>] would keep)",
    )
    args = p.parse_args(argv)
    if args.compares:
        return replay_main(args)
    th = load_thresholds(args.gpu)
    cases = load_processes(args.samples)
    if not cases:
        print("no case has samples from two processes", file=sys.stderr)
        return 2
    sigma, df = between_process_sigma(cases)
    sigma_upper = sigma * math.sqrt(df / chi2_lower(df))
    rng = np.random.default_rng(args.seed)
    started = time.time()
    out: dict = {
        "gpu": args.gpu,
        "min_effect": th.min_effect,
        "confidence": th.confidence,
        "cases": len(cases),
        "sigma_between": sigma,
        "sigma_between_df": df,
        "sigma_between_upper95": sigma_upper,
        "trials_per_case": args.trials,
        "ab": {},
        "main": {},
    }
    print(f"data: {', '.join(str(s.name) for s in args.samples)}; {len(cases)} cases with >= 2 processes")
    print(
        f"between-process sigma of ln(median): {100 * sigma:.2f}% ({df} df; upper 95% bound {100 * sigma_upper:.2f}%)"
    )
    print(
        f"thresholds ({args.gpu}): min_effect {th.min_effect:.1%}, confidence {th.confidence:.0%}, "
        f"min_persist {th.min_persist}\n"
    )

    if args.sequential:
        out["sequential"] = sequential_table(cases, args, th, rng, sigma)
    if args.only_sequential:
        return finish(out, started, args.json)
    if args.only_main:
        return main_table(cases, args, th, rng, sigma, sigma_upper, out, started)
    print(
        f"A/B: {args.rounds} rounds x {args.n} samples per side, {args.trials} trials per case "
        f"({args.trials * len(cases)} per cell). Power = share of regression verdicts; at 0% the share of any "
        f"verdict (false alarms). 'recorded': base and head from two different real processes; "
        f"'per-round': each round a new process with offset ~ N(0, {100 * sigma:.2f}%)."
    )
    designs = [(d, m) for d in ("recorded", "per-round") for m in ("hierarchical", "pooled")]
    print("| slowdown | " + " | ".join(f"{d}, {m}" for d, m in designs) + " |\n|---:|" + "---|" * len(designs))
    coverage_rows = []
    for s in SLOWDOWNS:
        row = {}
        for design, method in designs:
            reg, alarms, covered = ab_trials(
                cases,
                design=design,
                method=method,
                slowdown=s,
                trials=args.trials,
                rounds=args.rounds,
                n=args.n,
                min_effect=th.min_effect,
                confidence=th.confidence,
                resamples=args.resamples,
                rng=rng,
                sigma_between=sigma,
            )
            total = args.trials * len(cases)
            row[f"{design}/{method}"] = {"regression": reg, "any_verdict": alarms, "covered": covered, "total": total}
        out["ab"][f"{s:.2f}"] = row
        key = "any_verdict" if s == 0 else "regression"
        label = "0% (false alarms)" if s == 0 else f"{s:.0%}"
        print(
            f"| {label} | " + " | ".join(pct(row[f"{d}/{m}"][key], row[f"{d}/{m}"]["total"]) for d, m in designs) + " |"
        )
        coverage_rows.append(
            f"| {s:.0%} | "
            + " | ".join(f"{100 * row[f'{d}/{m}']['covered'] / row[f'{d}/{m}']['total']:.0f}%" for d, m in designs)
            + " |"
        )
    print(f"\nHow often the {th.confidence:.0%} interval contains the true ratio (nominal {th.confidence:.0%}):")
    print("| slowdown | " + " | ".join(f"{d}, {m}" for d, m in designs) + " |\n|---:|" + "---|" * len(designs))
    print("\n".join(coverage_rows))

    return main_table(cases, args, th, rng, sigma, sigma_upper, out, started)


def main_table(cases, args, th, rng, sigma, sigma_upper, out, started) -> int:
    """The change-point table (module doc, "Main"), with the share of steps attributed to code."""
    print(
        f"\nmain: series of {args.runs} runs, step {args.after} runs before the end, run median from {args.n} samples "
        f"x run-to-run noise; {args.trials} trials per case; a code change at the planted run (attribution)"
    )
    print(
        f"| slowdown | sigma_between {100 * sigma:.2f}% | attributed code | sigma_between {100 * sigma_upper:.2f}% "
        f"(upper bound) | attributed code |\n|---:|---|---|---|---|"
    )
    for s in SLOWDOWNS:
        row = {}
        for label, sb in (("estimate", sigma), ("upper95", sigma_upper)):
            found, alarms, found_code, alarms_code = main_trials(
                cases,
                slowdown=s,
                trials=args.trials,
                runs=args.runs,
                after=args.after,
                n=args.n,
                sigma_between=sb,
                th=th,
                rng=rng,
            )
            row[label] = {
                "detected": found,
                "any_step": alarms,
                "total": args.trials * len(cases),
                "detected_code": found_code,
                "any_step_code": alarms_code,
            }
        out["main"][f"{s:.2f}"] = row
        key = "any_step" if s == 0 else "detected"
        text = "0% (false alarms)" if s == 0 else f"{s:.0%}"
        cells = []
        for label in ("estimate", "upper95"):
            r = row[label]
            cells += [pct(r[key], r["total"]), f"{r[key + '_code']} of {r[key]}"]
        print(f"| {text} | " + " | ".join(cells) + " |")
    return finish(out, started, args.json)


def sequential_table(cases, args, th, rng, sigma) -> dict:
    """compare's sequential rule, both designs (two-level interval), as a markdown table."""
    seq = SequentialDesign(args.sequential[0], args.sequential[1], th.confidence)
    print(
        f"A/B, sequential ({args.method} interval): looks after rounds {seq.min_rounds}..{seq.max_rounds} ({len(seq.looks)} looks at "
        f"{seq.per_look_confidence:.2%}), {args.n} samples per round, {args.trials} trials per case "
        f"({args.trials * len(cases)} per cell). Cells: share of regression verdicts (at 0%: any verdict), "
        f"mean rounds per side, share undecided at the cap."
    )
    print(
        "| slowdown | recorded | rounds | undecided | per-round | rounds | undecided |\n|---:|---|---:|---:|---|---:|---:|"
    )
    table = {}
    for s in SLOWDOWNS:
        row = {
            d: sequential_trials(
                cases,
                design=d,
                seq=seq,
                slowdown=s,
                trials=args.trials,
                n=args.n,
                min_effect=th.min_effect,
                resamples=args.resamples,
                rng=rng,
                sigma_between=sigma,
                method=args.method,
            )
            for d in ("recorded", "per-round")
        }
        table[f"{s:.2f}"] = row
        key = "any_verdict" if s == 0 else "regression"
        label = "0% (false alarms)" if s == 0 else f"{s:.0%}"
        cells = [
            f"{pct(r[key], r['total'])} | {r['rounds'] / r['total']:.2f} | {100 * r['undecided'] / r['total']:.0f}%"
            for r in row.values()
        ]
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()
    return {
        "method": args.method,
        "min_rounds": seq.min_rounds,
        "max_rounds": seq.max_rounds,
        "per_look_confidence": seq.per_look_confidence,
        "rows": table,
    }


if __name__ == "__main__":
    sys.exit(main())
