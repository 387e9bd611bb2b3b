"""The verdict while you wait (issue 43) on the GPU in one call: a one-variant change built and
measured alone, with empty, warm and restored caches, against an `--all` compare and two A/As.

Makes a scratch git repository from a copy of this checkout (scripts/scratch_checkout.copy_checkout):
`base` is this tree, and each change of --changes a one-line commit on it (CHANGES below):

    wmma       scripts/pr_plants/barrier.patch at magnitude 1: a one-line change to
               kernels/cuda/wmma_attention.cuh (cuda_wmma, cuda_wmma_cpasync)
    triton     scripts/pr_plants/triton_stages.patch at magnitude 2: one line of
               kernels/triton/configs.toml (triton_fa2)
    torch_3op  `MEMORY_SHARE = 0.5` written `0.50` in kernels/variants/torch_3op.py: a fingerprint
               change that changes no work (this script's own CPU check)

Then, in order of value, each step a real subprocess (`python -m attnwatch ...`, run in the
scratch repository; the pr set, the compare's defaults otherwise), started only when what is left
of --budget-s covers its least useful length (NEED) and stopped at its longest (MOST):

    affected_<c>    `attnwatch affected --base base --head <c>`: the variants it selects
    <c>_empty       `attnwatch compare --base base --head <c>` with ATTNWATCH_CACHE an empty folder
                    (a fresh machine with no caches; CUDA_CACHE_PATH empty too). The root is then
                    sealed (`attnwatch cache-key --seal`) and packed (tar), as the workflow saves it
    <c>_warm        the same compare on the same root (a warm runner)
    <c>_next        the next pull request on that warm root: another one-line change of the same
                    line (NEXT below); its head is new (built, checked and profiled), its base is
                    the one the cache already holds (Nsight Compute's profiles of it included)
    <c>_restored    the same compare on the root emptied and unpacked from that tar at the same
                    path, as actions/cache restores it, and checked (`cache-key --verify`): a
                    fresh machine with its cache root restored (unpacking and check timed apart;
                    the later steps use this root)
    aa_1, aa_2      A/A compares on the first change's root: head == base, then a head that
                    changes a notes file only (each has its own A/A canary); every flagged case is
                    a false alarm
    <c>_all         `--all` on the first change's root: every variant; the verdicts of the
                    variants the selective compares measured set side by side with theirs
    reference_cache scripts/reference_cache_check.py over the shape set
    cache           always, last: `attnwatch cache-key --json` and each cache root's size by
                    subfolder (du)

The first change gets empty/warm/restored, the A/As and --all follow (--all is the most
expensive: cold for every variant no earlier step built), then the other changes. --steps keeps a subset
of the kinds (affected, empty, warm, restored, aa, all, reference_cache). The OS page cache, the
loaded driver and this checkout's bytecode are not emptied: "fresh" means fresh cache folders.

Writes under --out (default $OUT): verdict_check.json (every figure; a skipped step says why),
<step>/compare.json and compare.log of each compare, affected_<c>.json, reference_cache.json;
prints a table last (step, wall s, target, verdicts).

    PYTHONPATH=. python3 scripts/verdict_check.py --budget-s 560 --out $OUT        # the H200
    PYTHONPATH=. python3 scripts/verdict_check.py --device cpu --changes torch_3op --variants \\
        sdpa,torch_3op --rounds 1 --causal no --dtypes fp16 --no-correctness --out verdict-smoke   # its check
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch_checkout import commit, copy_checkout, init_repo, cpu_thresholds, git, resolve_device  # noqa: E402
from explain_check import apply_plant, load_plants  # noqa: E402
from gpu_compare import Budget, run_logged  # noqa: E402
from cache_root_steps import cache_step, du_by_folder, pack, unpack  # noqa: E402

FLAGGED = ("regression", "improvement")
KINDS = ("affected", "empty", "warm", "next", "restored", "aa", "all", "reference_cache")
# Issue 43's targets on the H200 (wall seconds of the one-variant compare); the next pull request
# on a warm runner is held to the warm target.
TARGETS = {"empty": 120.0, "warm": 30.0, "next": 30.0, "restored": 60.0}
NEED = {  # least seconds worth starting a step with
    "cuda": {"affected": 5.0, "empty": 90.0, "warm": 25.0, "next": 25.0, "restored": 40.0, "aa": 25.0, "all": 150.0},
    "cpu": {"affected": 5.0, "empty": 15.0, "warm": 15.0, "next": 15.0, "restored": 15.0, "aa": 15.0, "all": 15.0},
}
NEED_REFERENCE_CACHE = 20.0
MOST = {"affected": 60.0, "empty": 300.0, "warm": 150.0, "next": 150.0, "restored": 200.0, "aa": 150.0, "all": 450.0}
ON_ROOT = ("warm", "next", "restored")  # steps on the cache root their change's empty step filled
KEEP_FOR_CACHE_S = 15.0  # the last step (cache-key, du) always runs


@dataclass(frozen=True)
class Change:
    """A one-line change: a plant of scripts/pr_plants/ at one magnitude, or one exact replacement."""

    summary: str
    plant: str | None = None
    magnitude: str | None = None
    path: str | None = None
    old: str | None = None
    new: str | None = None

    def apply(self, root: Path) -> None:
        if self.plant:
            plant = next(p for p in load_plants() if p.name == self.plant)
            apply_plant(plant, self.magnitude or plant.magnitudes[0], root)
            return
        assert self.path and self.old is not None and self.new is not None
        target = root / self.path
        text = target.read_text(encoding="utf-8")
        if text.count(self.old) != 1:
            sys.exit(f"verdict_check: {self.path} no longer holds {self.old!r} once: update CHANGES")
        target.write_text(text.replace(self.old, self.new), encoding="utf-8")


CHANGES = {
    "wmma": Change("one line of kernels/cuda/wmma_attention.cuh (pr_plants/barrier@1)", "barrier", "1"),
    "triton": Change("one line of kernels/triton/configs.toml (pr_plants/triton_stages@2)", "triton_stages", "2"),
    "torch_3op": Change(
        "torch_3op's MEMORY_SHARE written 0.50 (no work changes)",
        path="kernels/variants/torch_3op.py",
        old="MEMORY_SHARE = 0.5\n",
        new="MEMORY_SHARE = 0.50\n",
    ),
}
# Each change's next pull request: the same line changed again, committed on base (the `next` step).
NEXT = {
    "wmma": replace(
        CHANGES["wmma"], summary="the same line of wmma_attention.cuh (pr_plants/barrier@2)", magnitude="2"
    ),
    "triton": replace(
        CHANGES["triton"], summary="the same line of configs.toml (pr_plants/triton_stages@4)", magnitude="4"
    ),
    "torch_3op": replace(
        CHANGES["torch_3op"],
        summary="torch_3op's MEMORY_SHARE written 0.500 (no work changes)",
        new="MEMORY_SHARE = 0.500\n",
    ),
}


def log(text: str) -> None:
    print(f"verdict_check: {text}", flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--budget-s", type=float, default=560.0, help="wall-clock budget of the whole call (default 560)")
    p.add_argument("--changes", default="wmma,triton", help=f"changes, first one first (of {', '.join(CHANGES)})")
    p.add_argument("--steps", default=",".join(KINDS), help=f"kinds of steps to run (of {', '.join(KINDS)})")
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--shapes", default=None, help="shape set (default: pr on a GPU, cpu on a CPU)")
    p.add_argument("--variants", default=None, help="compare --variants (default: every registered variant)")
    p.add_argument("--dtypes", default=None, help="compare --dtypes (default: the shape set's)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default=None, help="compare --causal")
    p.add_argument("--rounds", type=int, default=None, help="compare --rounds and --min-rounds (default: compare's)")
    p.add_argument("--no-correctness", action="store_true", help="compare --no-correctness (the CPU check's)")
    p.add_argument("--out", default=None, help="output folder (default: $OUT, else verdict-check-out)")
    p.add_argument("--commit", default=None, help="commit measured, for a copy without .git (recorded)")
    return p.parse_args(argv)


# -- the scratch repository ---------------------------------------------------------------------


def build_repo(repo: Path, changes: list[str]) -> dict[str, str]:
    """base, notes (a notes-only head) and one commit per change on base; their SHAs by name."""
    copy_checkout(repo)
    shas = {"base": init_repo(repo, "base: this tree")}
    git(repo, "branch", "base")
    for name in ["notes", *changes, *(f"{c}_next" for c in changes)]:
        git(repo, "checkout", "--quiet", "-b", name, shas["base"])
        if name == "notes":
            (repo / "NOTES.md").write_text("a change no fingerprint sees\n")
            git(repo, "add", "NOTES.md")
        elif name.endswith("_next"):
            NEXT[name.removesuffix("_next")].apply(repo)
        else:
            CHANGES[name].apply(repo)
        shas[name] = commit(repo, f"{name}: one line")
    git(repo, "checkout", "--quiet", shas["base"])
    return shas


# -- steps --------------------------------------------------------------------------------------


def step_env(root: Path, cuda_jit: Path, code: Path = REPO_ROOT) -> dict:
    """The child's environment: every attnwatch cache under `root` (Triton's and CuPy's through
    kernels.compile_cache.tool_cache_env, so none set here), the driver's JIT cache beside it, the
    tree `code` first on PYTHONPATH (scripts/before_after_check.py runs an older one)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "CUPY_CACHE_DIR")}
    env.update(ATTNWATCH_CACHE=str(root), CUDA_CACHE_PATH=str(cuda_jit), PYTHONPATH=str(code))
    cutlass = REPO_ROOT / ".cutlass" / "include"
    if cutlass.is_dir() and not env.get("CUTLASS_INCLUDE_DIR"):
        env["CUTLASS_INCLUDE_DIR"] = str(cutlass)
    return env


def affected_step(name: str, repo: Path, head: str, out: Path, env: dict, timeout_s: float) -> dict:
    path = out / f"{name}.json"
    cmd = [sys.executable, "-m", "attnwatch", "affected", "--base", "base", "--head", head, "--json", str(path)]
    rc, wall = run_logged(cmd, env, timeout_s, out / f"{name}.log", cwd=repo)
    result: dict = {"rc": rc, "wall_s": round(wall, 1)}
    try:
        decision = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        result["error"] = f"no {path.name}: {exc}"
        return result
    result.update(
        gpu=decision["gpu"],
        everything=decision["everything"],
        changed=sorted(decision["changed"]),
        build=decision["build"],
        canary=decision["canary"],
    )
    return result


def compare_step(
    name: str, repo: Path, head: str, args, out: Path, env: dict, timeout_s: float, every: bool, changed: list[str]
) -> dict:
    """One `attnwatch compare --base base --head <head>`; its wall, phases, selection and verdicts.
    A case flagged (regression or improvement) of a variant the change did not change (`changed`,
    else the compare's own "changed" reasons) is a false alarm."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "attnwatch", "compare", "--base", "base", "--head", head]
    cmd += ["--shapes", args.shapes, "--out", str(folder)]
    for flag, value in (("--variants", args.variants), ("--dtypes", args.dtypes), ("--causal", args.causal)):
        if value:
            cmd += [flag, value]
    if args.rounds is not None:
        cmd += ["--rounds", str(args.rounds), "--min-rounds", str(args.rounds)]
    if args.device == "cpu":
        cmd += ["--thresholds", str(cpu_thresholds(out.parent / f"{name}-cpu_thresholds.toml"))]
    if args.no_correctness:
        cmd.append("--no-correctness")
    if every:
        cmd.append("--all")
    rc, wall = run_logged(cmd, env, timeout_s, folder / "compare.log", cwd=repo)
    result: dict = {"rc": rc, "wall_s": round(wall, 1), "head": head}
    try:
        report = json.loads((folder / "compare.json").read_text())
    except (OSError, ValueError) as exc:
        tail = (folder / "compare.log").read_text(errors="replace")[-600:]
        result["error"] = f"no compare.json ({exc}); log tail: {tail.strip()}"
        return result
    selection = report.get("selection") or {}
    measured = {v["variant"]: v["reason"] for v in selection.get("variants", []) if v["measured"]}
    changed = changed or [v for v, why in measured.items() if why.startswith("changed")]
    unchanged_flagged = [
        c["case_id"] for c in report["cases"] if c["verdict"] in FLAGGED and c["variant"] not in changed
    ]
    counts: dict[str, int] = {}
    for case in report["cases"]:
        counts[case["verdict"]] = counts.get(case["verdict"], 0) + 1
    result.update(
        phases_s={k: round(v, 1) for k, v in (report.get("times") or {}).items()},
        measured=sorted(measured),
        changed=sorted(changed),
        not_measured=len(selection.get("variants", [])) - len(measured),
        everything=selection.get("everything"),
        canary=selection.get("canary"),
        verdict_counts=counts,
        verdicts={c["case_id"]: c["verdict"] for c in report["cases"]},
        ratios={c["case_id"]: c["ratio"] for c in report["cases"]},
        false_alarms=unchanged_flagged,
        by_variant=splits_by_variant(folder / "session.json"),
    )
    return result


def splits_by_variant(session_path: Path) -> dict:
    """Each side's build and warm-up seconds by variant, as the compare's session.json records them."""
    try:
        sides = json.loads(session_path.read_text())["sides"]
    except (OSError, ValueError, KeyError):
        return {}
    splits = ("build_by_variant", "warmup_by_variant")
    return {name: {k: side["times"].get(k, {}) for k in splits} for name, side in sides.items()}


def agreement(selective: dict[str, dict], everything: dict) -> dict:
    """Per selective compare, the --all verdicts of the cases it judged: equal, or which differ."""
    out = {}
    for name, result in selective.items():
        if "verdicts" not in result or "verdicts" not in everything:
            continue
        differ = {
            case: [verdict, everything["verdicts"].get(case)]
            for case, verdict in result["verdicts"].items()
            if everything["verdicts"].get(case) != verdict
        }
        out[name] = {"cases": len(result["verdicts"]), "same": not differ, "differ": differ}
    return out


def reference_cache_step(args, out: Path, env: dict, timeout_s: float) -> dict:
    path = out / "reference_cache.json"
    cmd = [sys.executable, str(REPO_ROOT / "scripts" / "reference_cache_check.py"), "--shapes", args.shapes]
    cmd += ["--repeats", "5" if args.device == "cuda" else "1", "--out", str(path)]
    rc, wall = run_logged(cmd, env, timeout_s, out / "reference_cache.log")
    result: dict = {"rc": rc, "wall_s": round(wall, 1)}
    if path.is_file():
        summary = json.loads(path.read_text())
        result.update({k: v for k, v in summary.items() if k != "cases"}, cases=len(summary["cases"]))
    else:
        result["error"] = (out / "reference_cache.log").read_text(errors="replace")[-400:]
    return result


def plan(changes: list[str]) -> list[tuple[str, str, str | None]]:
    """(step, kind, change) in order of value (module doc)."""
    first, rest = changes[0], changes[1:]
    steps = [(f"affected_{c}", "affected", c) for c in changes]
    steps += [(f"{first}_{k}", k, first) for k in ("empty", "warm", "next", "restored")]
    steps += [("aa_1", "aa", None), ("aa_2", "aa", None), (f"{first}_all", "all", first)]
    steps += [(f"{c}_{k}", k, c) for c in rest for k in ("empty", "warm", "restored")]
    steps += [("reference_cache", "reference_cache", None)]
    return steps


def main(argv=None) -> int:
    args = parse_args(argv)
    budget = Budget(args.budget_s - KEEP_FOR_CACHE_S)
    args.device = resolve_device(args.device)
    args.shapes = args.shapes or ("pr" if args.device == "cuda" else "cpu")
    changes = [c for c in args.changes.split(",") if c]
    kinds = {k for k in args.steps.split(",") if k}
    unknown = sorted(set(changes) - set(CHANGES)) + sorted(kinds - set(KINDS))
    if unknown or not changes:
        print(
            f"verdict_check: unknown or no changes/steps {unknown}; changes: {', '.join(CHANGES)}; steps: {', '.join(KINDS)}"
        )
        return 2
    out = Path(args.out or os.environ.get("OUT") or "verdict-check-out").resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="attnwatch-verdict-check-"))
    repo, caches = work / "repo", work / "caches"
    repo.mkdir()
    caches.mkdir(mode=0o700)
    shas = build_repo(repo, changes)
    from attnwatch.ci.environment import capture_git

    report: dict = {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": args.device,
        "commit": args.commit or capture_git(REPO_ROOT).sha,
        "shapes": args.shapes,
        "variants": args.variants or "all",
        "budget_s": args.budget_s,
        "changes": {c: CHANGES[c].summary for c in changes},
        "targets_s": TARGETS,
        "fresh_means": "empty cache folders (ATTNWATCH_CACHE, CUDA_CACHE_PATH); page cache and driver stay warm",
        "steps": {},
    }
    roots: dict[str, Path] = {}
    tars: dict[str, Path] = {}

    def save() -> None:
        (out / "verdict_check.json").write_text(json.dumps(report, indent=1, default=str))

    for name, kind, change in plan(changes):
        need = NEED_REFERENCE_CACHE if kind == "reference_cache" else NEED[args.device][kind]
        timeout = min(MOST.get(kind, 120.0), budget.left())
        root_name = change if kind in ("empty", *ON_ROOT) else changes[0]
        if kind not in kinds:
            why = "not asked for (--steps)"
        elif kind in ON_ROOT and root_name not in roots:
            why = f"{change}_empty did not run, so there is no cache root to reuse or restore"
        elif kind == "restored" and root_name not in tars:
            why = f"{change}_empty wrote no compare.json, so its cache root was not packed"
        elif timeout < need:
            why = f"{budget.left():.0f} s of the budget left, this step needs at least {need:.0f} s"
        else:
            why = None
        if why:
            report["steps"][name] = {"skipped": why}
            log(f"{name}: skipped ({why})")
            save()
            continue
        log(f"{name}: starting (up to {timeout:.0f} s)")
        head = shas[f"{change}_next" if kind == "next" else change] if change else None
        if kind == "affected":
            env = step_env(caches / "affected", caches / "affected-cuda-jit")
            result = affected_step(name, repo, change or "", out, env, timeout)
        elif kind == "reference_cache":
            result = reference_cache_step(args, out, step_env(caches / name, caches / f"{name}-cuda-jit"), timeout)
        else:
            extra: dict = {}
            if kind == "empty":
                roots[root_name] = caches / f"{root_name}-root"
                roots[root_name].mkdir(mode=0o700)
            elif kind == "restored":  # at the same path: Triton's entries name their files by absolute path
                extra = unpack(
                    tars[root_name], roots[root_name], step_env(roots[root_name], caches / "jit"), out / name
                )
            if kind == "aa" and root_name not in roots:  # the first change's empty step did not run
                roots[root_name] = caches / f"{root_name}-root"
                roots[root_name].mkdir(mode=0o700)
            root = roots[root_name]
            jit = caches / (f"{name}-cuda-jit" if kind == "restored" else f"{root_name}-cuda-jit")
            head_sha = {"aa_1": shas["base"], "aa_2": shas["notes"]}.get(name, head)
            # what the change changed, by the source fingerprints (--all's selection names no change)
            changed = None if kind == "aa" else report["steps"].get(f"affected_{change}", {}).get("changed")
            env = step_env(root, jit)
            result = compare_step(name, repo, head_sha, args, out, env, timeout, kind == "all", changed or [])
            result.update(extra, cache_root_mib=du_by_folder(root))
            if kind == "empty" and "phases_s" in result:  # a root the compare filled, as a workflow saves it
                result.update(pack(root, caches / f"{root_name}.tar", env, out / name))
                tars[root_name] = caches / f"{root_name}.tar"
            if "phases_s" in result and kind in TARGETS:
                result["target_s"] = TARGETS[kind]
        report["steps"][name] = result
        log(f"{name}: {json.dumps({k: v for k, v in result.items() if k not in ('verdicts', 'ratios')})[:500]}")
        save()
    first = changes[0]
    if "verdicts" in report["steps"].get(f"{first}_all", {}):
        selective = {k: report["steps"][k] for k in (f"{first}_{s}" for s in ("empty", "warm", "restored"))}
        report["all_agrees"] = agreement(selective, report["steps"][f"{first}_all"])
    report["steps"]["cache"] = cache_step(roots, out, step_env(caches / "affected", caches / "affected-cuda-jit"))
    report["false_alarms"] = {
        name: len(r["false_alarms"]) for name, r in report["steps"].items() if "false_alarms" in r
    }
    report["seconds"] = round(args.budget_s - KEEP_FOR_CACHE_S - budget.left(), 1)
    save()
    print_table(report)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def print_table(report: dict) -> None:
    print(f"\n{'step':<18} {'rc':>4} {'wall s':>7} {'target':>6}  verdicts / note")
    for name, r in report["steps"].items():
        if name == "cache":
            continue
        if "skipped" in r:
            print(f"{name:<18} {'-':>4} {'-':>7} {'-':>6}  skipped: {r['skipped']}")
            continue
        target = f"{r['target_s']:.0f}" if "target_s" in r else "-"
        if "verdict_counts" in r:
            note = f"{r['verdict_counts']}; measured {','.join(r['measured'])}; false alarms {len(r['false_alarms'])}"
            phases = ", ".join(f"{k[:-2]} {v}" for k, v in r["phases_s"].items() if k != "wall_s" and v >= 0.05)
            note += f"\n{'':<40}{phases}"
            if "unpack_s" in r:
                note += f"; unpacking the root {r['unpack_s']} s, checking it {r['verify_s']} s"
            if "pack_s" in r:
                note += f"; sealing the root {r['seal_s']} s, packing it {r['pack_s']} s ({r['tar_mib']} MiB)"
        elif "changed" in r and "build" in r:
            note = f"changed {r['changed']}, build {r['build']}, everything: {r['everything']}"
        else:
            note = r.get("error", "") or ", ".join(f"{k} {v}" for k, v in r.items() if k not in ("rc", "wall_s"))
        print(f"{name:<18} {r.get('rc', '-'):>4} {r.get('wall_s', '-'):>7} {target:>6}  {note[:400]}")
    for name, agree in (report.get("all_agrees") or {}).items():
        print(
            f"--all vs {name}: {'same verdicts' if agree['same'] else 'differ: ' + json.dumps(agree['differ'])[:300]}"
        )
    for name, sizes in report["steps"]["cache"]["roots_mib"].items():
        print(
            f"cache root {name}: {sizes.get('total', 0)} MiB "
            + json.dumps({k: v for k, v in sizes.items() if k != "total"})
        )
    print(f"false alarms {report['false_alarms']}; total {report['seconds']} s of {report['budget_s']:.0f}")


if __name__ == "__main__":
    sys.exit(main())
