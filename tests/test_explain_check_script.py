"""scripts/explain_check.py's own logic on the CPU: every plant applies at every magnitude, its
ladder stops at the first rung that realizes inside 1.5-4% or past it (on the H200's recorded
plant compares), and the smoke run builds a plant's real sm_90a cubins (local nvcc) and finds
its change in the SASS."""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

import explain_check  # noqa: E402
import plant_ladder  # noqa: E402


def test_every_plant_is_one_line_and_applies_at_every_magnitude(tmp_path):
    plants = explain_check.load_plants()
    assert len(plants) >= 6
    for plant in plants:
        diff = plant.text.split("\n--- a/", 1)[1]
        added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert len(added) == 1, plant.name  # a one-line change, as pull requests make them
        assert plant.variants and plant.magnitudes and plant.expected_cause
        for magnitude in plant.magnitudes:
            root = tmp_path / f"{plant.name}-{magnitude}"
            target = diff.split("\n", 1)[0].strip()
            (root / target).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / target, root / target)
            explain_check.apply_plant(plant, magnitude, root)
            text = (root / target).read_text()
            assert explain_check.PLACEHOLDER not in text and text != (REPO / target).read_text()


def test_a_plants_dtypes_line_reaches_the_compare_and_its_cases_run_the_planted_entry(tmp_path):
    """register_cap plants cuda_wmma's D=64 bf16 entry, which no case of the pr set's fp16 runs:
    its header's `Dtypes: bf16` becomes the compare's --dtypes, and the cases that compare measures
    (its own parser and case plan) are the bf16 ones, every one launching the planted entry. A
    plant without the line keeps the set's dtypes (no --dtypes: fp16)."""
    from attnwatch.ci.compare.setup import plan_for
    from attnwatch.cli.compare_flags import check_mode_flags, resolve_defaults
    from attnwatch.cli.main import build_parser
    from attnwatch.cli.settings import case_choice

    def compare_cases(command):  # what `attnwatch compare` plans from the command line, as its _run reads it
        assert command[1:3] == ["-m", "attnwatch"]
        args = build_parser().parse_args(command[3:])
        check_mode_flags(args)
        resolve_defaults(args)
        return args, plan_for(case_choice(args))

    plants = {p.name: p for p in explain_check.load_plants()}
    cap = plants["register_cap"]
    assert cap.dtypes == ("bf16",)
    assert all(p.dtypes == () for name, p in plants.items() if name != "register_cap")
    added = next(line for line in cap.text.split("\n--- a/", 1)[1].splitlines() if line.startswith("+ATTNWATCH"))
    planted_entry = added.split("(", 1)[1].split(",", 1)[0]
    assert planted_entry == "attn_wmma_d64_bf16"

    out = tmp_path / "compare"
    args, cases = compare_cases(explain_check.compare_command("c0", "c1", cap, out))
    assert (args.command, args.shapes, args.variants, args.dtypes, args.out) == (
        "compare",
        "pr",
        "cuda_wmma",
        "bf16",
        str(out),
    )
    assert len(cases) == 4 and {c.dtype for c in cases} == {"bf16"}
    assert {f"attn_wmma_d{c.head_dim}_{c.dtype}" for c in cases} == {planted_entry}
    assert [c.id for c in explain_check.pr_cases(cap.variants, cap.dtypes)] == [c.case_id for c in cases]

    barrier = explain_check.compare_command("c0", "c1", plants["barrier"], out)
    assert "--dtypes" not in barrier
    assert {c.dtype for c in compare_cases(barrier)[1]} == {"fp16"}


def test_a_dtypes_line_must_name_known_dtypes(tmp_path):
    source = (plant_ladder.PLANTS / "register_cap.patch").read_text(encoding="utf-8")
    assert "\nDtypes: bf16\n" in source
    (tmp_path / "register_cap.patch").write_text(source.replace("Dtypes: bf16", "Dtypes: bf16 fp8"))
    with pytest.raises(SystemExit, match="Dtypes must name some of fp16, bf16"):
        plant_ladder.load_plants(tmp_path)
    (tmp_path / "register_cap.patch").write_text(source.replace("Dtypes: bf16", "Dtypes: fp16 bf16"))
    assert plant_ladder.load_plants(tmp_path)[0].dtypes == ("fp16", "bf16")


def recorded_rung(fixtures_dir, folder: str, variant: str | None = None) -> dict:
    """A rung's row as explain_check writes it, from a recorded plant compare (tests/data/ncu/plants),
    its cases limited to one variant where asked."""
    report = json.loads(gzip.decompress((fixtures_dir / "ncu" / "plants" / folder / "compare.json.gz").read_bytes()))
    variants = (variant,) if variant else ("cuda_wmma", "cuda_wmma_cpasync")
    return {"cold": {"cases": explain_check.case_rows(report, variants)}}


def test_the_ladders_are_ordered_and_bracket_the_target_by_the_recorded_rungs():
    """Each ladder has more than one rung where one rung is not already measured inside the
    target, and the rungs measured on the H200 (docs/benchmarks/ncu.md) are not climbed again:
    barrier@1 and shared_round_trip@2 realized about +1%, unroll@1 and bank_conflicts@0 past 4%."""
    ladders = {p.name: p.magnitudes for p in explain_check.load_plants()}
    assert ladders["barrier"] == ("2", "3", "4") and ladders["shared_round_trip"] == ("4", "6", "8")
    assert "0" not in ladders["bank_conflicts"] and "1" not in ladders["unroll"]
    assert all(len(m) >= 2 for m in ladders.values()), ladders


def test_the_climb_stops_at_the_first_rung_inside_the_target_or_past_it(fixtures_dir):
    """Three plants over the recorded compares' realized changes: one below then inside (chosen,
    its third rung never measured), one past the target at its first rung (stops, none chosen),
    one below on every rung (climbs to the end). Breadth first: every plant's first rung before
    any second rung."""
    recorded = {
        ("low_then_inside", "a"): recorded_rung(fixtures_dir, "shared_round_trip_at2"),  # +1.1% median
        ("low_then_inside", "b"): recorded_rung(fixtures_dir, "barrier_at1", "cuda_wmma_cpasync"),  # +1.6%
        ("past", "a"): recorded_rung(fixtures_dir, "bank_conflicts_at0"),  # +64% median
        ("low", "a"): recorded_rung(fixtures_dir, "barrier_at1", "cuda_wmma"),  # +1.0%
        ("low", "b"): recorded_rung(fixtures_dir, "shared_round_trip_at2", "cuda_wmma"),
    }
    template = explain_check.load_plants()[0]
    plants = [
        dataclasses.replace(template, name=name, magnitudes=ladder)
        for name, ladder in (("low_then_inside", ("a", "b", "c")), ("past", ("a", "b")), ("low", ("a", "b")))
    ]
    order = []

    def measure(plant, magnitude):
        order.append(f"{plant.name}@{magnitude}")
        return {"plant": plant.name, "magnitude": magnitude, **recorded.get((plant.name, magnitude), {})}

    rows = plant_ladder.climb(plants, first_only=False, measure=measure)
    assert order == ["low_then_inside@a", "past@a", "low@a", "low_then_inside@b", "low@b"]
    words = {p.name: plant_ladder.chosen_magnitude(p.name, rows) for p in plants}
    assert words["low_then_inside"].startswith("@b (+1.6% median, inside 1.5%-4%)")
    assert words["past"].startswith("none: @a +") and "past the target" in words["past"]
    assert words["low"] == "none: the largest measured, @b, realized +1.2% (the ladder ends below the target)"
    # the smoke (nothing measured) and --magnitudes first do not stop early and do not climb
    assert len(plant_ladder.climb(plants, False, measure, stop=False)) == 7
    assert [r["magnitude"] for r in plant_ladder.climb(plants, True, measure)] == ["a", "a", "a"]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc to build the plants' sm_90a cubins")
def test_the_smoke_run_finds_the_barrier_in_the_loop_and_the_bf16_entrys_registers(tmp_path):
    from attnwatch.history.analysis.sass import find_tool

    if find_tool("cuobjdump") is None:
        pytest.skip("cuobjdump not found (PATH, beside Triton, $CUDA_HOME/bin)")
    out = tmp_path / "out"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "scripts" / "explain_check.py"),
            "--device",
            "cpu",
            "--smoke",
            "--plants",
            "barrier,triton_stages,register_cap",
            "--magnitudes",
            "first",
            "--out",
            str(out),
        ],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list(out.iterdir())) <= 8
    result = json.loads((out / "explain_check.json").read_text())
    assert result["aa"] == {"skipped": "no GPU (smoke)"}
    rows = {r["plant"]: r for r in result["plants_run"]}
    first = int(rows["barrier"]["magnitude"])  # the ladder's first rung: that many barriers per key tile
    assert first == 2 and rows["barrier"]["sass"]["describe"].endswith(f"+{first} BAR in a loop")
    assert all(v == {"barrier": first} for v in rows["barrier"]["sass"]["by_class"].values())
    # Triton's cubins are per case (one per configuration and shape): never merged by kernel name
    assert "each case's own cubin diff" in rows["triton_stages"]["sass"]["error"]
    # register_cap's first rung: only the bf16 D=64 entry changes, and takes more registers than
    # the 168 that let 3 blocks of 128 threads share an SM's 65,536 (256 at a time per warp): 2 now
    cap = rows["register_cap"]["sass"]
    assert cap["changed"] and sorted(cap["same"]) == [
        "attn_wmma_d128_bf16",
        "attn_wmma_d128_fp16",
        "attn_wmma_d64_fp16",
    ]
    before, after = map(int, re.fullmatch(r"attn_wmma_d64_bf16: .*; registers (\d+) → (\d+)", cap["describe"]).groups())
    blocks = [65536 // (-(-registers * 32 // 256) * 256) // 4 for registers in (before, after)]
    assert before <= 168 < after and blocks == [3, 2], cap["describe"]
    assert result["calibration"]["barrier"].startswith("none: no rung measured")  # the smoke measures nothing
    assert "calibration barrier: none: no rung measured" in done.stdout
    table = done.stdout.strip().splitlines()
    assert table[-4].startswith("plant") and "barrier" in table[-3] and " yes " in table[-3]


def test_a_rung_whose_kernel_crashed_says_so_not_that_it_was_never_tried():
    """bank_conflicts@8 on the H100 (2026-12-05): every head case crashed (the host's copy of the
    kernel's shared-memory size was smaller than the kernel's), and the summary read "no rung
    measured". Now it names each rung's outcome."""
    rows = [
        {"plant": "p", "magnitude": "8", "cold": {"cases": [{"verdict": "failed", "ratio": None}] * 8}},
        {"plant": "p", "magnitude": "16", "skipped": "17 s left"},
    ]
    assert plant_ladder.chosen_magnitude("p", rows) == (
        "none: no rung measured; @8: 8 of 8 failed; @16 not run (17 s left)"
    )
