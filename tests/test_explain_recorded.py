"""The explanation on the H200 recordings of 2026-12-05 (tests/data/ncu/h200_aa_explain_run*,
tests/data/ncu/plants/): an A/A of one build explains nothing, and each real one-line plant's
cause names its exact evidence and the kernels its case launched.

The A/A pair is the explain metric list (per-opcode counts in ncu's `details` instance form) over
16 pr cases of cuda_scalar, cuda_wmma, cuda_wmma_cpasync and triton_fa2, profiled twice. Each
plant folder holds a real `attnwatch compare --ncu changed` of one scripts/pr_plants/ patch: its
compare.json, both sides' raw ncu profiles and the SASS diff of the variants' binaries (sass.json:
its description, the form scripts/explain_check.py kept).
"""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from pathlib import Path

import pytest

from attnwatch.ci.compare.analysis import EXPLAINED, explain_change
from attnwatch.ci.compare.rounds import CaseRound
from attnwatch.history.analysis.exact_counters import INSTRUCTIONS, PER_OPCODE, compare_exact
from attnwatch.history.analysis.kernel_launches import short_kernel_name
from attnwatch.history.analysis.ncu_explain import UNEXPLAINED, combine_kernels, explain, load_rules
from attnwatch.history.analysis.noise_bands import BANDS_FILE, NoiseBands, load_bands, spreads
from attnwatch.history.analysis.sass import opcode_class
from attnwatch.history.analysis.sass_diff import (
    IN_LOOP,
    BinaryDiff,
    KernelDiff,
    OpcodeChange,
    describe_binaries,
    launched_only,
)
from attnwatch.history.analysis.tiers import tier
from ncu_recordings import kernels_by_case, launches

CASES = 16
CLOCK = "sm__cycles_elapsed.avg.per_second"
LG_THROTTLE = "smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio"
BARRIER = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
# The kernels of the plants' binaries: one cubin per variant and side, each with the four entry
# points kernels/cuda/cuda_wmma.cu and cuda_wmma_cpasync.cu instantiate (sass.json lists only
# the kernels whose code changed).
BINARY_KERNELS = [f"attn_wmma{v}_d{d}_{t}" for v in ("", "_cpasync") for d in (64, 128) for t in ("bf16", "fp16")]


@pytest.fixture(scope="module")
def aa(fixtures_dir):
    return [kernels_by_case(fixtures_dir / "ncu" / f"h200_aa_explain_run{i}.csv.gz") for i in (1, 2)]


def test_the_per_opcode_column_of_a_real_profile_is_read_into_named_opcode_counters(aa):
    first, _ = aa
    assert len(first) == CASES
    for case, kernels in first.items():
        for kernel in kernels:
            opcodes = {n[len(PER_OPCODE) :]: v for n, v in kernel.metrics.items() if n.startswith(PER_OPCODE)}
            assert "sass__inst_executed_per_opcode" not in kernel.missing, case
            assert {"BRA", "EXIT", "STG"} <= set(opcodes), (case, sorted(opcodes))
            # the opcodes add up to the instructions executed, as ncu counts both
            assert sum(opcodes.values()) == kernel.metrics[INSTRUCTIONS], case
    scalar = first["cuda_scalar/h100_small/fp16/noncausal"][0]
    assert short_kernel_name(scalar.kernel_name) == "attn_scalar_d64_fp16"
    assert scalar.metrics[f"{PER_OPCODE}BAR"] > 0 and scalar.metrics[f"{PER_OPCODE}LDS"] > 0
    wmma = first["cuda_wmma/h100_small/fp16/noncausal"][0]
    assert wmma.metrics[f"{PER_OPCODE}HMMA"] > 0


def test_two_profiles_of_one_build_have_identical_per_opcode_counts_on_every_kernel(aa):
    """The issue's claim, on the recording: every counter treated as exact, per opcode
    included, is identical on every kernel of two profiles of one build."""
    first, second = aa
    compared = 0
    for case, kernels in first.items():
        assert compare_exact(launches(kernels), launches(second[case])) == [], case
        for a, b in zip(kernels, second[case], strict=True):
            ops_a = {n: v for n, v in a.metrics.items() if n.startswith(PER_OPCODE)}
            ops_b = {n: v for n, v in b.metrics.items() if n.startswith(PER_OPCODE)}
            assert ops_a and ops_a == ops_b, (case, a.kernel_name)
            compared += 1
    assert compared == CASES  # one kernel per case


@pytest.mark.parametrize("order", ["run1 as base", "run2 as base"])
def test_the_recorded_aa_is_unexplained_both_ways(aa, order):
    """On this A/A the explanation once named the clock (1.75 → 1.88 GHz, 1.98 → 1.92 GHz),
    the load/store queue (a ratio 0 → 0.01) and, read the other way, memory stalls (2.85 → 3.11)."""
    first, second = aa if order == "run1 as base" else aa[::-1]
    for case in first:
        base, head = (combine_kernels(k.metrics for k in side[case]) for side in (first, second))
        for slower in (True, False):
            found = explain(base, head, slower, launches=(launches(first[case]), launches(second[case])), case_id=case)
            assert (found.cause, found.changes, found.exact) == (UNEXPLAINED, [], []), (case, slower, found.cause)


def test_a_stall_ratio_one_printed_step_above_zero_is_not_a_cause(aa):
    """triton_fa2/h100_small/fp16/causal's LG-throttle ratio read 0 and 0.01 (ncu prints two
    decimals): the move is taken against the rule's floor, which is set so that it is inside
    the band. Three steps (0 → 0.03) are not noise any more."""
    case = "triton_fa2/h100_small/fp16/causal"
    base, head = (combine_kernels(k.metrics for k in side[case]) for side in aa)
    assert (base[LG_THROTTLE], head[LG_THROTTLE]) == (0.0, 0.01)
    assert "lsu_queue_stalls" not in [c.rule for c in explain(base, head, True, case_id=case).changes]
    rule = next(r for r in load_rules() if r.name == "lsu_queue_stalls")
    band = load_bands().band(rule.counters, case, base=base, floor=rule.floor).width
    assert 0.01 / rule.floor < band < 0.03 / rule.floor
    fired = explain(base, {**head, LG_THROTTLE: 0.03}, True, case_id=case).changes
    assert [c.rule for c in fired] == ["lsu_queue_stalls"]


def test_the_clock_band_holds_the_clock_spread_of_this_aa(aa):
    first, second = aa
    measured = max(
        spreads([combine_kernels(k.metrics for k in side[case]) for side in pair])[CLOCK]
        for case in first
        for pair in ((first, second), (second, first))
    )
    assert measured == pytest.approx(0.0771, abs=5e-5)  # triton_fa2/b4_h16_s1k/fp16/causal: 1.75 vs 1.88 GHz
    assert load_bands().counter[CLOCK][0] >= measured


def test_the_case_bands_of_this_aa_in_noise_bands_toml_are_these_recordings(aa):
    """noise_bands.toml's [[case]] entries from this A/A, each against the recordings; where the
    earlier A/A measured the same case and counter, the band keeps the wider spread."""
    entries = tomllib.loads(BANDS_FILE.read_text(encoding="utf-8"))["case"]
    recorded = {(e["case"], e["counter"]): e["spread"] for e in entries if "h200_aa_explain_run" in e["source"]}
    assert len(recorded) == 222  # 14 noisy counters x 16 cases, less 2 that read 0 in run 1
    first, second = aa
    bands = load_bands()
    for (case, counter), spread in recorded.items():
        measured = spreads([combine_kernels(k.metrics for k in side[case]) for side in (first, second)])[counter]
        assert spread == pytest.approx(measured, rel=1e-3, abs=1e-9), (case, counter)
        assert bands.case[(case, counter)][0] >= spread


# --- the recorded plants ------------------------------------------------------------------

BANK_CONFLICTS = re.compile(
    r"shared-memory wavefronts [\d,]+ → [\d,]+ \(\+\d+\.\d%\) for the same shared-memory instructions: more bank conflicts"
)
PLANTS = {  # folder: (what the cause must show, for every decided case; how many cases compare.json decided)
    "barrier_at1": ("exact", re.compile(r"\+[\d,]+ BAR\b"), 7),
    "shared_round_trip_at2": ("exact", re.compile(r"\+[\d,]+ LDS\b.*\+[\d,]+ STS\b|\+[\d,]+ STS\b.*\+[\d,]+ LDS\b"), 7),
    "unroll_at1": ("exact", re.compile(r"loops \d+ → \d+.*instructions executed per call"), 7),
    "bank_conflicts_at0": ("rule", "shared_memory_stalls", 7),
    "bank_conflicts_at8": ("exact", BANK_CONFLICTS, 6),  # the H100 recording, with the wavefront counter
}


def recorded_diff(sass: dict) -> BinaryDiff:
    """sass.json's description read back into a BinaryDiff (the recording keeps the words, not the
    structure): listed opcode changes, loops and resources as described, each "N more opcode
    changes" as N changes whose opcode was not recorded; the binaries' other kernels unchanged."""
    diff = BinaryDiff()
    for part in sass["describe"].split(" | "):
        name, text = part.split(": ", 1)
        kd = KernelDiff(name)
        for item in text.split("; "):
            if m := re.fullmatch(r"([+-]\d+) (\S+) (in a loop|outside loops)", item):
                kd.changes.append(OpcodeChange(m[2], opcode_class(m[2]), m[3], 0, int(m[1])))
            elif m := re.fullmatch(r"(\d+) more opcode changes", item):
                kd.changes += [OpcodeChange("(not recorded)", "other", IN_LOOP, 0, 0)] * int(m[1])
            elif m := re.fullmatch(r"loops (\d+) → (\d+)", item):
                kd.loops = (int(m[1]), int(m[2]))
            elif m := re.fullmatch(r"(\w+) (\d+) → (\d+)", item):
                kd.resources[m[1]] = (int(m[2]), int(m[3]))
            else:
                raise AssertionError(f"unread part of sass.json: {item!r}")
        diff.kernels.append(kd)
    diff.same = [k for k in BINARY_KERNELS if k not in {kd.name for kd in diff.kernels}]
    assert describe_binaries(diff) == sass["describe"]  # read back word for word
    return diff


def _json(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())


def _side(case: dict, kernels) -> list[CaseRound]:
    return [
        CaseRound(
            case["case_id"],
            case["variant"],
            case["shape_id"],
            case["dtype"],
            case["causal"],
            "ok",
            counters=combine_kernels(k.metrics for k in kernels),
            launches=launches(kernels),
        )
    ]


def plant_explanations(folder: Path):
    """(case, the explanation) for every case compare.json decided, from both sides' profiles
    and the recorded SASS diff, as ci/compare/analysis.compare_rounds explains it."""
    report, diff = _json(folder / "compare.json.gz"), recorded_diff(_json(folder / "sass.json"))
    sides = [kernels_by_case(folder / f"ncu_{side}.csv.gz") for side in ("base", "head")]
    out = []
    for case in report["cases"]:
        decided = tier(case["verdict"], case.get("low"), case.get("high"))
        if decided not in EXPLAINED:
            continue
        change = case["head"]["median_us"] - case["base"]["median_us"]
        found = explain_change(
            _side(case, sides[0][case["case_id"]]),
            _side(case, sides[1][case["case_id"]]),
            slower=change > 0,
            case_id=case["case_id"],
            time_change_us=change,
            code_change=diff,
        )
        out.append((case, found))
    return diff, out


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_recorded_plant_names_its_exact_evidence_and_only_its_cases_kernels(fixtures_dir, plant):
    diff, explained = plant_explanations(fixtures_dir / "ncu" / "plants" / plant)
    kind, expected, decided = PLANTS[plant]
    assert len(explained) >= decided  # what compare.json decided of the 8 cases
    for case, found in explained:
        cid = case["case_id"]
        assert found is not None and found.cause != UNEXPLAINED, cid
        if kind == "exact":
            assert expected.search(found.cause), (cid, found.cause)
        else:
            assert found.changes[0].rule == expected, (cid, found.cause)
        launched = {
            short_kernel_name(k.name)
            for k in _side(case, kernels_by_case(fixtures_dir / "ncu" / "plants" / plant / "ncu_head.csv.gz")[cid])[
                0
            ].launches
        }
        assert launched and launched <= set(BINARY_KERNELS)
        named = set(re.findall(r"\battn_\w+", found.cause))
        assert named <= launched, (cid, named - launched)
        assert launched <= named or not launched_only(diff, launched).changed, cid


def test_a_case_whose_own_kernel_is_unchanged_says_nothing_about_code(fixtures_dir):
    """bank_conflicts@0 changed the instruction mix of five kernels, none of them the d64 fp16
    kernels the pr cases launch: their causes are the shared-memory stalls, with no code line."""
    diff, explained = plant_explanations(fixtures_dir / "ncu" / "plants" / "bank_conflicts_at0")
    assert "attn_wmma_d64_fp16" in diff.same and "attn_wmma_cpasync_d64_fp16" in diff.same
    for case, found in explained:
        assert found.cause.startswith("warps wait on shared memory ("), (case["case_id"], found.cause)


def test_launched_only_keeps_the_whole_diff_when_no_name_is_comparable():
    kd = KernelDiff("k", [OpcodeChange("BAR", "barrier", IN_LOOP, 0, 1)])
    diff = BinaryDiff([kd], same=["j"])
    assert launched_only(diff, ["void at::native::other_kernel<float>(float*)"]) is diff
    assert not launched_only(diff, ["j"]).changed
    assert launched_only(diff, ["k"]).kernels == [kd]


def test_the_code_leads_when_the_clock_also_fell(fixtures_dir):
    """unroll@1, cuda_wmma/h100_small/fp16/causal: +232,960 instructions per call (+2.84%) and
    loops 7 → 9, and the clock read 1.84 → 1.77 GHz. The clock's band now holds that move; with
    the band it had (2.2% spread, ±3%) the clock fires, and is still not ranked before the code's
    evidence as an acquittal: it is a contributor, ranked by its time share."""
    folder = fixtures_dir / "ncu" / "plants" / "unroll_at1"
    case = "cuda_wmma/h100_small/fp16/causal"
    _, explained = plant_explanations(folder)
    found = next(f for c, f in explained if c["case_id"] == case)
    assert found.cause.startswith("attn_wmma_d64_fp16: ") and "+232,960 instructions executed per call" in found.cause
    assert "clock" not in [c.rule for c in found.changes[:1]] and "not the kernel" not in found.cause


def test_with_exact_evidence_an_exonerating_rule_is_a_contributor_ranked_by_its_time_share(fixtures_dir):
    """The same case with the clock band it had before this A/A (2.2% spread, ±3%): the clock
    fires, and is ranked by its time share among the causes, worded as the GPU's part."""
    folder = fixtures_dir / "ncu" / "plants" / "unroll_at1"
    case = "cuda_wmma/h100_small/fp16/causal"
    old = load_bands()
    narrow = NoiseBands({**old.counter, CLOCK: (0.022, "the band before this A/A")}, old.case)
    sides = [kernels_by_case(folder / f"ncu_{side}.csv.gz")[case] for side in ("base", "head")]
    base, head = (combine_kernels(k.metrics for k in side) for side in sides)
    fired = explain(
        base,
        head,
        True,
        launches=(launches(sides[0]), launches(sides[1])),
        case_id=case,
        bands=narrow,
        time_change_us=3.05,
    )
    by_rule = {c.rule: c for c in fired.changes}
    assert by_rule["clock"].title == "the SM clock fell too"
    shares = [c.accounts_us for c in fired.changes if c.accounts_us is not None]
    assert shares == sorted(shares, reverse=True) and len(shares) >= 2  # the clock among the causes by time share
    assert fired.changes[0].rule == "tensor_pipe"  # the largest share: 3.05 µs of the 3.05 (capped), the clock's 1.86
    assert fired.cause.startswith("+232,960 instructions executed per call")
    assert "not the kernel" not in fired.cause
