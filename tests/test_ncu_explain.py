"""The counter rules (history/analysis/ncu_rules.toml) on real H200 counters.

The base side of every check is a real profile (tests/data/ncu/h200_raw_pr_default.csv, the
default metric list over the pr set); an A/A is a second real profile of the same build
(h200_raw_cuda_wmma_repeat.csv). The planted changes below edit the real counters the way each
regression moves them (docs/benchmarks/ncu.md has what was planted in real kernels on the GPU).
"""

from __future__ import annotations

import pytest

from attnwatch.ci.ncu.aggregate import group_by_case
from attnwatch.ci.ncu.metrics import metric_specs
from attnwatch.ci.ncu.parse import parse_ncu_csv
from attnwatch.history.analysis.ncu_explain import (
    DURATION,
    KERNELS,
    UNEXPLAINED,
    RulesError,
    combine_kernels,
    combine_rule,
    explain,
    load_rules,
)

CASE = "cuda_wmma/b4_h16_s1k/fp16/noncausal"
BARRIER = "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio"
CLOCK = "sm__cycles_elapsed.avg.per_second"


def _counters(path) -> dict[str, dict[str, float]]:
    groups = group_by_case(parse_ncu_csv(path).kernels)
    return {case: combine_kernels(k.metrics for k in kernels) for case, kernels in groups.items()}


@pytest.fixture(scope="module")
def base(fixtures_dir):
    return _counters(fixtures_dir / "ncu" / "h200_raw_pr_default.csv")


@pytest.fixture(scope="module")
def repeat(fixtures_dir):
    return _counters(fixtures_dir / "ncu" / "h200_raw_cuda_wmma_repeat.csv")


def test_every_rule_reads_counters_the_metric_list_collects():
    """...or, for `timing__` counters, ones a compare adds from its timed rounds, or the count
    of the case's kernels that combine_kernels adds."""
    from attnwatch.ci.compare.analysis import THROTTLED

    listed = {spec.metric for spec in metric_specs()} | {THROTTLED, KERNELS}
    for rule in load_rules():
        assert set(rule.counters) <= listed, rule.name
        assert rule.when is None or rule.when.counter in listed, rule.name


def test_kernels_combine_as_the_metric_list_says():
    for spec in metric_specs():
        assert combine_rule(spec.metric) == spec.combine, spec.metric


def test_a_multi_kernel_case_adds_bytes_and_weights_ratios(base, fixtures_dir):
    kernels = group_by_case(parse_ncu_csv(fixtures_dir / "ncu" / "h200_raw_pr_default.csv").kernels)[
        "torch_3op/b4_h16_s1k/fp16/noncausal"
    ]
    combined = base["torch_3op/b4_h16_s1k/fp16/noncausal"]
    assert combined["dram__bytes_read.sum"] == sum(k.metrics["dram__bytes_read.sum"] for k in kernels)
    durations = [k.metrics["gpu__time_duration.sum"] for k in kernels]
    stalls = [k.metrics[BARRIER] for k in kernels]
    assert combined[BARRIER] == pytest.approx(sum(s * d for s, d in zip(stalls, durations)) / sum(durations))
    assert combined["launch__registers_per_thread"] == max(k.metrics["launch__registers_per_thread"] for k in kernels)
    assert combined[KERNELS] == len(kernels) == 3


def test_one_kernel_more_per_call_is_named_when_no_other_counter_moves(base):
    """A spin kernel after torch_3op's call (the timing plant of scripts/select_check.py): the
    other kernels' counters are those of the base, the call launches one kernel more."""
    case = base["torch_3op/b4_h16_s1k/fp16/noncausal"]
    head = {**case, KERNELS: case[KERNELS] + 1, DURATION: case[DURATION] * 1.03}
    verdict = explain(case, head, slower=True)
    assert [c.rule for c in verdict.changes] == ["kernels"]
    assert verdict.cause.startswith("more kernel launches per call (3 → 4, +33%, exact)")
    assert explain(head, case, slower=False).changes[0].rule == "kernels"  # and one fewer explains a speed-up


def test_an_aa_of_real_profiles_explains_nothing(base, repeat):
    for case in repeat:
        for slower in (True, False):
            verdict = explain(base[case], repeat[case], slower)
            assert verdict.changes == [], (case, slower, verdict.changes)
            assert verdict.cause == UNEXPLAINED


def _planted(counters: dict[str, float], **changes: float) -> dict[str, float]:
    head = dict(counters)
    for key, value in changes.items():
        head[_NAMES[key]] = value
    return head


_NAMES = {
    "barrier": BARRIER,
    "clock": CLOCK,
    "local_ld": "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum",
    "local_st": "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum",
    "limit_smem": "launch__occupancy_limit_shared_mem",
    "theoretical": "sm__maximum_warps_per_active_cycle_pct",
    "achieved": "sm__warps_active.avg.pct_of_peak_sustained_active",
    "global_ld": "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
    "l2": "lts__t_bytes.sum",
    "registers": "launch__registers_per_thread",
    "limit_regs": "launch__occupancy_limit_registers",
}


@pytest.mark.parametrize(
    ("plant", "changes", "expected"),
    [
        ("an extra __syncthreads", {"barrier": 0.9}, "barrier_stalls"),
        ("a register cap that spills", {"local_ld": 60e6, "local_st": 30e6, "registers": 64.0}, "spills"),
        (
            "64 KiB more shared memory",
            {"limit_smem": 1.0, "theoretical": 6.25, "achieved": 6.1},
            "occupancy_shared_mem",
        ),
        ("the Q tile re-read per key tile", {"global_ld": 415e6, "l2": 414e6}, "global_traffic"),
        (
            "more registers, fewer blocks",
            {"registers": 200.0, "limit_regs": 2.0, "theoretical": 12.5},
            "occupancy_registers",
        ),
    ],
)
def test_each_planted_regression_is_explained_by_its_rule(base, plant, changes, expected):
    counters = base[CASE]
    verdict = explain(counters, _planted(counters, **changes), slower=True)
    assert verdict.changes[0].rule == expected, (plant, [c.rule for c in verdict.changes])
    assert verdict.cause.startswith(verdict.changes[0].title)
    # the same move read as an improvement explains nothing: it points the wrong way
    assert expected not in {c.rule for c in explain(counters, _planted(counters, **changes), slower=False).changes}


def test_the_reverse_change_explains_an_improvement(base):
    counters = base[CASE]
    verdict = explain(_planted(counters, barrier=0.9), counters, slower=False)
    assert verdict.changes[0].rule == "barrier_stalls"
    assert "0.9 → 0.19" in verdict.cause


def test_a_slower_clock_exonerates_the_kernel_before_any_cause(base):
    counters = base[CASE]
    # 20% slower: the clock's band (noise_bands.toml) holds the 7.7% it moved between two profiles of one build
    head = _planted(counters, clock=counters[CLOCK] * 0.8, barrier=0.5)
    verdict = explain(counters, head, slower=True)
    assert [c.rule for c in verdict.changes][:2] == ["clock", "barrier_stalls"]
    assert verdict.cause.startswith("the SM clock fell")


def test_a_counter_missing_on_one_side_is_not_a_change(base):
    counters = base[CASE]
    head = {k: v for k, v in counters.items() if k != BARRIER}
    assert "barrier_stalls" not in {c.rule for c in explain(counters, head, slower=True).changes}


def test_a_bad_rule_file_is_refused_naming_the_rule_and_field(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(
        '[[rule]]\nname = "x"\nkind = "cause"\ntitle = "t"\ncounters = ["a"]\n'
        'direction = "sideways"\nthreshold = 0.1\nfloor = 1.0\nreason = "r"\n'
    )
    with pytest.raises(RulesError, match=r"rules.toml: rule 'x': direction 'sideways'"):
        load_rules(path)
    path.write_text('[[rule]]\nname = "x"\nkind = "cause"\n')
    with pytest.raises(RulesError, match=r"rules.toml: rule 'x': missing or bad field 'title'"):
        load_rules(path)


def test_a_compare_whose_head_was_throttled_exonerates_the_kernel(base):
    """The timed rounds' throttled share (CaseTiming.throttled_samples) joins the counters."""
    from attnwatch.ci.compare.analysis import explain_change
    from attnwatch.ci.compare.rounds import CaseRound

    def rounds(counters, throttled):
        return [
            CaseRound(
                CASE,
                "cuda_wmma",
                "b4_h16_s1k",
                "fp16",
                False,
                "ok",
                samples_us=[160.0] * 100,
                timing={"throttled_samples": throttled},
                counters=counters,
            )
        ]

    head = _planted(base[CASE], barrier=0.5)
    found = explain_change(rounds(base[CASE], 0), rounds(head, 30), slower=True)
    assert [c.rule for c in found.changes][:2] == ["throttled", "barrier_stalls"]
    assert found.cause.startswith("the timed runs were throttled")
    assert explain_change(rounds(base[CASE], 0), rounds(head, 0), slower=True).changes[0].rule == "barrier_stalls"
