"""Exact evidence and noise bands in the explanation, on real H200 profiles (tests/data/ncu).

The A/A pairs are real: h200_raw_pr_default.csv against h200_raw_cuda_wmma_repeat.csv (two
profiles of one build), and the spin-plant pair, whose torch_3op GEMMs are the same kernels in
both. Planted changes edit a real kernel's counters the way a one-line change moves them.
"""

from __future__ import annotations


import pytest

from attnwatch.ci.compare.analysis import EXPLAINED, compare_rounds
from attnwatch.ci.ncu.parse import parse_instances, parse_ncu_csv
from attnwatch.history.analysis.exact_counters import (
    INSTRUCTIONS,
    PER_OPCODE,
    compare_exact,
    describe_exact,
    inexact_kernels,
)
from attnwatch.history.analysis.kernel_launches import Launch, launch_counters
from attnwatch.history.analysis.ncu_explain import DURATION, UNEXPLAINED, combine_kernels, explain
from attnwatch.history.analysis.noise_bands import NoiseBands, load_bands, spreads
from attnwatch.history.analysis.thresholds import load_thresholds
from attnwatch.history.analysis.tiers import tier
from compare_factory import make_rounds
from ncu_recordings import kernels_by_case as _kernels, launches as _launches

CASE = "cuda_wmma/b4_h16_s1k/fp16/noncausal"
BARRIER = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"


@pytest.fixture(scope="module")
def default(fixtures_dir):
    return _kernels(fixtures_dir / "ncu" / "h200_raw_pr_default.csv")


def _planted(kernels, **changes) -> tuple[list[Launch], dict[str, float]]:
    """The kernels with counters changed (`name=delta` added to the first kernel), and the case's counters."""
    metrics = [dict(k.metrics) for k in kernels]
    for name, delta in changes.items():
        metrics[0][name] = metrics[0].get(name, 0.0) + delta
    launches = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, metrics)]
    return launches, combine_kernels(metrics)


def test_two_profiles_of_one_build_have_no_exact_difference(default, fixtures_dir):
    repeat = _kernels(fixtures_dir / "ncu" / "h200_raw_cuda_wmma_repeat.csv")
    for case, kernels in repeat.items():
        assert compare_exact(_launches(default[case]), _launches(kernels)) == [], case
        for slower in (True, False):
            found = explain(
                combine_kernels(k.metrics for k in default[case]),
                combine_kernels(k.metrics for k in kernels),
                slower,
                launches=(_launches(default[case]), _launches(kernels)),
                case_id=case,
            )
            assert found.cause == UNEXPLAINED and not found.exact and not found.changes


def test_cublas_kernels_whose_counts_move_between_profiles_are_not_compared_exactly(fixtures_dir):
    base = _kernels(fixtures_dir / "ncu" / "h200_raw_spin_plant_base.csv")
    head = _kernels(fixtures_dir / "ncu" / "h200_raw_spin_plant_head.csv")
    case = "torch_3op/h100_small/fp16/noncausal"
    gemm = [(b, h) for b, h in zip(base[case], head[case]) if "nvjet" in b.kernel_name]
    assert any(b.metrics[INSTRUCTIONS] != h.metrics[INSTRUCTIONS] for b, h in gemm)  # the recorded fact
    assert "nvjet_" in inexact_kernels()
    assert compare_exact(_launches(base[case]), _launches(head[case])) == []


def test_a_few_instructions_more_per_call_is_a_fact_when_no_noisy_counter_moves(default):
    """The issue's case: +0.1% instructions, far under any noisy counter's band, stated exactly."""
    kernels = default[CASE]
    base_launches, base = _planted(kernels)
    head_launches, head = _planted(kernels, **{INSTRUCTIONS: 4096.0})
    found = explain(base, head, slower=True, launches=(base_launches, head_launches), case_id=CASE)
    assert found.cause.startswith("+4,096 instructions executed per call (+0.")
    assert [(e.metric, e.base, e.head) for e in found.exact] == [
        (INSTRUCTIONS, kernels[0].metrics[INSTRUCTIONS], kernels[0].metrics[INSTRUCTIONS] + 4096)
    ]
    assert found.cause != UNEXPLAINED


def test_per_opcode_counts_and_launch_resources_are_named(default):
    kernels = default[CASE]
    opcodes = {f"{PER_OPCODE}BAR": 1000.0, f"{PER_OPCODE}LDS": 4000.0, f"{PER_OPCODE}HMMA": 9000.0}
    base_metrics = [{**k.metrics, **opcodes} for k in kernels]
    head_metrics = [dict(m) for m in base_metrics]
    head_metrics[0][f"{PER_OPCODE}BAR"] += 512
    head_metrics[0][f"{PER_OPCODE}LDS"] += 1024
    head_metrics[0][INSTRUCTIONS] += 1536
    head_metrics[0]["launch__registers_per_thread"] = 96.0
    b = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, base_metrics)]
    h = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, head_metrics)]
    text = describe_exact(compare_exact(b, h))
    regs = int(kernels[0].metrics["launch__registers_per_thread"])
    assert text.startswith("+1,536 instructions executed per call (+0.")
    assert "): +1,024 LDS, +512 BAR" in text and f"registers/thread {regs} → 96" in text
    assert "HMMA" not in text  # unchanged opcodes are not listed


def test_more_shared_memory_wavefronts_for_the_same_instructions_are_named_bank_conflicts(default):
    """A padding change: the same LDS/STS count, more wavefronts (the SASS-patched counter is
    exact). With an LDS added as well, the wavefronts are stated but not read as conflicts."""
    kernels = default[CASE]
    wavefronts = "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum"
    opcodes = {f"{PER_OPCODE}LDS": 4000.0, f"{PER_OPCODE}STS": 2000.0, wavefronts: 8000.0}
    base_metrics = [{**k.metrics, **opcodes} for k in kernels]
    conflicts = [dict(m) for m in base_metrics]
    conflicts[0][wavefronts] = 10000.0
    b = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, base_metrics)]
    h = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, conflicts)]
    text = describe_exact(compare_exact(b, h))
    assert text == (
        "shared-memory wavefronts 8,000 → 10,000 (+25.0%) for the same shared-memory instructions: more bank conflicts"
    )
    assert describe_exact(compare_exact(h, b)).endswith(
        "(-20.0%) for the same shared-memory instructions: fewer bank conflicts"
    )
    conflicts[0][f"{PER_OPCODE}LDS"] += 2000
    conflicts[0][INSTRUCTIONS] += 2000
    h = [Launch(k.kernel_name, m.get(DURATION), launch_counters(m)) for k, m in zip(kernels, conflicts)]
    text = describe_exact(compare_exact(b, h))
    assert "+2,000 LDS" in text and "shared-memory wavefronts 8,000 → 10,000 (+25.0%)" in text
    assert "bank conflicts" not in text


def test_per_opcode_cells_in_ncus_instance_form():
    """ncu's documented `--print-metric-instances details` form: each instance as `name: value`.
    The recorded H200 form is read in test_explain_recorded.py (h200_aa_explain_run1.csv.gz)."""
    assert parse_instances("12,288 (BAR: 1,024; LDS: 8,192; HMMA: 3,072)") == {
        "BAR": 1024.0,
        "LDS": 8192.0,
        "HMMA": 3072.0,
    }
    assert parse_instances("BAR=2;BAR=3") == {"BAR": 5.0}
    assert parse_instances("") == {} and parse_instances("n/a") == {}
    with pytest.raises(ValueError, match="without names"):
        parse_instances("12288;1024;8192")


def test_a_raw_page_with_per_opcode_column_is_read_into_named_counters(fixtures_dir, tmp_path):
    lines = (fixtures_dir / "ncu" / "h200_raw_pr_default.csv").read_text().splitlines(keepends=True)
    out, seen_header = [], 0
    for line in lines:
        if line.startswith('"ID"') or (line.startswith('"') and seen_header):
            seen_header += 1
            cell = (
                '"sass__inst_executed_per_opcode"'
                if seen_header == 1
                else '"inst"'
                if seen_header == 2
                else '"BAR: 1,024; LDS: 8,192"'
            )
            line = line.rstrip("\n") + "," + cell + "\n"
        out.append(line)
    path = tmp_path / "per_opcode.csv"
    path.write_text("".join(out))
    kernel = parse_ncu_csv(path).kernels[0]
    assert kernel.metrics[f"{PER_OPCODE}BAR"] == 1024.0 and kernel.metrics[f"{PER_OPCODE}LDS"] == 8192.0
    assert "sass__inst_executed_per_opcode" not in kernel.missing
    # ncu's `--print-metric-instances values` form (tests/data/ncu/h200_aa_exact_run1.csv.gz): the
    # counts without opcode names are no per-opcode evidence, and no name is made up for them;
    # the kernel's other counters, its instruction total among them, are read as before
    path.write_text("".join(out).replace('"BAR: 1,024; LDS: 8,192"', '"9,216 (1,024; 8,192)"'))
    kernel = parse_ncu_csv(path).kernels[0]
    assert not any(name.startswith(PER_OPCODE) for name in kernel.metrics)
    assert "sass__inst_executed_per_opcode" in kernel.missing and INSTRUCTIONS in kernel.metrics


def test_a_rule_fires_only_outside_the_measured_noise(default):
    """The issue's stall ratio: +15-25% moved under the old fixed 25% threshold; the stall
    ratios' measured spread is 6% (band 9%), so +15% is a finding and +5% is noise."""
    base = combine_kernels(k.metrics for k in default[CASE])
    for factor, fires in ((1.15, True), (1.05, False)):
        head = {**base, BARRIER: base[BARRIER] * factor}
        found = explain(base, head, slower=True, case_id=CASE)
        assert (found.changes[:1] and found.changes[0].rule) == ("barrier_stalls" if fires else []), factor
        if fires:
            assert found.changes[0].band == pytest.approx(0.06 * 1.5)
            assert "noise ±9%" in found.cause
    # a case whose own measured spread is wider: the same +15% is inside it
    head = {**base, BARRIER: base[BARRIER] * 1.15}
    assert explain(base, head, slower=True, measured_noise={BARRIER: 0.1}).changes == []


def test_where_no_noise_was_measured_the_fixed_threshold_is_the_floor_and_said(default):
    base = combine_kernels(k.metrics for k in default[CASE])
    head = {**base, BARRIER: base[BARRIER] * 1.4}  # +0.08 on 0.2: past 25% of the rule's floor, 0.25
    found = explain(base, head, slower=True, bands=NoiseBands({}))
    assert found.changes[0].rule == "barrier_stalls" and found.changes[0].band is None
    assert "no measured noise: past its fixed threshold" in found.cause


def test_rules_are_ranked_by_the_time_they_account_for(default):
    base = combine_kernels(k.metrics for k in default[CASE])
    l2 = "lts__t_bytes.sum"
    head = {**base, BARRIER: base[BARRIER] * 1.2, l2: base[l2] * 1.6}
    found = explain(base, head, slower=True, time_change_us=base[DURATION] / 1000 * 0.05)
    assert [c.rule for c in found.changes][:2] == ["l2_traffic", "barrier_stalls"]
    accounted = [c.accounts_us for c in found.changes]
    assert accounted[0] >= accounted[1] > 0
    assert "accounts for about" in found.cause


def test_spreads_of_repeated_profiles():
    got = spreads([{"a": 100.0, "b": 2.0, "c": 0.0}, {"a": 103.0, "b": 2.0, "c": 0.0}, {"a": 99.0, "b": 2.0}])
    assert got["a"] == pytest.approx(4 / 103) and got["b"] == 0.0 and got["c"] == 0.0
    assert load_bands().band([BARRIER]).width == pytest.approx(0.09)


def test_every_decided_tier_gets_a_cause_and_no_change_none(fixtures_dir, default):
    """Regressions, improvements and the sure-but-small tier are all explained in compare.json."""
    counters = combine_kernels(k.metrics for k in default[CASE])
    planted = {**counters, BARRIER: counters[BARRIER] * 1.2}
    cases = (
        "sdpa_flash/b4_h16_s1k/fp16/noncausal",
        "sdpa_flash/h100_small/fp16/noncausal",
        *sorted({cid for rd in make_rounds(fixtures_dir)[0] for cid in rd.cases}),
    )
    base, head = make_rounds(
        fixtures_dir, slowdown={cases[0]: 1.06, cases[1]: 0.94}, counters={c: (counters, planted) for c in cases}
    )
    judged = compare_rounds(base, head, load_thresholds("NVIDIA H200"), method="hierarchical", resamples=400)
    seen = set()
    for c in judged:
        decided = tier(c.verdict, c.low, c.high)
        seen.add(decided)
        if decided in EXPLAINED:
            assert c.explanation is not None and c.explanation.cause, c.case_id
            if decided in ("regression", "slower, under threshold"):
                assert c.explanation.changes[0].rule == "barrier_stalls"
        else:
            assert c.explanation is None
    assert {"regression", "improvement", "no change"} <= seen
    assert seen & {"slower, under threshold", "faster, under threshold"}  # the recorded processes' offsets
