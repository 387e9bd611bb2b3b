"""The selective PR check on the GPU in one call: an A/A, a one-variant planted slowdown and an
engine change, each a real `attnwatch compare` (pr set, every registered variant, correctness on).

Builds a scratch git repository from a copy of this checkout's files (as scripts/bisect_check.py
does, with its torch_3op plant hooked in at no slowdown) holding a chain of commits, and
compares each commit against its parent with `python -m attnwatch compare` (needs no duckdb):

    warmup    c0 -> c1, --all --rounds 1 --no-correctness: fills the nvcc, Triton and CuPy caches
              (not timed as a result; skipped with --no-warmup)
    aa        c0 -> c1: c1 touches a notes file only. Expected: the reference (attention's baseline)
              and the A/A canary measured, every other variant "unchanged" (RMSNorm's baseline
              too), nothing flagged
    planted   c1 -> c2: c2 plants a --slowdown (default 3%) of torch_3op's own call: a spin after
              each call (scripts/bisect_check.PLANT), calibrated per case in this process before
              the history is built (bisect_check.calibrate_in_process: the spin whose realized
              share is the asked one); a case whose spin launch alone costs more than that share
              keeps the shortest spin, and its calibration says so. Expected: torch_3op, the
              reference and the canary measured (no RMSNorm baseline: nothing of RMSNorm changed),
              every torch_3op case a regression, nothing else flagged
    engine    c2 -> c3: c3 adds a comment to ci/engine/group.py. Expected: every variant measured
              (the shared harness changed), nothing flagged

Each compare gets what is left of --budget-s (one whose minimum does not fit is skipped, and
said so). Writes under --out (default $OUT): select_check.json (per compare: wall time, the
compare's time breakdown, the selection, every case's verdict, whether the expectation held),
<compare>.json (each compare.json), <compare>_ncu_<side>-round1.csv (each side's ncu_raw.csv
when the compare profiled), select_check.log (every compare's stderr); prints a table last.

    PYTHONPATH=. python3 scripts/select_check.py --budget-s 545 --out $OUT      # the H200
    PYTHONPATH=. python3 scripts/select_check.py --device cpu --smoke --out select-smoke   # this script's own check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bisect_check import CalibrationError, _set_spin, calibrate_in_process, hook_plant  # noqa: E402
from scratch_checkout import commit, copy_checkout, init_repo, cpu_thresholds, git, resolve_device  # noqa: E402

from attnwatch.scripts.script_env import checkout_env  # noqa: E402

ENGINE_FILE = "ci/engine/group.py"
PLANTED = "torch_3op"
NEED = {
    "cuda": {"warmup": 60.0, "aa": 40.0, "planted": 50.0, "engine": 150.0},  # least seconds to start one
    "cpu": {"warmup": 20.0, "aa": 15.0, "planted": 15.0, "engine": 15.0},
}
SMOKE_VARIANTS = "sdpa,sdpa_math,sdpa_flash,torch_3op"


def plant_spins(device: str, shapes: str, slowdown: float) -> tuple[dict[str, int], dict[str, dict]]:
    """Per torch_3op case of `shapes`, the spin realizing `slowdown`, and each case's calibration record."""
    import argparse as _argparse

    from attnwatch.cli.commands.ncu import select_cases

    cases = select_cases(_argparse.Namespace(shapes=shapes, variants=PLANTED, dtypes=None, causal="both", cases=[]))
    spins, records = {}, {}
    for case in cases:
        try:
            record = calibrate_in_process(case.id, device, slowdown)
        except CalibrationError as exc:
            record = {"spin": 1, "error": str(exc)}
        spins[case.id], records[case.id] = int(record["spin"]), record
        realized = record.get("realized")
        print(
            f"select_check: plant {case.id}: spin {record['spin']}"
            + (f" realizes {realized:+.2%} in this process" if realized is not None else f" ({record['error']})"),
            flush=True,
        )
    return spins, records


def build_chain(repo: Path, spins: dict[str, int], slowdown: float) -> list[str]:
    """c0..c3 of the module doc; returns their SHAs."""
    copy_checkout(repo)
    hook_plant(repo, "select_check")
    shas = [init_repo(repo, "c0: this tree, torch_3op hooked at no slowdown")]
    (repo / "NOTES.md").write_text("a change no fingerprint sees\n")
    git(repo, "add", "NOTES.md")
    shas.append(commit(repo, "c1: notes only"))
    _set_spin(repo, spins)
    shas.append(commit(repo, f"c2: torch_3op {slowdown:.0%} slower"))
    with open(repo / ENGINE_FILE, "a") as engine:
        engine.write("\n# select_check: a comment-only change to the shared engine\n")
    shas.append(commit(repo, "c3: a comment in the engine"))
    return shas


def expectation(name: str, report: dict) -> tuple[bool, str]:
    """Whether a compare selected and judged what it should (module doc). The baselines measured
    (compare.json's selection "reference") must be attention's reference alone in the A/A and the
    planted compare: another operator's baseline is measured only for a change of its operator."""
    from attnwatch.kernels.registry import reference

    selection = report.get("selection") or {}
    measured = {v["variant"] for v in selection.get("variants", []) if v["measured"]}
    skipped = [v["variant"] for v in selection.get("variants", []) if not v["measured"]]
    moved = {c["case_id"] for c in report["cases"] if c["verdict"] in ("regression", "improvement")}
    baselines = [r for r in (selection.get("reference") or "").split(", ") if r]
    alone = baselines == [reference().name]
    if name == "aa":
        want = {reference().name, *selection.get("canary", [])}
        ok = measured == want and alone and bool(skipped) and not moved
        return ok, f"measured {sorted(measured)}, {len(skipped)} skipped, flagged {sorted(moved)}"
    if name == "planted":
        planted = [c for c in report["cases"] if c["variant"] == PLANTED]
        caught = [c for c in planted if c["verdict"] == "regression"]
        others = moved - {c["case_id"] for c in planted}
        want = {PLANTED, reference().name, *selection.get("canary", [])}
        ok = bool(planted) and len(caught) == len(planted) and not others and measured == want and alone
        return ok, (
            f"{len(caught)} of {len(planted)} {PLANTED} cases regressed, other flagged {sorted(others)}, "
            f"measured {sorted(measured)}"
        )
    if name == "engine":
        ok = bool(selection.get("everything")) and not skipped and not moved
        return ok, f"everything: {selection.get('everything')}; flagged {sorted(moved)}"
    return True, "cache warm-up"


def run_compare(
    name: str, repo: Path, base: str, head: str, args, device: str, timeout_s: float, work: Path, log
) -> dict:
    out = work / name
    ncu = "off" if name == "warmup" else args.ncu
    cmd = [
        sys.executable,
        "-m",
        "attnwatch",
        "compare",
        "--base",
        base,
        "--head",
        head,
        "--shapes",
        args.shapes,
        "--ncu",
        ncu,
        "--out",
        str(out),
    ]
    if args.variants:
        cmd += ["--variants", args.variants]
    if name == "warmup":
        cmd += ["--all", "--rounds", "1", "--min-rounds", "1", "--no-correctness"]
    else:
        cmd += [] if args.rounds is None else ["--rounds", str(args.rounds)]
        cmd += ["--no-correctness"] if args.no_correctness else []
    if device == "cpu":
        cmd += ["--thresholds", str(cpu_thresholds(work / "cpu_thresholds.toml"))]
    env = checkout_env()
    cutlass = REPO_ROOT / ".cutlass" / "include"
    if cutlass.is_dir() and not env.get("CUTLASS_INCLUDE_DIR"):
        env["CUTLASS_INCLUDE_DIR"] = str(cutlass)
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stderr = (
            124,
            (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or ""),
        )
    wall = time.monotonic() - started
    log.write(f"===== {name}: rc {rc}, {wall:.1f} s\n{stderr}\n")
    result = {"name": name, "rc": rc, "wall_s": round(wall, 1), "base": base, "head": head, "ncu": ncu}
    if rc != 0 or not (out / "compare.json").is_file():
        result["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return result
    report = json.loads((out / "compare.json").read_text())
    shutil.copy2(out / "compare.json", Path(args.out) / f"{name}.json")
    for raw in sorted(out.rglob("ncu_raw.csv")):  # each side's profile as ncu printed it (bundles/<side>-round1)
        shutil.copy2(raw, Path(args.out) / f"{name}_ncu_{raw.parent.name}.csv")
    ok, said = expectation(name, report)
    selection = report.get("selection") or {}
    result.update(
        times=report.get("times"),
        expected=ok,
        said=said,
        everything=selection.get("everything"),
        canary=selection.get("canary"),
        measured=sorted(v["variant"] for v in selection.get("variants", []) if v["measured"]),
        skipped=sorted(v["variant"] for v in selection.get("variants", []) if not v["measured"]),
        verdicts={c["case_id"]: [c["verdict"], c["ratio"]] for c in report["cases"]},
        causes={
            c["case_id"]: (c.get("explanation") or {}).get("cause")
            for c in report["cases"]
            if c["verdict"] in ("regression", "improvement")
        },
    )
    return result


def print_table(results: list[dict], total: float, budget: float) -> None:
    print(f"{'compare':8} {'rc':>3} {'wall s':>7} {'measured':>8} {'skipped':>7}  expected  breakdown / note")
    for r in results:
        if "skipped_step" in r:
            print(f"{r['name']:8} {'-':>3} {'-':>7} {'-':>8} {'-':>7}  -         skipped: {r['skipped_step']}")
            continue
        t = r.get("times") or {}
        parts = " ".join(f"{k[:-2]} {v:.1f}" for k, v in t.items() if k != "wall_s" and v >= 0.05)
        print(
            f"{r['name']:8} {r['rc']:>3} {r['wall_s']:>7.1f} {len(r.get('measured', [])):>8} {len(r.get('skipped', [])):>7}"
            f"  {('yes' if r.get('expected') else 'NO'):8}  {parts or r.get('error', '')}"
        )
        if r.get("said"):
            print(f"{'':8} {r['said'][:200]}")
        if r.get("ncu") != "off":
            for case_id, cause in (r.get("causes") or {}).items():
                print(f"{'':8} {case_id}: {cause or 'no counter explanation'}")
    print(f"total {total:.0f} s of {budget:.0f}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--budget-s", type=float, default=540.0, help="wall-clock budget of the whole call (default 540)")
    p.add_argument("--slowdown", type=float, default=0.03, help="planted share of torch_3op's call (default 0.03)")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--smoke",
        action="store_true",
        help=f"cpu set, variants {SMOKE_VARIANTS}, 2 rounds, no correctness "
        "or warm-up, a 200%% plant: this script's own check",
    )
    p.add_argument("--shapes", default="pr")
    p.add_argument("--variants", help="default: every registered variant")
    p.add_argument("--rounds", type=int, default=None, help="compare round cap (default: the compare's)")
    p.add_argument("--no-correctness", action="store_true")
    p.add_argument("--no-warmup", action="store_true", help="skip the cache warm-up compare")
    p.add_argument("--compares", default="aa,planted,engine", help="which compares to run (default all three)")
    p.add_argument(
        "--ncu",
        choices=("off", "changed"),
        default="off",
        help="the compares' --ncu (default off: the wall times are the verdict's alone); 'changed' profiles "
        "the judged cases on both sides with the explain list and prints each one's cause",
    )
    p.add_argument("--out", default=os.environ.get("OUT") or "select-check-out")
    args = p.parse_args(argv)
    if args.smoke:
        args.shapes, args.variants, args.rounds, args.no_correctness = "cpu", SMOKE_VARIANTS, 2, True
        args.no_warmup, args.slowdown = True, 2.0
    device = resolve_device(args.device)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results = []
    with (
        tempfile.TemporaryDirectory(prefix="attnwatch-select-check-") as tmp,
        open(Path(args.out) / "select_check.log", "w") as log,
    ):
        repo = Path(tmp) / "repo"
        repo.mkdir()
        spins, calibration = plant_spins(device, args.shapes, args.slowdown)
        c0, c1, c2, c3 = build_chain(repo, spins, args.slowdown)
        plan = [("warmup", c0, c1), ("aa", c0, c1), ("planted", c1, c2), ("engine", c2, c3)]
        for name, base, head in plan:
            left = args.budget_s - (time.monotonic() - started)
            if (name == "warmup" and args.no_warmup) or (name != "warmup" and name not in args.compares.split(",")):
                results.append({"name": name, "skipped_step": "not asked for"})
                continue
            if left < NEED[device][name]:
                results.append({"name": name, "skipped_step": f"{left:.0f} s of the budget left"})
                continue
            print(f"select_check: {name}: {base[:8]} -> {head[:8]} (up to {left - 5:.0f} s)", flush=True)
            results.append(run_compare(name, repo, base, head, args, device, left - 5, Path(tmp), log))
    total = time.monotonic() - started
    summary = {
        "device": device,
        "budget_s": args.budget_s,
        "seconds": round(total, 1),
        "slowdown": args.slowdown,
        "plant_calibration": calibration,
        "shapes": args.shapes,
        "variants": args.variants or "all",
        "compares": results,
    }
    (Path(args.out) / "select_check.json").write_text(json.dumps(summary, indent=1))
    print_table(results, total, args.budget_s)
    return 0 if all(r.get("expected", True) and r.get("rc", 0) == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
