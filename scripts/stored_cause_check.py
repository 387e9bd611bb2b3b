"""A stored alert's cause from real runs, against the compare's, in one GPU call (issue 41): does the
history name the code change that a pull request's compare names?

On a scratch git copy of this checkout (branch main, commit c0), within --budget-s:

1. `attnwatch run --ingest` of the plant's variants over the pr shapes at c0, --runs-per-side
   times into a fresh history, the last with `--ncu` (its bundle's sass.json records the
   binaries the profile read);
2. the plant (scripts/pr_plants/<--plant>.patch at --magnitude) committed as c1, and as many
   runs there, the first with `--ncu`;
3. `attnwatch detect`, then each speed alert's stored cause (history.detection.ncu_cause: the
   step's run against the run before it, their stored binaries diffed);
4. `attnwatch compare --base c0 --head c1 --ncu changed` over the same cases: each case's cause.

An alerted case agrees when its stored cause leads with the compare's code part (the cause's first
clause, e.g. "+4 BAR in a loop"). Three runs a side is what detection needs for a step
(history/analysis/thresholds.toml: min_persist 3, min_series 6); the default magnitude is the
plant's largest, so the step clears the H200's 2% min_effect.

Writes stored_cause_check.json and stored_cause_check.log under --out; prints a table last: case,
alert, stored cause's code part, compare's, agree.

    PYTHONPATH=. python3 scripts/stored_cause_check.py --budget-s 540 --commit <sha> --out $OUT   # a GPU
    PYTHONPATH=. python3 scripts/stored_cause_check.py --device cpu --out smoke     # CPU: the pipeline
        (sdpa over the cpu shapes, one run a side, no profile, no compare: nothing to explain)
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch_checkout import commit, copy_checkout, init_repo, resolve_device  # noqa: E402
from explain_check import Check, run_compare  # noqa: E402
from plant_ladder import apply_plant, load_plants  # noqa: E402

from attnwatch.scripts.script_env import checkout_env  # noqa: E402

RUN_MIN_S = 30.0  # a run is not started with less left than this
COMPARE_MIN_S = 90.0
SPEED = ("regression", "improvement")
# What `attnwatch run --ingest` and `attnwatch detect` import beyond the GPU machine's own packages:
# checked before the first run, so a missing wheel costs a second, not the call's GPU time.
NEEDED = ("attnwatch.history.store.db", "attnwatch.history.analysis.changepoints")


def missing_module(modules: tuple[str, ...] = NEEDED) -> str | None:
    """The first import of `modules` that fails, as "<module>: <error>"; None when all import."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            return f"{name}: {exc}"
    return None


def code_part(cause: str | None) -> str | None:
    """A cause's first clause: where a code change was found, what changed in the code."""
    if not cause:
        return None
    return cause.split(";", 1)[0].strip() or None


def agrees(stored: str | None, compared: str | None) -> bool:
    """Whether a stored cause leads with the compare's code part (both name one)."""
    return code_part(compared) is not None and code_part(stored) == code_part(compared)


def run_once(check: Check, repo: Path, args, history: Path, out: Path, ncu: bool) -> dict:
    """One `attnwatch run --ingest` in the scratch checkout, into `history`."""
    if check.left() < RUN_MIN_S:
        return {"skipped": f"{check.left():.0f} s left"}
    cmd = [sys.executable, "-m", "attnwatch", "run", "--variants", args.variants, "--shapes", args.shapes]
    cmd += ["--dtypes", args.dtypes, "--no-correctness", "--no-progress", "--out", str(out), "--ingest"]
    cmd += ["--device", args.device_used, *(["--ncu"] if ncu else [])]
    env = checkout_env(ATTNWATCH_DB=str(history))
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=check.left() - 5)
        rc, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired:
        rc, stderr = 124, "timed out"
    wall = round(time.monotonic() - started, 1)
    check.log_file.write(f"===== run {out.name}: rc {rc}, {wall} s\n{stderr[-4000:]}\n")
    check.log(f"run {out.name}{' --ncu' if ncu else ''}: rc {rc}, {wall} s")
    return {"run": out.name, "rc": rc, "wall_s": wall, "ncu": ncu, "sass_json": (out / "sass.json").is_file()}


def stored_causes(history: Path) -> list[dict]:
    """Each open speed alert of the history with its stored cause (`attnwatch alerts list`'s)."""
    from attnwatch.history.detection.alerts import list_alerts
    from attnwatch.history.detection.ncu_cause import alert_causes
    from attnwatch.history.store.location import parse_location

    location = parse_location(history)
    alerts = [a for a in list_alerts(location) if a.kind in SPEED]
    causes = alert_causes(location, alerts) if alerts else {}
    return [
        {
            "alert": a.alert_id,
            "case": a.case_id,
            "kind": a.kind,
            "metric": a.metric,
            "cause": getattr(causes.get(a.alert_id), "cause", None),
        }
        for a in alerts
    ]


def judged(stored: list[dict], report: dict | None) -> list[dict]:
    """Per alerted case on the latency: its stored cause, the compare's, and whether they agree."""
    compared = {c["case_id"]: (c.get("explanation") or {}).get("cause") for c in (report or {}).get("cases", [])}
    rows = []
    for a in (s for s in stored if s["metric"] == "median_us"):
        rows.append(
            {**a, "compare_cause": compared.get(a["case"]), "agree": agrees(a["cause"], compared.get(a["case"]))}
        )
    return rows


def table(rows: list[dict]) -> None:
    print(f"{'case':44} {'alert':>5}  {'stored code part':32} {'compare code part':32} agree")
    for r in rows:
        print(
            f"{r['case']:44} {r['alert']:>5}  {str(code_part(r['cause'])):32.32} "
            f"{str(code_part(r['compare_cause'])):32.32} {'yes' if r['agree'] else 'NO'}"
        )
    if not rows:
        print("(no latency alert: nothing to compare)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "stored-cause-check-out")
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--commit", default=None, help="the commit measured, recorded as such")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--plant", default="barrier", help="a scripts/pr_plants patch (default: barrier)")
    p.add_argument("--magnitude", default=None, help="its magnitude (default: the patch's largest)")
    p.add_argument("--runs-per-side", type=int, default=None, help="default: 3 on a GPU, 1 on the CPU")
    p.add_argument("--compare-timeout-s", type=float, default=240.0)
    args = p.parse_args(argv)
    missing = missing_module()
    if missing is not None:
        sys.exit(
            f"stored_cause_check: cannot import {missing} (install its wheel first; the GPU machine has no network)"
        )
    args.device_used = resolve_device(args.device)
    on_gpu = args.device_used == "cuda"
    named = {pl.name: pl for pl in load_plants()}
    if args.plant not in named:
        sys.exit(f"stored_cause_check: no plant named {args.plant!r} (scripts/pr_plants: {', '.join(sorted(named))})")
    plant = named[args.plant]
    magnitude = args.magnitude or plant.magnitudes[-1]
    args.variants = ",".join(plant.variants) if on_gpu else "sdpa"
    args.shapes, args.dtypes = ("pr", ",".join(plant.dtypes) or "fp16") if on_gpu else ("cpu", "fp16")
    runs = args.runs_per_side or (3 if on_gpu else 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.budget_s, "stored_cause_check.log")
    result = check.result
    result.update(device=args.device_used, plant=f"{plant.name}@{magnitude}", commit=args.commit, runs_per_side=runs)
    with tempfile.TemporaryDirectory(prefix="attnwatch-stored-cause-") as tmp:
        repo, history = Path(tmp) / "repo", Path(tmp) / "history.duckdb"
        repo.mkdir()
        copy_checkout(repo)
        c0 = init_repo(repo, "c0: this tree", branch="main")
        result["before"] = [
            run_once(check, repo, args, history, Path(tmp) / f"before{k}", ncu=on_gpu and k == runs - 1)
            for k in range(runs)
        ]
        apply_plant(plant, magnitude, repo)
        c1 = commit(repo, f"plant {plant.name}@{magnitude}")
        result["after"] = [
            run_once(check, repo, args, history, Path(tmp) / f"after{k}", ncu=on_gpu and k == 0) for k in range(runs)
        ]
        env = checkout_env(ATTNWATCH_DB=str(history))
        detected = subprocess.run(
            [sys.executable, "-m", "attnwatch", "detect"], cwd=repo, env=env, capture_output=True, text=True
        )
        check.log_file.write(
            f"===== detect: rc {detected.returncode}\n{detected.stdout[-4000:]}{detected.stderr[-4000:]}\n"
        )
        check.log(f"detect: rc {detected.returncode}; " + " | ".join(detected.stdout.strip().splitlines()[-6:]))
        result["detect"] = {"rc": detected.returncode, "stderr": detected.stderr[-2000:]}
        stored = stored_causes(history) if history.is_file() else []
        report = None
        if on_gpu and stored and check.left() >= COMPARE_MIN_S:
            compared = run_compare(
                repo, c0, c1, plant, Path(tmp) / "compare", min(check.left() - 10, args.compare_timeout_s), check
            )
            report = compared.pop("report", None)
            compared.pop("csv", None)
            result["compare"] = compared
        elif on_gpu:
            result["compare"] = {"skipped": "no speed alert" if not stored else f"{check.left():.0f} s left"}
        else:
            result["compare"] = {"skipped": "CPU: nothing profiled, nothing to explain"}
    result["alerts"] = stored
    result["rows"] = judged(stored, report)
    result["agree"] = f"{sum(r['agree'] for r in result['rows'])} of {len(result['rows'])}"
    result["seconds"] = round(time.monotonic() - check.started, 1)
    (out / "stored_cause_check.json").write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    check.log_file.close()
    table(result["rows"])
    failed = [r for r in (*result["before"], *result["after"]) if r.get("rc") not in (0, None)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
