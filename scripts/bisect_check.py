"""`attnwatch bisect` on a planted step: a scratch history made from this checkout, bisected for real.

Builds a git repository in a temporary directory from a copy of this checkout's files:

    c0        this tree
    good      torch_3op's call wrapped by `_planted` with PLANTED_SPIN = 0 (no slowdown)
    1 .. N    N commits (default 16) touching a notes file, except commit --plant-at, which sets
              PLANTED_SPIN to the calibrated spin: the planted step

then runs `python -m attnwatch bisect --good <good> --bad <commit N> --case CASE` in it (the
compare workers, the interval, the compile cache, all as on a real range) and checks that the
culprit is the planted commit, with the revisions measured (<= 1 + ceil(log2 N) unless a commit
stayed undecided and was measured again) and the wall time.

The plant: after each call, PLANTED_SPIN cycles of `torch.cuda._sleep` on a GPU (microseconds of
sleep on a CPU, where every call also sleeps a steady 5 ms so a shared CPU's noise stays well
below a large plant: use --slowdown 2; the thresholds then get [gpu."cpu"] min_effect = 0.5).
A spin sized as a share of the call's median realizes more than that share (the spin is one more
launch, and its cycles run at the clock of the moment: a plant sized at 5% realized 9-10% on the
H200), so the spin is calibrated until it REALIZES --slowdown:

1. in this process, the case timed as a compare times it (ci.timing: guard kernel, L2 flush,
   stream pool, interleaved) without the plant and with two spins; the realized share is
   linear in the spin (a + b x spin: the launch's own cost and the spin's), so the two points
   give the spin for --slowdown, which is then timed against the unplanted call once more;
2. up to --calibration-compares times: a one-commit history (good, then the plant) bisected,
   i.e. one same-job compare of the two revisions, whose ratio is the realized share as the
   bisect will read it; off by more than --tolerance (relative), the spin is moved by the
   difference over the slope b and compared again.

The last realized share (a compare's, else this process's) is recorded beside the bisect.

Writes five flat files under --out (default $OUT, else ./bisect-check-out): bisect_check.json
(every figure, with "calibration"), bisect.json (the bisect's own record), bisect.stdout/.stderr,
and bundles.tar.gz (every compare's round bundles: bisect/<probe>/, and calibration/N/bisect/…
for the calibration compares); prints a table.

    PYTHONPATH=. python3 scripts/bisect_check.py --out $OUT --budget-s 520        # the H200: 5% in 16 commits
    PYTHONPATH=. python3 scripts/bisect_check.py --device cpu --commits 6 --plant-at 3 --slowdown 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from attnwatch.scripts.script_env import checkout_env

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch_checkout import commit, copy_checkout, init_repo, cpu_thresholds, git, resolve_device  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANT_FILE = "kernels/variants/torch_3op.py"
HOOKED = "return Prepared(fn=run,"
SPIN_LINE = (
    "PLANTED_SPIN = {spin!r}  # scripts/bisect_check.py: the planted spin after each call "
    "(GPU: cycles, CPU: microseconds), calibrated to realize the asked slowdown\n"
)
# On a GPU the 4-batch shape: the spin is one more launch, whose own cost (a few µs) is a share
# of the call that must stay well under the asked 5% (at h100_small a spin sized at 5% realized 9-10%).
CASES = {"cuda": "torch_3op/b4_h16_s1k/fp16/noncausal", "cpu": "torch_3op/cpu_tiny/fp16/noncausal"}
PLANT = '''

CPU_STEADY_S = 0.005  # on a CPU every call sleeps this long, plus the planted spin: noise well below the plant


def _planted(run, on_gpu: bool, case_id: str = ""):
    """`run` followed by the planted spin (scripts/bisect_check.py's scratch history only):
    PLANTED_SPIN cycles of `torch.cuda._sleep` on a GPU, microseconds of sleep on a CPU; a dict
    PLANTED_SPIN holds one spin per case id (scripts/select_check.py calibrates each case)."""
    import time

    import torch

    spin = PLANTED_SPIN.get(case_id, 0) if isinstance(PLANTED_SPIN, dict) else PLANTED_SPIN

    if not on_gpu:
        def slept():
            out = run()
            time.sleep(CPU_STEADY_S + spin / 1e6)
            return out
        return slept
    if spin <= 0:
        return run

    def spun():
        out = run()
        torch.cuda._sleep(spin)
        return out
    return spun
'''
RATIO = re.compile(r" x(\d+\.\d+) \[(\d+\.\d+), (\d+\.\d+)\]")


class CalibrationError(Exception):
    """The plant cannot realize the asked slowdown (the message says why)."""


def planted(fn, spin: int, on_gpu: bool):
    """`fn` wrapped by the very plant the scratch history commits, with PLANTED_SPIN = `spin`."""
    namespace = {"PLANTED_SPIN": int(spin)}
    exec(compile(PLANT, "<plant>", "exec"), namespace)
    return namespace["_planted"](fn, on_gpu)


def fit_spin(base_us: float, points: list[tuple[int, float]], target: float) -> tuple[int, float, float]:
    """(spin, a, b): the spin whose realized share a + b x spin is `target`, the line through
    `points` ((spin, median µs) pairs, two or more: least squares) against `base_us`."""
    shares = [(spin, median / base_us - 1.0) for spin, median in points]
    mean_x = statistics.fmean(x for x, _ in shares)
    mean_y = statistics.fmean(y for _, y in shares)
    sxx = sum((x - mean_x) ** 2 for x, _ in shares)
    if sxx <= 0:
        raise CalibrationError("calibration: the spins timed were all the same")
    b = sum((x - mean_x) * (y - mean_y) for x, y in shares) / sxx
    a = mean_y - b * mean_x
    if b <= 0:
        raise CalibrationError(f"calibration: a longer spin did not make the call slower (slope {b:.3g} per unit)")
    if a >= target:
        raise CalibrationError(
            f"calibration: the plant's launch alone realizes {a:+.1%}, more than the asked "
            f"{target:+.1%}: plant a larger slowdown, or in a longer case (--case)"
        )
    return max(1, round((target - a) / b)), a, b


def calibrate_in_process(case_id: str, device: str, target: float) -> dict:
    """Step 1 of the module doc: the spin realizing `target` as this process times the case."""
    record = _timed_spins(case_id, device, target)
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()  # the case's tensors are gone: the bisect's workers get the whole GPU
    return record


def _timed_spins(case_id: str, device: str, target: float) -> dict:

    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.suites.case_setup import open_device
    from attnwatch.ci.timing.sampler import Subject, measure_interleaved, warm_up
    from attnwatch.ci.timing.gpu_state import NullMonitor
    from attnwatch.kernels import registry
    from attnwatch.kernels.cases import Case
    from attnwatch.kernels.shapes import SHAPES

    variant, shape, dtype, causal = case_id.split("/")
    on_gpu = device == "cuda"
    samples = (
        {"min_samples": 300, "max_samples": 600, "time_cap_s": 3.0}
        if on_gpu
        else {"min_samples": 15, "max_samples": 30, "time_cap_s": 2.0}
    )
    config = timing_config(device).with_overrides(target_rel_spread=0.0, **samples)
    torch_device, flusher, timer = open_device(device, config)
    fn = registry.get(variant).prepare(Case(variant, SHAPES[shape], dtype, causal == "causal"), torch_device, 0).fn

    def medians(spins: list[int]) -> list[float]:
        subjects = [Subject(str(i), planted(fn, spin, on_gpu)) for i, spin in enumerate(spins)]
        for subject in subjects:
            warm_up(subject.fn, config, timer, flusher)
        raws = measure_interleaved(subjects, config, timer, flusher, NullMonitor())
        return [statistics.median(raws[str(i)].samples_us) for i in range(len(spins))]

    (base_us,) = medians([0])
    if on_gpu:
        import torch

        from attnwatch.ci.timing.timers import spin_cycles_per_us

        per_us = spin_cycles_per_us(torch)
    else:
        per_us = 1.0  # the CPU plant's unit is a microsecond
    first = max(1, round(target * base_us * per_us))
    spins = [0, first, 2 * first]
    timed = medians(spins)
    spin, a, b = fit_spin(timed[0], list(zip(spins[1:], timed[1:])), target)
    check_base, check = medians([0, spin])
    return {
        "base_us": round(timed[0], 3),
        "units_per_us": round(per_us, 1),
        "points": [[s, round(m, 3)] for s, m in zip(spins, timed)],
        "a": a,
        "b": b,
        "spin": spin,
        "realized": check / check_base - 1.0,
    }


def _set_spin(repo: Path, spin: int | dict[str, int]) -> None:
    """PLANTED_SPIN in the scratch variant: one spin for every case, or one per case id."""
    path = repo / VARIANT_FILE
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("PLANTED_SPIN = "))
    lines[at] = SPIN_LINE.format(spin=spin)
    path.write_text("".join(lines))


def hook_plant(repo: Path, script: str) -> None:
    """torch_3op's call wrapped by `_planted` (PLANT) at no slowdown; `_set_spin` then plants one."""
    variant = repo / VARIANT_FILE
    text = variant.read_text()
    if HOOKED not in text:
        sys.exit(f"{script}: {VARIANT_FILE} no longer says {HOOKED!r}: update the plant")
    variant.write_text(
        text.replace(HOOKED, "return Prepared(fn=_planted(run, q.is_cuda, case.id),")
        + "\n"
        + SPIN_LINE.format(spin=0)
        + PLANT
    )


def build_history(repo: Path, commits: int, plant_at: int, slowdown: float, spin: int) -> dict:
    """The scratch repository (module doc); returns the good, bad and planted SHAs and every commit."""
    copy_checkout(repo)
    init_repo(repo, "this tree")
    hook_plant(repo, "bisect_check")
    good = commit(repo, "torch_3op: the hook of the planted slowdown, at no slowdown")
    planted = None
    for i in range(1, commits + 1):
        if i == plant_at:
            _set_spin(repo, spin)
            planted = commit(repo, f"torch_3op: planted slowdown of {slowdown:.0%}")
        else:
            with open(repo / "NOTES.md", "a") as notes:
                notes.write(f"note {i}\n")
            git(repo, "add", "NOTES.md")
            commit(repo, f"notes: entry {i}")
    return {
        "good": good,
        "bad": git(repo, "rev-parse", "HEAD"),
        "planted": planted,
        "commits": git(repo, "rev-list", "--reverse", f"{good}..HEAD").split(),
    }


def run_bisect(repo: Path, history: dict, case: str, args, device: str, out: Path, timeout_s: float) -> dict:
    """`attnwatch bisect` of `history` in `repo`, bounded by `timeout_s`: its bisect.json, rc and wall."""
    command = [
        sys.executable,
        "-m",
        "attnwatch",
        "--db",
        str(repo.parent / "unused.duckdb"),
        "bisect",
        "--checkout",
        str(repo),
        "--good",
        history["good"],
        "--bad",
        history["bad"],
        "--case",
        case,
        "--out",
        str(out),
    ]
    for flag, value in (("--rounds", args.rounds), ("--min-rounds", args.min_rounds)):
        if value is not None:
            command += [flag, str(value)]
    if args.no_correctness:
        command.append("--no-correctness")
    if device == "cpu":
        command += ["--thresholds", str(cpu_thresholds(repo.parent / "thresholds.toml"))]
    env = checkout_env()
    started = time.monotonic()
    # Its own session: at the budget the bisect and its compare workers are killed together.
    proc = subprocess.Popen(
        command,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=max(1.0, timeout_s))
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        rc, stderr = None, stderr + f"\nbisect_check: stopped at the budget ({timeout_s:.0f} s)"
    result_file = out / "bisect.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    return {
        "rc": rc,
        "stdout": stdout,
        "stderr": stderr,
        "result": result,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _this_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def realized_ratio(result: dict) -> tuple[float | None, str | None]:
    """The bad revision's ratio against the good one, and its interval, from a bisect.json."""
    for probe in reversed(result.get("probes", [])):
        if probe.get("sha") == result.get("commits", [None])[-1]:
            for text in probe.get("intervals", []):
                found = RATIO.search(text)
                if found:
                    return float(found.group(1)), text
    return None, None


def calibrate(args, device: str, case: str, out: Path, deadline: float) -> dict:
    """The module doc's calibration: in this process, then by compares of a one-commit history."""
    record = {"target": args.slowdown, "in_process": calibrate_in_process(case, device, args.slowdown), "compares": []}
    spin, slope = record["in_process"]["spin"], record["in_process"]["b"]
    record["spin"], record["realized"], record["realized_by"] = spin, record["in_process"]["realized"], "this process"
    print(
        f"calibration in this process: base {record['in_process']['base_us']} us, spin {spin} realizes "
        f"{record['realized']:+.2%} (asked {args.slowdown:+.2%})",
        flush=True,
    )
    for n in range(args.calibration_compares):
        if time.monotonic() > deadline:
            print("calibration: budget reached, no further compare", flush=True)
            break
        with tempfile.TemporaryDirectory(prefix="attnwatch-bisect-calibration-") as tmp:
            repo = Path(tmp) / "repo"
            repo.mkdir()
            history = build_history(repo, 1, 1, args.slowdown, spin)
            ran = run_bisect(
                repo, history, case, args, device, out / "calibration" / str(n), deadline - time.monotonic()
            )
        ratio, interval = realized_ratio(ran["result"])
        record["compares"].append(
            {"spin": spin, "ratio": ratio, "interval": interval, "wall_s": ran["wall_s"], "rc": ran["rc"]}
        )
        print(
            f"calibration compare {n + 1}: spin {spin}: {interval or 'no ratio (' + ran['stderr'][-200:] + ')'}",
            flush=True,
        )
        if ratio is None:
            break
        record["spin"], record["realized"], record["realized_by"] = spin, ratio - 1.0, f"compare {n + 1}"
        if abs(ratio - 1.0 - args.slowdown) <= args.tolerance * args.slowdown:
            break
        spin = max(1, round(spin + (args.slowdown - (ratio - 1.0)) / slope))
    # A move after the last compare is not planted: the plant keeps the spin whose share was measured.
    return record


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commits", type=int, default=16, help="commits after the good one (default 16)")
    p.add_argument("--plant-at", type=int, default=11, help="which of them plants the slowdown (1-based, default 11)")
    p.add_argument("--slowdown", type=float, default=0.05, help="the slowdown the plant must realize (default 0.05)")
    p.add_argument("--case", help=f"case to bisect (default {CASES['cuda']} on a GPU, {CASES['cpu']} on a CPU)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--rounds", type=int, default=None, help="compare round cap (default: the compare's)")
    p.add_argument("--min-rounds", type=int, default=None)
    p.add_argument("--no-correctness", action="store_true")
    p.add_argument(
        "--calibration-compares",
        type=int,
        default=2,
        help="compares of a one-commit history that check (and move) the calibrated spin (default 2)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=0.1,
        help="relative distance from --slowdown a calibration compare accepts (default 0.1: 5%% +- 0.5)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=520.0,
        help="the whole call's time: calibration compares stop at a third of it, the bisect at all of it",
    )
    p.add_argument("--commit", default=None, help="the commit measured, for the record (default: git rev-parse here)")
    p.add_argument("--out", type=Path, default=None, help="default $OUT, else ./bisect-check-out")
    args = p.parse_args(argv)
    if not 1 <= args.plant_at <= args.commits:
        p.error(f"--plant-at: expected 1..{args.commits}")
    if args.slowdown <= 0:
        p.error("--slowdown: expected a positive share")
    started = time.monotonic()
    device = resolve_device(args.device)
    out = (args.out or Path(os.environ.get("OUT") or "bisect-check-out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    case = args.case or CASES[device]
    bundles = Path(tempfile.mkdtemp(prefix="attnwatch-bisect-bundles-"))  # every compare's output, tarred at the end
    try:
        calibration = calibrate(args, device, case, bundles, started + args.budget_s / 3)
    except CalibrationError as exc:
        (out / "bisect_check.json").write_text(json.dumps({"device": device, "case": case, "error": str(exc)}))
        shutil.rmtree(bundles, ignore_errors=True)
        sys.exit(f"bisect_check: {exc}")
    with tempfile.TemporaryDirectory(prefix="attnwatch-bisect-check-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        history = build_history(repo, args.commits, args.plant_at, args.slowdown, calibration["spin"])
        ran = run_bisect(
            repo, history, case, args, device, bundles / "bisect", started + args.budget_s - time.monotonic()
        )
    (out / "bisect.stdout").write_text(ran["stdout"])
    (out / "bisect.stderr").write_text(ran["stderr"])
    result = ran["result"]
    (out / "bisect.json").write_text(json.dumps(result, indent=1))
    with tarfile.open(out / "bundles.tar.gz", "w:gz") as tar:
        tar.add(bundles, arcname=".")
    shutil.rmtree(bundles, ignore_errors=True)
    bound = 1 + math.ceil(math.log2(args.commits)) if args.commits > 1 else 1
    culprit_ratio, culprit_interval = realized_ratio({**result, "commits": [history["planted"]]})
    report = {
        "commit": args.commit or _this_commit(),
        "device": device,
        "case": case,
        "commits": args.commits,
        "plant_at": args.plant_at,
        "slowdown": args.slowdown,
        "calibration": calibration,
        "planted_ratio": culprit_ratio,
        "planted": history["planted"],
        "good": history["good"],
        "bad": history["bad"],
        "rc": ran["rc"],
        "outcome": result.get("outcome"),
        "culprit": result.get("culprit"),
        "found_planted": result.get("culprit") == history["planted"],
        "revisions_measured": result.get("revisions_measured"),
        "bound": bound,
        "compares": len(result.get("probes", [])),
        "bisect_wall_s": result.get("wall_s"),
        "wall_s": ran["wall_s"],
        "script_wall_s": round(time.monotonic() - started, 1),
        "planted_interval": culprit_interval,
        "summary": result.get("summary"),
        "probes": [
            {
                "commit": history["commits"].index(p["sha"]) + 1 if p["sha"] in history["commits"] else None,
                **{k: p[k] for k in ("sha", "attempt", "state", "intervals")},
            }
            for p in result.get("probes", [])
        ],
    }
    (out / "bisect_check.json").write_text(json.dumps(report, indent=1))
    print(f"{'#':>2}  {'commit':>6}  {'try':>3}  {'state':<9}  interval against the good revision")
    for n, probe in enumerate(report["probes"], 1):
        print(
            f"{n:>2}  {probe['commit'] or '?':>6}  {probe['attempt'] + 1:>3}  {probe['state']:<9}  "
            f"{'; '.join(probe['intervals'])[:110]}"
        )
    print(
        f"plant calibrated to {args.slowdown:+.1%}: spin {calibration['spin']} realized "
        f"{calibration['realized']:+.2%} ({calibration['realized_by']}); at the culprit the bisect read "
        f"{culprit_interval or '-'}"
    )
    print(
        f"planted at commit {args.plant_at} of {args.commits} ({args.slowdown:.0%}, {case} on {device}): "
        f"{report['outcome']}, culprit {'is' if report['found_planted'] else 'is NOT'} the planted commit; "
        f"{report['revisions_measured']} revisions measured (bound {bound}), {report['compares']} compares, "
        f"wall {report['wall_s']} s (script {report['script_wall_s']} s)"
    )
    if ran["rc"] not in (0, 1) or not result:
        print(ran["stderr"][-3000:], file=sys.stderr)
        return 2
    return 0 if report["found_planted"] else 1


if __name__ == "__main__":
    sys.exit(main())
