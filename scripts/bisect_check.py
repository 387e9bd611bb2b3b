"""`attnwatch bisect` on a planted step: a scratch history made from this checkout, bisected for real.

Builds a git repository in a temporary directory from a copy of this checkout's files:

    c0        this tree
    good      torch_3op's call wrapped by `_planted` with PLANTED_SHARE = 0.0 (no slowdown)
    1 .. N    N commits (default 16) touching a notes file, except commit --plant-at, which sets
              PLANTED_SHARE = --slowdown: the planted step

then runs `python -m attnwatch bisect --good <good> --bad <commit N> --case CASE` in it (the
compare workers, the interval, the compile cache, all as on a real range) and checks that the
culprit is the planted commit, with the revisions measured (<= 1 + ceil(log2 N) unless a commit
stayed undecided and was measured again) and the wall time.

The plant: on a GPU, after the call a `torch.cuda._sleep` spin of PLANTED_SHARE x the call's own
median, sized once per prepare (200 calls timed with CUDA events, no L2 flush, and the spin's
cycles per µs from one long spin): the realized slowdown is what the compares read, printed
beside the culprit. On a CPU (a pipeline check), every call sleeps a steady 5 ms x (1 +
PLANTED_SHARE), so a shared CPU's noise stays well below a large plant (use --slowdown 2), and
the thresholds get [gpu."cpu"] min_effect = 0.5 (a CPU's default 3% cannot be decided there).

Writes under --out (default $OUT, else ./bisect-check-out): bisect_check.json (every figure),
bisect/ (bisect.json and every compare's round bundles), bisect.stdout/.stderr; prints a table.

    PYTHONPATH=. python3 scripts/bisect_check.py --out $OUT                 # the H200: 5% in 16 commits
    PYTHONPATH=. python3 scripts/bisect_check.py --device cpu --commits 6 --plant-at 3 --slowdown 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANT_FILE = "kernels/variants/torch_3op.py"
HOOKED = "return Prepared(fn=run,"
SHARE_LINE = "PLANTED_SHARE = {share!r}  # scripts/bisect_check.py: the planted slowdown, a share of the call's median\n"
CASES = {"cuda": "torch_3op/h100_small/fp16/noncausal", "cpu": "torch_3op/cpu_tiny/fp16/noncausal"}
PLANT = '''

CPU_STEADY_S = 0.005  # on a CPU every call sleeps this long x (1 + PLANTED_SHARE): noise well below the plant


def _planted(run, on_gpu: bool):
    """`run` followed by the planted slowdown (scripts/bisect_check.py's scratch history only)."""
    import statistics
    import time

    import torch

    if not on_gpu:
        def slept():
            out = run()
            time.sleep(CPU_STEADY_S * (1.0 + PLANTED_SHARE))
            return out
        return slept
    if PLANTED_SHARE <= 0:
        return run
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1000)
    for _ in range(20):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(200):
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    cycles = max(1, int(PLANTED_SHARE * statistics.median(times) * 1_000_000 / (start.elapsed_time(end) * 1000.0)))

    def spun():
        out = run()
        torch.cuda._sleep(cycles)
        return out
    return spun
'''


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bisect check", "GIT_AUTHOR_EMAIL": "check@example.org",
           "GIT_COMMITTER_NAME": "bisect check", "GIT_COMMITTER_EMAIL": "check@example.org"}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, timeout=300)
    if done.returncode != 0:
        sys.exit(f"bisect_check: git {args[0]}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def _set_share(repo: Path, share: float) -> None:
    path = repo / VARIANT_FILE
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("PLANTED_SHARE = "))
    lines[at] = SHARE_LINE.format(share=share)
    path.write_text("".join(lines))


SKIPPED_DIRS = {".git", ".venv", "__pycache__", ".pytest_cache", ".cutlass", "node_modules", "bisect-check-out"}


def _tree_files() -> list[str]:
    """This checkout's files: git's list (tracked, and untracked ones not ignored), or, in a copy
    without .git, every file outside the build and cache folders."""
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True)
    if listed.returncode == 0 and (REPO_ROOT / ".git").exists():
        return [n for n in listed.stdout.decode().split("\0") if n]
    out = []
    for folder, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS and not d.endswith(".egg-info")]
        out += [str((Path(folder) / f).relative_to(REPO_ROOT)) for f in files if not f.endswith((".pyc", ".so"))]
    return out


def copy_checkout(repo: Path) -> None:
    """This checkout's files (`_tree_files`) copied into `repo` (also scripts/select_check.py's start)."""
    for name in _tree_files():
        source = REPO_ROOT / name
        if source.is_file() and not source.is_symlink():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, repo / name)


def hook_plant(repo: Path, script: str) -> None:
    """torch_3op's call wrapped by `_planted` (PLANT) at no slowdown; `_set_share` then plants one."""
    variant = repo / VARIANT_FILE
    text = variant.read_text()
    if HOOKED not in text:
        sys.exit(f"{script}: {VARIANT_FILE} no longer says {HOOKED!r}: update the plant")
    variant.write_text(text.replace(HOOKED, "return Prepared(fn=_planted(run, q.is_cuda),")
                       + "\n" + SHARE_LINE.format(share=0.0) + PLANT)


def build_history(repo: Path, commits: int, plant_at: int, slowdown: float) -> dict:
    """The scratch repository (module doc); returns the good, bad and planted SHAs and every commit."""
    copy_checkout(repo)
    _git(repo, "init", "--quiet")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "this tree")
    hook_plant(repo, "bisect_check")
    _git(repo, "commit", "--quiet", "-am", "torch_3op: the hook of the planted slowdown, at no slowdown")
    good = _git(repo, "rev-parse", "HEAD")
    planted = None
    for i in range(1, commits + 1):
        if i == plant_at:
            _set_share(repo, slowdown)
            _git(repo, "commit", "--quiet", "-am", f"torch_3op: planted slowdown of {slowdown:.0%}")
            planted = _git(repo, "rev-parse", "HEAD")
        else:
            with open(repo / "NOTES.md", "a") as notes:
                notes.write(f"note {i}\n")
            _git(repo, "add", "NOTES.md")
            _git(repo, "commit", "--quiet", "-m", f"notes: entry {i}")
    return {"good": good, "bad": _git(repo, "rev-parse", "HEAD"), "planted": planted,
            "commits": _git(repo, "rev-list", "--reverse", f"{good}..HEAD").split()}


def _cpu_thresholds(path: Path) -> Path:
    text = (REPO_ROOT / "history/analysis/thresholds.toml").read_text()
    path.write_text(text + '\n[gpu."cpu"]\nmin_effect = 0.5\nmin_effect_reason = "bisect_check on a shared CPU: '
                           'only a large plant (a 5 ms sleep made 3x longer) is decidable there."\n')
    return path


def _device(choice: str) -> str:
    if choice != "auto":
        return choice
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:
        return "cpu"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--commits", type=int, default=16, help="commits after the good one (default 16)")
    p.add_argument("--plant-at", type=int, default=11, help="which of them plants the slowdown (1-based, default 11)")
    p.add_argument("--slowdown", type=float, default=0.05, help="planted share of the call's median (default 0.05)")
    p.add_argument("--case", help=f"case to bisect (default {CASES['cuda']} on a GPU, {CASES['cpu']} on a CPU)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--rounds", type=int, default=None, help="compare round cap (default: the compare's)")
    p.add_argument("--min-rounds", type=int, default=None)
    p.add_argument("--no-correctness", action="store_true")
    p.add_argument("--out", type=Path, default=None, help="default $OUT, else ./bisect-check-out")
    args = p.parse_args(argv)
    if not 1 <= args.plant_at <= args.commits:
        p.error(f"--plant-at: expected 1..{args.commits}")
    device = _device(args.device)
    out = (args.out or Path(os.environ.get("OUT") or "bisect-check-out")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    case = args.case or CASES[device]
    with tempfile.TemporaryDirectory(prefix="attnwatch-bisect-check-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        history = build_history(repo, args.commits, args.plant_at, args.slowdown)
        command = [sys.executable, "-m", "attnwatch", "--db", str(Path(tmp) / "unused.duckdb"), "bisect",
                   "--checkout", str(repo), "--good", history["good"], "--bad", history["bad"], "--case", case,
                   "--out", str(out / "bisect")]
        for flag, value in (("--rounds", args.rounds), ("--min-rounds", args.min_rounds)):
            if value is not None:
                command += [flag, str(value)]
        if args.no_correctness:
            command.append("--no-correctness")
        if device == "cpu":
            command += ["--thresholds", str(_cpu_thresholds(Path(tmp) / "thresholds.toml"))]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
        started = time.monotonic()
        done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, env=env)
        wall_s = time.monotonic() - started
    (out / "bisect.stdout").write_text(done.stdout)
    (out / "bisect.stderr").write_text(done.stderr)
    result_file = out / "bisect" / "bisect.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    bound = 1 + math.ceil(math.log2(args.commits)) if args.commits > 1 else 1
    report = {
        "device": device, "case": case, "commits": args.commits, "plant_at": args.plant_at, "slowdown": args.slowdown,
        "planted": history["planted"], "good": history["good"], "bad": history["bad"], "rc": done.returncode,
        "outcome": result.get("outcome"), "culprit": result.get("culprit"),
        "found_planted": result.get("culprit") == history["planted"],
        "revisions_measured": result.get("revisions_measured"), "bound": bound,
        "compares": len(result.get("probes", [])), "bisect_wall_s": result.get("wall_s"), "wall_s": round(wall_s, 1),
        "summary": result.get("summary"),
        "probes": [{"commit": history["commits"].index(p["sha"]) + 1 if p["sha"] in history["commits"] else None,
                    **{k: p[k] for k in ("sha", "attempt", "state", "intervals")}} for p in result.get("probes", [])],
    }
    (out / "bisect_check.json").write_text(json.dumps(report, indent=1))
    print(f"{'#':>2}  {'commit':>6}  {'try':>3}  {'state':<9}  interval against the good revision")
    for n, probe in enumerate(report["probes"], 1):
        print(f"{n:>2}  {probe['commit'] or '?':>6}  {probe['attempt'] + 1:>3}  {probe['state']:<9}  "
              f"{'; '.join(probe['intervals'])[:110]}")
    print(f"planted at commit {args.plant_at} of {args.commits} ({args.slowdown:.0%}, {case} on {device}): "
          f"{report['outcome']}, culprit {'is' if report['found_planted'] else 'is NOT'} the planted commit; "
          f"{report['revisions_measured']} revisions measured (bound {bound}), {report['compares']} compares, "
          f"wall {report['wall_s']} s")
    if done.returncode not in (0, 1) or not result:
        print(done.stderr[-3000:], file=sys.stderr)
        return 2
    return 0 if report["found_planted"] else 1


if __name__ == "__main__":
    sys.exit(main())
