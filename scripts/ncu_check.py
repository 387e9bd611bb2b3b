"""The Nsight Compute cost check for a GPU machine: what profiling costs, per part, and whether
the rules still explain.

In one call (each step only when the budget, --budget-s, still fits an estimate of it), on the
fp16 cases `attnwatch ncu --shapes pr|main` would profile:

1. the fixed start, in parts: the target (ci.ncu.target) over an empty plan without ncu (torch
   and kernels imported), the same under ncu (ncu's start-up and injection added: the fixed cost
   of every ncu process, `fixed` below), then `core` over the pr set cold (every variant built
   into the compile cache: not a per-case figure);
2. the default list (ci/ncu/metrics.toml's default sections: one replay pass, what every chosen
   case gets) and the explain list (with the sections a judged case's explanation needs: every
   counter a rule reads) over the pr set and the main set, non-causal;
3. each section alone over the pr set, with ncu's replay passes per kernel;
4. the default list over the pr set with `--cache-control none` (what the flush costs), every
   section (`all`), and the pr and main sets causal;
5. the replay passes of each metric alone: ncu over a one-kernel CUDA program (built with nvcc;
   skipped without it): which metrics need extra passes;
6. with `--with plants,aa`: each patch of scripts/ncu_plants/ applied to a copy of `kernels/`
   and explained against the unpatched explain-list profile (EXPECTED: the rule it should hit), and
   an A/A (every rule that fires between two profiles of one build is a false explanation).

Per case = (wall - fixed) / cases, and wall / cases; both are printed. Writes under --out
(default $OUT): ncu_check.json (every figure), ncu_check.log, pr_explain_raw.csv (the explain
list's CSV over the pr set, for tests/data/ncu), plants_raw.tar.gz with --with plants; prints a
short table last. `--device cpu` runs every step against whatever `ncu` is configured
(ATTNWATCH_NCU: tests/stand_in_ncu.py) with two variants, so a typo cannot waste a GPU call.

Run from the repository root:  PYTHONPATH=. python3 scripts/ncu_check.py --budget-s 520
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLANTS = REPO / "scripts" / "ncu_plants"
# plant -> (variant it changes, the rules that name its cause)
EXPECTED = {
    "barrier": ("cuda_wmma", {"barrier_stalls"}),
    "spills": ("cuda_wmma", {"spills"}),
    "shared_mem": ("cuda_wmma", {"occupancy_shared_mem"}),
    "global_loads": ("cuda_wmma", {"global_traffic", "l2_traffic", "dram_traffic"}),
}
CPU_VARIANTS = "sdpa,torch_3op"  # --device cpu: cases selected without asking for a GPU


class Check:
    """The run's clock, log, budget and result document."""

    def __init__(self, out: Path, budget_s: float, gpu: str | None):
        self.out, self.budget_s, self.gpu = out, budget_s, gpu
        self.started = time.monotonic()
        self.log_file = open(out / "ncu_check.log", "w", encoding="utf-8")
        self.result: dict = {"gpu": gpu, "runs": [], "fixed": {}, "metric_passes": [], "aa": {}, "plants": []}
        self.per_case_s = 1.0  # estimate until a default-list run measured it

    def log(self, message: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {message}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def fits(self, cases: int, label: str) -> bool:
        """Whether a run of `cases` cases should fit what is left (fixed start + measured per case)."""
        need = self.result["fixed"].get("under_ncu_s", 15.0) + 3.0 + cases * self.per_case_s
        if need < self.left():
            return True
        self.log(f"budget: skipped {label} (needs ~{need:.0f} s, {self.left():.0f} s left)")
        return False

    def save(self) -> None:
        (self.out / "ncu_check.json").write_text(json.dumps(self.result, indent=1), encoding="utf-8")

    def run(self, label: str, cases, sections, **kwargs):
        """One profile_cases call: its wall, per-case figures and replay passes, as a row."""
        from attnwatch.ci.ncu.profile import profile_cases

        deadline = self.started + self.budget_s
        with tempfile.TemporaryDirectory() as work:
            profile = profile_cases(
                cases, Path(work), sections=sections, gpu_name=self.gpu, deadline=deadline, **kwargs
            )
        fixed = self.result["fixed"].get("under_ncu_s")
        row = {
            "label": label,
            "sections": list(sections or ("full",)),
            "cache_control": kwargs.get("cache_control") or "metrics.toml",
            "cases": len(cases),
            "profiled": len(cases) - len(profile.errors),
            "wall_s": round(profile.seconds, 2),
            "wall_per_case_s": round(profile.seconds / max(1, len(cases)), 3),
            "per_case_s": None if fixed is None else round((profile.seconds - fixed) / max(1, len(cases)), 3),
            "kernels": len(profile.kernel_rows),
            "passes": _spread(profile.passes),
            # kernels profiled per case -> cases: each case's one call, once (torch_3op: 3, causal 4)
            "kernels_per_case": dict(sorted(Counter(str(m.kernel_count) for m in profile.case_metrics).items())),
            "errors": dict(list(profile.errors.items())[:5]),
            # where a case's seconds go: the target's stages per case (summed over cases, then
            # divided by the cases that reported them) and the report's import per case
            "phases_per_case_s": phase_means(profile.phases),
            "phases_by_case": profile.phases,  # which variants' prepare or clean-up cost the most
            "import_per_case_s": round(profile.import_seconds / max(1, len(cases)), 3),
        }
        self.log(
            f"{label}: {row['profiled']}/{len(cases)} profiled in {profile.seconds:.1f} s, "
            f"{row['wall_per_case_s']:.3f} s/case (over the fixed: {row['per_case_s']}), "
            f"{row['kernels']} kernels, passes {row['passes']}; per case: {row['phases_per_case_s']}, "
            f"import {row['import_per_case_s']} s"
            + (f"; errors e.g. {next(iter(profile.errors.values()))[:300]}" if profile.errors else "")
        )
        self.result["runs"].append(row)
        self.save()
        return profile, row


def phase_means(phases: dict[str, dict[str, float]]) -> dict[str, float]:
    """The mean seconds per case of each target stage (ci/ncu/target.py), over the cases reporting it."""
    names = sorted({name for stages in phases.values() for name in stages})
    return {
        name: round(statistics.fmean(stages[name] for stages in phases.values() if name in stages), 3) for name in names
    }


def _spread(values: list[int]) -> dict | None:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)} if values else None


def fixed_start(check: Check, ncu: str) -> None:
    """The target over an empty plan, without ncu and under it (module doc, step 1)."""
    from attnwatch.ci.child_env import child_env
    from attnwatch.ci.ncu.profile import ncu_command

    with tempfile.TemporaryDirectory() as scratch:
        plan = Path(scratch) / "plan.json"
        plan.write_text(json.dumps({"stop_at": None, "cases": []}), encoding="utf-8")
        env = child_env(Path(scratch), None)
        target = [sys.executable, "-m", "attnwatch.ci.ncu.target", str(plan)]
        under = ncu_command(ncu, Path(scratch) / "report", ("core",), plan)
        for key, command in (("import_only_s", target), ("under_ncu_s", under)):
            began = time.monotonic()
            try:
                done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, timeout=300)
            except subprocess.TimeoutExpired:
                check.log(f"fixed start {key}: still running after 300 s, killed")
                continue
            check.result["fixed"][key] = round(time.monotonic() - began, 2)
            if done.returncode != 0:
                check.log(f"fixed start {key}: exit {done.returncode}: {(done.stdout + done.stderr)[-300:]}")
    fixed = check.result["fixed"]
    check.log(
        f"fixed start: target over an empty plan {fixed.get('import_only_s')} s without ncu, "
        f"{fixed.get('under_ncu_s')} s under ncu"
    )
    check.save()


def metric_passes(check: Check, ncu: str) -> None:
    """Each listed metric alone over a one-kernel CUDA program: the replay passes it needs (step 5;
    scripts/ncu_passes.py asks the same of whole lists)."""
    from attnwatch.ci.ncu.metrics import metric_specs
    from ncu_passes import build_probe, passes_of

    with tempfile.TemporaryDirectory() as scratch:
        binary, why = build_probe(Path(scratch))
        if binary is None:
            check.log(f"metric passes: skipped ({why})")
            return
        for spec in metric_specs():
            if check.left() < 10:
                check.log("budget: metric passes stopped")
                break
            answer = passes_of(ncu, binary, [spec.metric], timeout_s=max(5.0, min(120.0, check.left())))
            if answer["error"] == "timed out":
                check.log(f"metric passes: {spec.metric} timed out; stopped")
                break
            check.result["metric_passes"].append(
                {"metric": spec.metric, "section": spec.section, "passes": answer["passes"], "wall_s": answer["wall_s"]}
            )
    check.log("metric passes: " + ", ".join(f"{r['metric']}={r['passes']}" for r in check.result["metric_passes"]))
    check.save()


def counters(profile, case_id: str) -> dict[str, float]:
    from attnwatch.history.analysis.ncu_explain import combine_kernels

    return combine_kernels(r.metrics for r in profile.kernel_rows if r.case_id == case_id)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "ncu-check-out"))
    p.add_argument("--budget-s", type=float, default=520.0, help="skip steps that would not end by then")
    p.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse here)")
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu: a smoke run against the configured ncu (tests/stand_in_ncu.py), two variants",
    )
    p.add_argument("--skip", default="", help="comma-separated steps to skip: sections,main,variants,metrics")
    p.add_argument("--with", dest="extra", default="", help="comma-separated extra steps: plants,aa")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    skip, extra = set(filter(None, args.skip.split(","))), set(filter(None, args.extra.split(",")))

    import torch

    from attnwatch.cli.commands.ncu import select_cases
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections, sections
    from attnwatch.ci.ncu.profile import find_ncu, ncu_version

    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    check = Check(out, args.budget_s, gpu)
    ncu = find_ncu()
    if ncu is None:
        sys.exit("ncu_check: ncu not found (not on PATH; set ATTNWATCH_NCU)")
    check.result.update(
        {
            "ncu": ncu_version(ncu),
            "torch": torch.__version__,
            "commit": args.commit or _commit(),
            "budget_s": args.budget_s,
            "device": args.device,
        }
    )
    check.log(f"{gpu or 'cpu (smoke)'}, {check.result['ncu']}, torch {torch.__version__}")
    variants = CPU_VARIANTS if args.device == "cpu" else ""

    def chosen(shapes: str, causal: str):
        return select_cases(
            argparse.Namespace(shapes=shapes, variants=variants, dtypes="fp16", causal=causal, cases=[])
        )

    pr, main_set = chosen("pr", "no"), chosen("main", "no")
    default, explain = choose_sections(None), choose_sections(EXPLAIN)
    check.log(
        f"pr set: {len(pr)} cases; main set: {len(main_set)} cases; default sections {','.join(default)}; "
        f"explain sections {','.join(explain)}"
    )

    fixed_start(check, ncu)
    check.run("core, pr, cold (builds)", pr, ("core",))
    _, row = check.run("default, pr", pr, default)
    base_explain, _ = check.run("explain, pr", pr, explain)
    (out / "pr_explain_raw.csv").write_text(base_explain.raw_csv, encoding="utf-8")
    if row["per_case_s"] is not None and row["profiled"]:
        check.per_case_s = max(0.05, row["per_case_s"])
    if "main" not in skip and check.fits(len(main_set), "default, main"):
        check.run("default, main", main_set, default)
        if check.fits(len(main_set), "explain, main"):
            check.run("explain, main", main_set, explain)
    if "sections" not in skip:
        for section in sections():
            if check.fits(len(pr), f"{section.name} alone"):
                check.run(f"{section.name} alone, pr", pr, (section.name,))
    if "variants" not in skip:
        for label, cases, chosen_sections, kwargs in (
            ("default, pr, --cache-control none", pr, default, {"cache_control": "none"}),
            ("all sections, pr", pr, tuple(s.name for s in sections()), {}),
            ("default, pr, causal", chosen("pr", "yes"), default, {}),
            ("default, main, causal", chosen("main", "yes"), default, {}),
        ):
            if check.fits(len(cases), label):
                check.run(label, cases, chosen_sections, **kwargs)
    if "metrics" not in skip and check.left() > 30:
        metric_passes(check, ncu) if args.device == "cuda" else check.log("metric passes: skipped on cpu")
    if "plants" in extra:
        check.result["plants"] = plants(check, pr, base_explain, explain)
    if "aa" in extra and check.fits(len(pr), "A/A"):
        again, _ = check.run("explain, pr, again (A/A)", pr, explain)
        check.result["aa"] = aa(base_explain, again, pr)
        check.log(
            f"A/A: {check.result['aa']['fired']} rule firings over {check.result['aa']['checked']} case-directions"
        )
    table(check)
    check.save()
    return 0


def aa(first, second, cases) -> dict:
    """Rules that fire between two profiles of one build, both ways (each a false explanation)."""
    from attnwatch.history.analysis.ncu_explain import explain

    fired, checked, examples = 0, 0, []
    for case in cases:
        a, b = counters(first, case.id), counters(second, case.id)
        if not a or not b:
            continue
        for slower in (True, False):
            checked += 1
            changes = explain(a, b, slower).changes
            fired += len(changes)
            examples += [f"{case.id} {'slower' if slower else 'faster'}: {c.rule} {c.change:+.1%}" for c in changes]
    return {"checked": checked, "fired": fired, "examples": examples[:40]}


def apply_patch(patch: Path, root: Path) -> None:
    """Apply a unified diff whose hunks are exact (ours): each hunk's old text replaced once."""
    text = patch.read_text(encoding="utf-8")
    for block in re.split(r"^--- a/", text, flags=re.MULTILINE)[1:]:
        header, _, body = block.partition("\n")
        target = root / header.strip()
        content = target.read_text(encoding="utf-8")
        for hunk in re.split(r"^@@[^\n]*@@\n", body.split("\n", 1)[1], flags=re.MULTILINE)[1:]:
            old, new = [], []
            for line in hunk.splitlines():
                tag, rest = line[:1], line[1:]
                if tag in (" ", "-"):
                    old.append(rest)
                if tag in (" ", "+"):
                    new.append(rest)
            before, after = "\n".join(old) + "\n", "\n".join(new) + "\n"
            if content.count(before) != 1:
                raise SystemExit(f"{patch.name}: a hunk does not match {header.strip()} exactly once")
            content = content.replace(before, after)
        target.write_text(content, encoding="utf-8")


def plants(check: Check, pr, base, explain) -> list[dict]:
    """Each plant's cases against `base` (the unpatched explain-list profile of the same cases)."""
    from attnwatch.history.analysis.ncu_explain import explain

    rows = []
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, (variant, expected) in EXPECTED.items():
            cases = [c for c in pr if c.variant == variant]
            if not cases or not check.fits(len(cases), f"plant {name}"):
                continue
            with tempfile.TemporaryDirectory() as tmp:  # a copy of kernels/, patched
                root = Path(tmp)
                shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
                apply_patch(PLANTS / f"{name}.patch", root)
                head, _ = check.run(f"plant {name}", cases, explain, kernels_root=root)
            _add(tar, f"{name}.csv", head.raw_csv)
            for case in cases:
                b, h = counters(base, case.id), counters(head, case.id)
                if not b or not h:
                    rows.append(
                        {"plant": name, "case": case.id, "error": head.errors.get(case.id) or base.errors.get(case.id)}
                    )
                    continue
                db, dh = b.get("gpu__time_duration.sum"), h.get("gpu__time_duration.sum")
                verdict = explain(b, h, slower=dh > db)
                top = verdict.changes[0].rule if verdict.changes else None
                rows.append(
                    {
                        "plant": name,
                        "case": case.id,
                        "duration_ns": [db, dh],
                        "top": top,
                        "expected": sorted(expected),
                        "right": top in expected,
                        "cause": verdict.cause,
                    }
                )
                check.log(
                    f"plant {name} {case.id}: {db / 1e3:.1f} -> {dh / 1e3:.1f} us; top {top} "
                    f"({'right' if top in expected else 'WRONG'})"
                )
    (check.out / "plants_raw.tar.gz").write_bytes(archive.getvalue())
    return rows


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def table(check: Check) -> None:
    """The short table printed last: per run, cases, passes, wall, and both per-case figures."""
    result = check.result
    fixed = result["fixed"]
    check.log(
        f"fixed start: {fixed.get('under_ncu_s')} s under ncu ({fixed.get('import_only_s')} s of it the "
        f"target's imports without ncu); per case = (wall - fixed) / cases"
    )
    check.log(
        f"{'run':<40} {'cases':>7} {'passes':>7} {'wall_s':>7} {'s/case':>7} {'wall/case':>9}"
        f" {'prep':>6} {'warm':>6} {'prof':>6} {'gc':>6} {'free':>6} {'import':>6}"
    )
    for r in result["runs"]:
        passes = r["passes"]
        spread = (
            "-"
            if passes is None
            else (f"{passes['min']}" if passes["min"] == passes["max"] else f"{passes['min']}-{passes['max']}")
        )
        per_case = "-" if r["per_case_s"] is None else f"{r['per_case_s']:.3f}"
        stages = r.get("phases_per_case_s") or {}
        parts = " ".join(
            f"{stages[k]:>6.3f}" if k in stages else f"{'-':>6}"
            for k in ("prepare_s", "warmup_s", "profiled_s", "gc_s", "free_s")
        )
        check.log(
            f"{r['label'][:40]:<40} {r['profiled']:>3}/{r['cases']:<3} {spread:>7} {r['wall_s']:>7.1f} "
            f"{per_case:>7} {r['wall_per_case_s']:>9.3f} {parts} {r.get('import_per_case_s', 0.0):>6.3f}"
        )
    more = [r for r in result["metric_passes"] if r["passes"] and r["passes"] > 1]
    if result["metric_passes"]:
        check.log(
            "metrics needing more than one pass alone: "
            + (", ".join(f"{r['metric']} {r['passes']}" for r in more) or "none")
        )
    for r in result["plants"]:
        check.log(
            f"plant {r['plant']:<12} {r['case'][:40]:<40} "
            + (f"error {r['error'][:80]}" if "error" in r else f"top {r['top']} {'ok' if r['right'] else 'WRONG'}")
        )
    if result["aa"]:
        check.log(f"A/A false firings: {result['aa']['fired']} of {result['aa']['checked']} case-directions")


def _commit() -> str:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "unknown"
        )
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
