"""The explanation check for a GPU machine: are the exact counters exact, and does each one-line
pull-request plant get its cause?

In one call, within --budget-s:

1. A/A: the pr cases of the CUDA variants and triton_fa2 profiled twice with the explain list
   (ci/ncu/metrics.toml `explain`: the exact section's per-opcode counts included); per case,
   every exact counter (history/analysis/exact_counters.toml) compared kernel by kernel (each
   difference listed: an exact counter that moved is not exact on that kernel), the noisy
   counters' spreads (written as noise_bands.toml `[[case]]` entries, noise_cases.toml), and the
   explanation read both ways (anything but "unexplained" is a false explanation).
2. Plants: each patch of scripts/pr_plants/ up its ladder of magnitudes (`@N@` in the patch;
   scripts/plant_ladder.py: breadth first over the plants, a plant stopping at the first rung
   whose cases' median realized change is inside 1.5-4% or past it; --magnitudes first: only
   the first rung) committed on a scratch copy of this checkout, and a real
   `python -m attnwatch compare` of it against the unpatched commit over its variants'
   pr cases, in the dtypes of the plant's `Dtypes:` line where it has one (bf16 for a plant
   of a bf16 entry), else the pr set's fp16 (`--ncu changed`: every decided case profiled on
   both sides; the first compare of a variant is cold, --warm repeats it warm). Realized % is
   each case's ratio; the cause is compare.json's. The changed kernels' SASS: the variant's
   cubins of both sides (nvcc variants: kernels.cuda.launch.build, every entry, whatever the
   dtype), diffed by history.analysis.sass_diff; a Triton variant's per case, in its cause
   (one cubin per configuration and shape, never merged by kernel name).

Writes under --out (at most 8 files): explain_check.json (everything), explain_check.log,
aa_raw.tar.gz (both A/A profiles as ncu printed them, for tests/data/ncu), noise_cases.toml,
plants.tar.gz (each plant's compare.json, ncu CSVs and SASS diff); prints each plant's chosen
magnitude ("calibration <plant>: @N (...)", or why none), then a table last: plant, magnitude,
variant, cases, realized % min-max, exact evidence found, cause named.

    PYTHONPATH=. python3 scripts/explain_check.py --out $OUT --budget-s 500          # the H200
    PYTHONPATH=. python3 scripts/explain_check.py --device cpu --smoke --out smoke   # CPU: patches
        apply at every magnitude, and the CUDA plants' sm_90a cubins (local nvcc; the plant's
        first variant) are read and diffed; no profile, no compare
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scratch_checkout import commit, copy_checkout, init_repo, git, resolve_device  # noqa: E402

from attnwatch.ci.compare.binaries import NVCC_VARIANTS, variant_cubins  # noqa: E402
from attnwatch.scripts.script_env import checkout_env  # noqa: E402
from plant_ladder import PLACEHOLDER, Plant, apply_plant, chosen_magnitude, climb, load_plants  # noqa: E402

AA_VARIANTS = ("cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync", "triton_fa2")
COMPARE_MIN_S = 45.0  # a plant's compare is not started with less left than this
# A Triton variant compiles one cubin per configuration and shape: merged by kernel name they would
# read as one binary, so the plant's code change is each case's own diff, in its compare.json cause.
RUNTIME_COMPILED = "compiled per case at run time: each case's own cubin diff leads its cause (compare.json)"


class Check:
    def __init__(self, out: Path, budget_s: float, log_name: str = "explain_check.log") -> None:
        self.out, self.started, self.budget_s = out, time.monotonic(), budget_s
        self.result: dict = {"budget_s": budget_s}
        self.log_file = open(out / log_name, "w", encoding="utf-8")

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def log(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f} s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()


def pr_cases(variants, dtypes: tuple[str, ...] = ()) -> list:
    """The pr shape set's cases of `variants`, in `dtypes` (a plant's Dtypes), else the set's own."""
    from attnwatch.cli.commands.ncu import select_cases

    return select_cases(
        argparse.Namespace(
            shapes="pr", variants=",".join(variants), dtypes=",".join(dtypes) or None, causal="both", cases=[]
        )
    )


def launches_of(profile, case_id: str):
    from attnwatch.history.analysis.kernel_launches import Launch, launch_counters

    return [
        Launch(r.kernel_name, r.metrics.get("gpu__time_duration.sum"), launch_counters(r.metrics))
        for r in profile.kernel_rows
        if r.case_id == case_id
    ]


def aa(check: Check, cases) -> tuple[dict, str]:
    """Two explain-list profiles of one build (module doc, step 1); the noise_cases.toml text."""
    from attnwatch.ci.ncu.metrics import EXPLAIN, choose_sections
    from attnwatch.ci.ncu.profile import profile_cases
    from attnwatch.history.analysis.exact_counters import SHARED_WAVEFRONTS, compare_exact
    from attnwatch.history.analysis.ncu_explain import combine_kernels, explain, load_rules
    from attnwatch.history.analysis.noise_bands import spreads

    sections = choose_sections(EXPLAIN)
    profiles = []
    for attempt in (1, 2):
        deadline = time.monotonic() + max(10.0, check.left() * (0.45 if attempt == 1 else 0.8) - 60)
        profile = profile_cases(cases, check.out.parent / f"aa{attempt}", sections=sections, deadline=deadline)
        check.log(
            f"A/A profile {attempt}: {len(cases)} cases in {profile.seconds:.0f} s, {len(profile.errors)} without metrics"
        )
        profiles.append(profile)
    read = {c for rule in load_rules() for c in rule.counters}
    rows, toml = [], ["# Per-case spreads of two profiles of one build (scripts/explain_check.py A/A).", ""]
    for case in cases:
        a, b = (launches_of(p, case.id) for p in profiles)
        if not a or not b:
            rows.append({"case": case.id, "error": profiles[0].errors.get(case.id) or profiles[1].errors.get(case.id)})
            continue
        moved = compare_exact(a, b)
        ca, cb = (combine_kernels(dict(k.counters) for k in side) for side in (a, b))
        found = [explain(ca, cb, slower, launches=(a, b), case_id=case.id) for slower in (True, False)]
        spread = {k: v for k, v in spreads([ca, cb]).items() if k in read}
        rows.append(
            {
                "case": case.id,
                "exact_identical": not moved,
                "exact_moved": [[m.kernel, m.metric, m.base, m.head] for m in moved],
                "per_opcode_collected": any(
                    n.startswith("sass__inst_executed_per_opcode/") for k in a for n, _ in k.counters
                ),
                "shared_wavefronts": [dict(k.counters).get(SHARED_WAVEFRONTS) for k in a],
                "explained": [f.cause for f in found if f.changes or f.exact],
                "spreads": spread,
            }
        )
        for counter, value in sorted(spread.items()):
            toml += [
                "[[case]]",
                f'case = "{case.id}"',
                f'counter = "{counter}"',
                f"spread = {value:.5f}",
                'source = "scripts/explain_check.py A/A"',
                "",
            ]
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        for index, profile in enumerate(profiles, 1):
            _add(tar, f"aa{index}_raw.csv", profile.raw_csv)
    (check.out / "aa_raw.tar.gz").write_bytes(archive.getvalue())
    ok = [r for r in rows if "error" not in r]
    summary = {
        "cases": len(cases),
        "profiled": len(ok),
        "exact_identical": sum(r["exact_identical"] for r in ok),
        "false_explanations": sum(len(r["explained"]) for r in ok),
        "per_opcode_collected": sum(r["per_opcode_collected"] for r in ok),
        "shared_wavefronts_collected": sum(any(v is not None for v in r["shared_wavefronts"]) for r in ok),
        "seconds": [round(p.seconds, 1) for p in profiles],
        "rows": rows,
    }
    return summary, "\n".join(toml)


def cubins(root: Path, variants, work: Path, device: str) -> list[Path]:
    """The nvcc variants' cubins as `root`'s kernels build them (kernels.cuda.launch.build: on the
    GPU through the usual compile cache, where the compare has just built both sides, a hit; in the
    smoke into a fresh one, for sm_90a)."""
    work.mkdir(parents=True, exist_ok=True)
    extra = {"CUPY_CACHE_DIR": str(work / "cupy")}
    if device == "cpu":
        extra["ATTNWATCH_CACHE"] = str(work / "cache")
    found, why = variant_cubins(root, variants, work, "sm_90a" if device == "cpu" else "", extra)
    if why:
        print(f"explain_check: building {', '.join(variants)} in {root}: {why}", file=sys.stderr)
    return found


def sass_change(base: list[Path], head: list[Path], cache: Path) -> dict:
    """Both sides' kernels by name (a name built twice keeps its last build) and the diff's description."""
    from attnwatch.ci.compare.binaries import read_kernels
    from attnwatch.history.analysis.sass import SassError
    from attnwatch.history.analysis.sass_diff import describe_binaries, diff_binaries

    try:
        sides = [read_kernels(files, cache) for files in (base, head)]
    except SassError as exc:
        return {"error": str(exc)}
    if not sides[0] or not sides[1]:
        return {"error": f"no cubin on {'the base' if not sides[0] else 'the head'} side"}
    diff = diff_binaries(*sides)
    return {
        "changed": diff.changed,
        "describe": describe_binaries(diff),
        "same": diff.same,
        "by_class": {kd.name: kd.by_class for kd in diff.kernels},
        "cubins": [len(base), len(head)],
    }


def compare_command(base: str, head: str, plant: Plant, out: Path) -> list[str]:
    """The `attnwatch compare` of a plant's commit: its variants' pr cases, in its Dtypes where
    the header names them (a plant of a bf16 entry), else the pr set's."""
    dtypes = ["--dtypes", ",".join(plant.dtypes)] if plant.dtypes else []
    return [
        sys.executable,
        "-m",
        "attnwatch",
        "compare",
        "--base",
        base,
        "--head",
        head,
        "--shapes",
        "pr",
        "--variants",
        ",".join(plant.variants),
        *dtypes,
        "--ncu",
        "changed",
        "--out",
        str(out),
    ]


def run_compare(repo: Path, base: str, head: str, plant: Plant, work: Path, timeout_s: float, check: Check) -> dict:
    out = work / "compare"
    cmd = compare_command(base, head, plant, out)
    env = checkout_env()
    started = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout_s)
        rc, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stderr = 124, exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.monotonic() - started
    check.log_file.write(f"===== compare {base[:8]}..{head[:8]}: rc {rc}, {wall:.1f} s\n{stderr}\n")
    result = {"rc": rc, "wall_s": round(wall, 1)}
    if not (out / "compare.json").is_file():
        result["error"] = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        return result
    report = json.loads((out / "compare.json").read_text())
    result["report"] = report
    result["csv"] = {p.parent.name: p.read_text(errors="replace") for p in out.rglob("ncu_raw.csv")}
    return result


def case_rows(report: dict, variants) -> list[dict]:
    from attnwatch.history.analysis.tiers import tier

    rows = []
    for c in report.get("cases", []):
        if c["variant"] not in variants:
            continue
        explanation = c.get("explanation") or {}
        rows.append(
            {
                "case": c["case_id"],
                "verdict": c["verdict"],
                "tier": tier(c["verdict"], c.get("low"), c.get("high")),
                "ratio": c.get("ratio"),
                "cause": explanation.get("cause"),
                "exact": len(explanation.get("exact") or []),
                "top_rule": (explanation.get("changes") or [{}])[0].get("rule"),
            }
        )
    return rows


def plants(check: Check, chosen: list[Plant], device: str, args, tar: tarfile.TarFile) -> list[dict]:
    """Module doc, step 2; on the CPU only the patch and the SASS. With --magnitudes all the
    ladders are climbed breadth first (scripts/plant_ladder.py): every plant's first rung, then
    the next rung of each plant whose rungs all realized below the target, until none climbs."""
    with tempfile.TemporaryDirectory(prefix="attnwatch-explain-check-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        copy_checkout(repo)
        c0 = init_repo(repo, "c0: this tree")
        base_cubins: dict[tuple[str, ...], list[Path]] = {}
        if device == "cpu":  # the smoke builds one variant per plant: its own check, not a measurement
            chosen = [dataclasses.replace(p, variants=p.variants[:1]) for p in chosen]
        return climb(
            chosen,
            args.magnitudes == "first",
            lambda plant, magnitude: rung(check, plant, magnitude, device, args, tar, repo, c0, base_cubins),
            stop=device == "cuda",
        )


def rung(check: Check, plant: Plant, magnitude: str, device: str, args, tar, repo: Path, c0: str, base_cubins) -> dict:
    """One plant at one magnitude: committed on c0, compared (GPU) and its SASS diffed."""
    from attnwatch.history.analysis.tiers import UNDER

    tmp = repo.parent
    label = f"{plant.name}@{magnitude}"
    built_ahead = set(plant.variants) <= set(NVCC_VARIANTS)  # else compiled per case (RUNTIME_COMPILED)
    if check.left() < (COMPARE_MIN_S if device == "cuda" else 5):
        return {"plant": plant.name, "magnitude": magnitude, "skipped": f"{check.left():.0f} s left"}
    git(repo, "checkout", "--quiet", c0)
    if built_ahead and plant.variants not in base_cubins:
        base_cubins[plant.variants] = cubins(
            repo, plant.variants, tmp / "sass" / "base" / "-".join(plant.variants), device
        )
    row = {
        "plant": plant.name,
        "magnitude": magnitude,
        "variants": list(plant.variants),
        "expected_exact": plant.expected_exact.replace(PLACEHOLDER, magnitude),
        "expected_cause": plant.expected_cause,
    }
    try:
        apply_plant(plant, magnitude, repo)
    except SystemExit as exc:
        row["error"] = str(exc)
        git(repo, "checkout", "--quiet", "--", ".")
        return row
    head = commit(repo, f"plant {label}")
    if device == "cuda":
        for attempt in ("cold", "warm") if args.warm else ("cold",):
            if check.left() < COMPARE_MIN_S:
                row[attempt] = {"skipped": f"{check.left():.0f} s left"}
                continue
            result = run_compare(
                repo,
                c0,
                head,
                plant,
                tmp / label / attempt,
                min(check.left() - 10, args.compare_timeout_s),
                check,
            )
            report = result.pop("report", None)
            for side, text in result.pop("csv", {}).items():
                _add(tar, f"{label}/{attempt}_ncu_{side}.csv", text)
            if report is not None:
                _add(tar, f"{label}/{attempt}_compare.json", json.dumps(report, indent=1))
                result["cases"] = case_rows(report, plant.variants)
            row[attempt] = result
            decided = [c for c in result.get("cases", []) if c["tier"] in ("regression", *UNDER)]
            check.log(
                f"{label} {attempt}: rc {result['rc']}, {result['wall_s']} s, "
                f"{len(decided)} decided slower; " + " | ".join(f"{c['case']}: {c['cause']}" for c in decided)[:900]
            )
    row["sass"] = (
        sass_change(
            base_cubins[plant.variants],
            cubins(repo, plant.variants, tmp / "sass" / label, device),
            tmp / "sass-cache",
        )
        if built_ahead
        else {"error": RUNTIME_COMPILED}
    )
    check.log(f"{label}: SASS {row['sass'].get('describe') or row['sass'].get('error')}")
    _add(tar, f"{label}/sass.json", json.dumps(row["sass"], indent=1))
    return row


def table(rows: list[dict]) -> None:
    print(f"{'plant':18} {'N':>3} {'variant':22} {'cases':>5} {'realized %':>14} {'exact':>5}  cause named")
    for r in rows:
        if "skipped" in r or "error" in r:
            print(
                f"{r['plant']:18} {r['magnitude']:>3} {'-':22} {'-':>5} {'-':>14} {'-':>5}  "
                f"{r.get('skipped') or r.get('error')}"
            )
            continue
        cold = r.get("cold") or {}
        cases = cold.get("cases", [])
        ratios = [c["ratio"] - 1 for c in cases if c.get("ratio")]
        realized = f"{min(ratios):+.1%}..{max(ratios):+.1%}" if ratios else "-"
        exact = any(c["exact"] for c in cases) or bool(r["sass"].get("changed"))
        causes = [c["cause"] for c in cases if c["cause"]]
        named = causes[0][:90] if causes else (cold.get("error") or "no GPU compare (smoke)" if not cases else "none")
        print(
            f"{r['plant']:18} {r['magnitude']:>3} {','.join(r['variants'])[:22]:22} {len(cases):>5} {realized:>14} "
            f"{'yes' if exact else 'no':>5}  {named}"
        )


def _add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode("utf-8")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "explain-check-out")
    p.add_argument("--budget-s", type=float, default=500.0)
    p.add_argument(
        "--commit", default=None, help="the commit measured, recorded as such (default: git HEAD, stale in a copy)"
    )
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument(
        "--smoke", action="store_true", help="CPU: plants applied and their SASS diffed; no profile, no compare"
    )
    p.add_argument("--plants", default="", help="comma-separated plant names (default: every one in scripts/pr_plants)")
    p.add_argument("--magnitudes", choices=("all", "first"), default="all")
    p.add_argument("--skip-aa", action="store_true")
    p.add_argument(
        "--aa-variants", default=",".join(AA_VARIANTS), help=f"the A/A's variants (default: {','.join(AA_VARIANTS)})"
    )
    p.add_argument("--warm", action="store_true", help="repeat each plant's compare warm")
    p.add_argument("--compare-timeout-s", type=float, default=200.0)
    args = p.parse_args(argv)
    device = "cpu" if args.smoke else resolve_device(args.device)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    check = Check(out, args.budget_s)
    chosen = [pl for pl in load_plants() if not args.plants or pl.name in args.plants.split(",")]
    check.result.update(device=device, plants=[pl.name for pl in chosen], commit=args.commit or _this_commit())
    noise = "# no A/A run\n"
    if device == "cuda" and not args.skip_aa:
        check.result["aa"], noise = aa(check, pr_cases(tuple(args.aa_variants.split(","))))
        a = check.result["aa"]
        check.log(
            f"A/A: exact counters identical in {a['exact_identical']} of {a['profiled']} cases; "
            f"{a['false_explanations']} false explanations; per-opcode counts in {a['per_opcode_collected']}, "
            f"shared-memory wavefronts in {a['shared_wavefronts_collected']}"
        )
    else:
        check.result["aa"] = {"skipped": "no GPU (smoke)" if device == "cpu" else "--skip-aa"}
    (out / "noise_cases.toml").write_text(noise, encoding="utf-8")
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        check.result["plants_run"] = plants(check, chosen, device, args, tar)
    (out / "plants.tar.gz").write_bytes(archive.getvalue())
    check.result["seconds"] = round(time.monotonic() - check.started, 1)
    check.result["calibration"] = {pl.name: chosen_magnitude(pl.name, check.result["plants_run"]) for pl in chosen}
    (out / "explain_check.json").write_text(json.dumps(check.result, indent=1, default=str), encoding="utf-8")
    check.log_file.close()
    for name, word in check.result["calibration"].items():
        print(f"calibration {name}: {word}")
    table(check.result["plants_run"])
    return 0


def _this_commit() -> str | None:
    done = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


if __name__ == "__main__":
    sys.exit(main())
