"""The Nsight Compute check for a GPU machine: what profiling costs, and whether the rules explain.

In one call, on the fp16 non-causal cases `attnwatch ncu --shapes pr|main` would profile:

1. the cold pass (builds land in the compile cache) and one case alone (the fixed cost: ncu
   start-up, torch import under the profiler, a cached build);
2. the default sections (ci/ncu/metrics.toml) over the pr set: per case = wall / cases;
3. planted regressions: each patch in scripts/ncu_plants/ applied to a temporary copy of
   `kernels/` (never to this checkout), the planted variant's cases profiled and compared with
   step 2's unpatched profile, and the ranked explanation checked against the rule the plant
   should hit (EXPECTED below);
4. an A/A: the default sections over the pr set again; every rule of
   history/analysis/ncu_rules.toml that fires between two profiles of one build is a false
   explanation;
5. cost per section on the pr set's first shape: "core" alone, then "core" plus each other
   section (a section's own cost per case is its run's wall minus the core-only run's, over
   the cases), then the default list over the main set, as the budget allows.

Writes under --out (default $OUT): ncu_check.json (every figure), ncu_check.log,
pr_default_raw.csv (the default list's real CSV over the pr set, for tests/data/ncu), and
plants_raw.tar.gz (each plant's base and head CSVs); prints a short table last.

Run from the repository root:  PYTHONPATH=. python3 scripts/ncu_check.py --budget-s 520
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
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


def counters(profile, case_id: str) -> dict[str, float]:
    from attnwatch.history.analysis.ncu_explain import combine_kernels

    return combine_kernels(r.metrics for r in profile.kernel_rows if r.case_id == case_id)


def run(label: str, cases, sections, log, **kwargs):
    from attnwatch.ci.ncu.profile import profile_cases

    with tempfile.TemporaryDirectory() as work:
        profile = profile_cases(cases, Path(work), sections=sections, gpu_name=GPU, **kwargs)
    ok = len(cases) - len(profile.errors)
    row = {"label": label, "sections": list(sections or ()), "cases": len(cases), "profiled": ok,
           "wall_s": round(profile.seconds, 2), "per_case_s": round(profile.seconds / max(1, len(cases)), 3),
           "errors": dict(list(profile.errors.items())[:5])}
    log(f"{label}: {ok}/{len(cases)} profiled in {profile.seconds:.1f} s ({row['per_case_s']:.3f} s/case)"
        + (f"; errors e.g. {next(iter(profile.errors.values()))[:300]}" if profile.errors else ""))
    return profile, row


def main(argv: list[str] | None = None) -> int:
    global GPU
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "ncu-check-out"))
    p.add_argument("--budget-s", type=float, default=520.0, help="skip steps that would start after this")
    p.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse here)")
    p.add_argument("--skip", default="", help="comma-separated steps to skip: sections,aa,plants,main")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    skip = set(filter(None, args.skip.split(",")))
    log_file = open(out / "ncu_check.log", "w", encoding="utf-8")

    def log(message: str) -> None:
        line = f"[{time.monotonic() - started:6.1f}s] {message}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    import torch

    from attnwatch.ci.commands.ncu import select_cases
    from attnwatch.ci.ncu.metrics import choose_sections
    from attnwatch.ci.ncu.profile import find_ncu, ncu_version
    from attnwatch.history.analysis.ncu_explain import explain

    GPU = torch.cuda.get_device_name(0)
    ncu = find_ncu()
    result = {"gpu": GPU, "ncu": ncu_version(ncu) if ncu else None, "torch": torch.__version__,
              "commit": args.commit or _commit(), "runs": [], "aa": {}, "plants": []}
    log(f"{GPU}, {result['ncu']}, torch {torch.__version__}")
    ns = lambda shapes: argparse.Namespace(shapes=shapes, variants="", dtypes="fp16", causal="no", cases=[])  # noqa: E731
    pr, main_set = select_cases(ns("pr")), select_cases(ns("main"))
    default = choose_sections(None)
    log(f"pr set: {len(pr)} cases; main set: {len(main_set)} cases; default sections {','.join(default)}")
    fits = lambda need: time.monotonic() - started + need < args.budget_s  # noqa: E731

    def save():
        (out / "ncu_check.json").write_text(json.dumps(result, indent=1), encoding="utf-8")

    # Cold: builds land in the cache (not a per-case figure), then the fixed cost of one case.
    _, row = run("cold core pr (builds)", pr, ("core",), log)
    result["runs"].append(row)
    _, row = run("core, one case (fixed cost)", pr[:1], ("core",), log)
    result["runs"].append(row)
    save()

    base_default = None
    if fits(40):
        base_default, row = run("pr default", pr, default, log)
        result["runs"].append(row)
        (out / "pr_default_raw.csv").write_text(base_default.raw_csv, encoding="utf-8")
        save()
    if "plants" not in skip and base_default is not None:
        result["plants"] = plants(pr, base_default, default, explain, log, fits, out)
        save()
    if "aa" not in skip and base_default is not None and fits(40):
        again, row = run("pr default again (A/A)", pr, default, log)
        result["runs"].append(row)
        result["aa"] = aa(base_default, again, pr, explain)
        log(f"A/A: {result['aa']['fired']} rule firings over {result['aa']['checked']} case-directions")
        save()
    if "sections" not in skip:
        # Per-section cost on the pr set's first shape (half the cases), to fit a short lease.
        half = [c for c in pr if c.shape.id == pr[0].shape.id]
        for extra in (None, "throughput", "memory", "occupancy", "tensor", "stalls"):
            chosen = ("core",) if extra is None else ("core", extra)
            if not fits(25):
                log(f"budget: skipped {chosen}")
                continue
            _, row = run(f"pr {pr[0].shape.id} {'+'.join(chosen)}", half, chosen, log)
            result["runs"].append(row)
            save()
    if "main" not in skip and fits(90):
        _, row = run("main default", main_set, default, log)
        result["runs"].append(row)
        save()
    table(result, log)
    save()
    return 0


def aa(first, second, cases, explain) -> dict:
    """Rules that fire between two profiles of one build, both ways (each a false explanation)."""
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


def plants(pr, base, default, explain, log, fits, out: Path) -> list[dict]:
    """Each plant's cases against `base` (the unpatched default-list profile of the same cases)."""
    rows = []
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for name, (variant, expected) in EXPECTED.items():
            cases = [c for c in pr if c.variant == variant]
            if not cases or not fits(30):
                log(f"plant {name}: skipped ({'no cases' if not cases else 'budget'})")
                continue
            with tempfile.TemporaryDirectory() as tmp:  # a copy of kernels/, patched
                root = Path(tmp)
                shutil.copytree(REPO / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
                apply_patch(PLANTS / f"{name}.patch", root)
                head, row = run(f"plant {name}", cases, default, log, kernels_root=root)
            _add(tar, f"{name}.csv", head.raw_csv)
            for case in cases:
                b, h = counters(base, case.id), counters(head, case.id)
                if not b or not h:
                    rows.append({"plant": name, "case": case.id, "error": head.errors.get(case.id) or base.errors.get(case.id)})
                    continue
                db, dh = b.get("gpu__time_duration.sum"), h.get("gpu__time_duration.sum")
                verdict = explain(b, h, slower=dh > db)
                top = verdict.changes[0].rule if verdict.changes else None
                rows.append({"plant": name, "case": case.id, "duration_ns": [db, dh], "slower": dh > db,
                             "cause": verdict.cause, "top": top, "expected": sorted(expected),
                             "right": top in expected,
                             "ranked": [[c.rule, c.base, c.head, round(c.change, 4), round(c.score, 2)] for c in verdict.changes]})
                log(f"plant {name} {case.id}: {db / 1e3:.1f} -> {dh / 1e3:.1f} us; top {top} "
                    f"({'right' if top in expected else 'WRONG'}); {verdict.cause}")
    (out / "plants_raw.tar.gz").write_bytes(archive.getvalue())
    return rows


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def table(result: dict, log) -> None:
    log("run                                   cases  wall_s  s/case")
    for r in result["runs"]:
        log(f"{r['label'][:38]:<38} {r['profiled']:>3}/{r['cases']:<3} {r['wall_s']:>6.1f}  {r['per_case_s']:.3f}")
    for r in result["plants"]:
        if "error" in r:
            log(f"plant {r['plant']:<12} {r['case'][:40]:<40} error {r['error'][:80]}")
        else:
            log(f"plant {r['plant']:<12} {r['case'][:40]:<40} {r['duration_ns'][0] / 1e3:7.1f} -> {r['duration_ns'][1] / 1e3:7.1f} us "
                f"top {r['top']} {'ok' if r['right'] else 'WRONG'}")
    if result["aa"]:
        log(f"A/A false firings: {result['aa']['fired']} of {result['aa']['checked']} case-directions")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


GPU = None

if __name__ == "__main__":
    sys.exit(main())
