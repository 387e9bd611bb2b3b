"""An A/A on the H200 explains nothing: two profiles of one build, recorded (tests/data/ncu/h200_aa_*).

The exact-counter pair (`h200_aa_exact_run{1,2}`) is ncu's default details page with
`--print-metric-instances values`: launch resources as `128 (128)`, the per-opcode counts as a
total and values WITHOUT opcode names. The default pair (`h200_aa_default_run{1,2}`) is the
product's own raw-page profile of the same 16 cases, twice: the noisy counters' spread per case.
"""

from __future__ import annotations

import tomllib
from collections import defaultdict

import pytest

from attnwatch.ci.ncu.parse import parse_ncu_csv
from attnwatch.history.analysis import exact_counters
from attnwatch.history.analysis.exact_counters import INSTRUCTIONS, PER_OPCODE, compare_exact, exact_of
from attnwatch.history.analysis.kernel_launches import short_kernel_name
from attnwatch.history.analysis.ncu_explain import UNEXPLAINED, combine_kernels, explain
from attnwatch.history.analysis.noise_bands import BANDS_FILE, NoiseBands, load_bands, spreads
from attnwatch.history.contract.ncu_csv import read_table
from ncu_recordings import kernels_by_case, launches as _launches, recorded_text

CASES = 16
# Every exact counter the A/A collected (exact_counters.toml); launch__stack_size was not asked for.
COLLECTED = {
    INSTRUCTIONS,
    "launch__block_size",
    "launch__grid_size",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
}


def _text(fixtures_dir, name: str) -> str:
    return recorded_text(fixtures_dir / "ncu" / name)


def _by_case(kernels) -> dict[str, list]:
    out = defaultdict(list)
    for kernel in kernels:
        out[kernel.nvtx_range].append(kernel)
    return dict(out)


@pytest.fixture(scope="module")
def exact_runs(fixtures_dir):
    return [
        parse_ncu_csv(name, text=_text(fixtures_dir, name)).kernels
        for name in (f"h200_aa_exact_run{i}.csv.gz" for i in (1, 2))
    ]


@pytest.fixture(scope="module")
def default_runs(fixtures_dir):
    return [kernels_by_case(fixtures_dir / "ncu" / f"h200_aa_default_run{i}.csv.gz") for i in (1, 2)]


def test_the_values_form_is_read_as_totals_and_no_opcode_is_named(exact_runs):
    first, second = exact_runs
    assert len(first) == len(second) == 26
    for kernel in first + second:
        assert COLLECTED <= set(dict(exact_of(kernel.metrics))), kernel.kernel_name  # `128 (128)` read as 128
        assert not any(name.startswith(PER_OPCODE) for name in kernel.metrics)  # no invented opcode names
    wmma = first[0]
    assert (
        wmma.kernel_name,
        wmma.metrics[INSTRUCTIONS],
        wmma.metrics["launch__block_size"],
        wmma.metrics["launch__registers_per_thread"],
    ) == ("attn_wmma_d64_fp16", 14113792.0, 128.0, 157.0)


def test_every_exact_counter_is_identical_on_every_kernel_compared_exactly(exact_runs):
    first, second = _by_case(exact_runs[0]), _by_case(exact_runs[1])
    assert len(first) == CASES
    inexact = exact_counters.inexact_kernels()
    compared = 0
    for case, kernels in first.items():
        assert compare_exact(_launches(kernels), _launches(second[case])) == [], case
        for a, b in zip(kernels, second[case], strict=True):
            assert a.kernel_name == b.kernel_name
            if not short_kernel_name(a.kernel_name).startswith(inexact):
                assert exact_of(a.metrics) == exact_of(b.metrics), (case, a.kernel_name)
                compared += 1
    assert compared == 18  # the project's 12 kernels, torch's 4 softmax and 2 elementwise launches


def test_the_per_opcode_values_repeat_exactly_where_the_totals_do(fixtures_dir):
    """The values form names no opcode, but its cells can still be compared as printed: identical
    on every kernel compared exactly, as the totals are."""
    cells = []
    for run in (1, 2):
        name = f"h200_aa_exact_run{run}.csv.gz"
        _, table = read_table(name, _text(fixtures_dir, name))
        kernel, metric, value = (table.column(c) for c in ("Kernel Name", "Metric Name", "Metric Value"))
        cells.append(
            [(row[kernel], row[value]) for row in table.rows if row[metric] == "sass__inst_executed_per_opcode"]
        )
    assert len(cells[0]) == len(cells[1]) == 26
    inexact = exact_counters.inexact_kernels()
    for (name, a), (_, b) in zip(*cells):
        if not short_kernel_name(name).startswith(inexact):
            assert a == b and a.count(";") > 10, name


def test_the_inexact_list_is_right_cublas_counts_move_and_nothing_else(exact_runs, monkeypatch):
    """With no kernel listed inexact, the compare finds differences on cuBLAS's nvjet kernels
    alone, in their instruction counts alone: exact_counters.toml's inexact list is what the A/A shows."""
    monkeypatch.setattr(exact_counters, "inexact_kernels", lambda path=None: ())
    first, second = _by_case(exact_runs[0]), _by_case(exact_runs[1])
    found = [c for case in first for c in compare_exact(_launches(first[case]), _launches(second[case]))]
    assert len(found) >= 7
    assert {c.kernel[: len("nvjet_")] for c in found} == {"nvjet_"} and {c.metric for c in found} == {INSTRUCTIONS}
    assert max(abs(c.delta) / c.base for c in found) < 0.001  # at most 386 of 828,504 (0.05%)


def _case_bands(default_runs) -> NoiseBands:
    first, second = default_runs
    case = {}
    for cid in first:
        measured = spreads(
            [combine_kernels(k.metrics for k in first[cid]), combine_kernels(k.metrics for k in second[cid])]
        )
        case.update({(cid, name): (spread, "A/A") for name, spread in measured.items()})
    return NoiseBands(load_bands().counter, case)


@pytest.mark.parametrize("which", ["derived from the recordings", "noise_bands.toml"])
def test_an_aa_of_the_default_profile_explains_nothing(default_runs, which):
    first, second = default_runs
    assert len(first) == CASES
    bands = _case_bands(default_runs) if which.startswith("derived") else load_bands()
    for cid in first:
        base, head = combine_kernels(k.metrics for k in first[cid]), combine_kernels(k.metrics for k in second[cid])
        for slower in (True, False):
            found = explain(
                base, head, slower, launches=(_launches(first[cid]), _launches(second[cid])), case_id=cid, bands=bands
            )
            assert (found.cause, found.changes, found.exact) == (UNEXPLAINED, [], []), (cid, slower)


def test_the_case_bands_in_noise_bands_toml_are_these_recordings(default_runs):
    entries = tomllib.loads(BANDS_FILE.read_text(encoding="utf-8"))["case"]
    recorded = {(e["case"], e["counter"]): e["spread"] for e in entries if "h200_aa_default" in e["source"]}
    assert len(recorded) == CASES * 7
    derived = _case_bands(default_runs).case
    for key, spread in recorded.items():
        assert spread == pytest.approx(derived[key][0], rel=1e-3, abs=1e-9), key


def test_one_pairs_spread_does_not_narrow_a_band(fixtures_dir, default_runs):
    """cuda_wmma/h100_small/fp16/noncausal: its L2 bytes moved 0.34% between these two profiles
    and 1.95% between the two of 2026-11-26 (h200_raw_pr_default.csv, h200_raw_cuda_wmma_repeat.csv).
    A band of 3 x 0.34% would call that older A/A "extra L2 traffic"; the case band is floored at
    the counter's spread over the pr set, and widens where a case is noisier than that."""
    cid = "cuda_wmma/h100_small/fp16/noncausal"
    l2 = "lts__t_bytes.sum"
    bands = load_bands()
    assert bands.case[(cid, l2)][0] < 0.004
    older = [
        kernels_by_case(fixtures_dir / "ncu" / name)[cid]
        for name in ("h200_raw_pr_default.csv", "h200_raw_cuda_wmma_repeat.csv")
    ]
    base, head = (combine_kernels(k.metrics for k in side) for side in older)
    assert abs(head[l2] / base[l2] - 1) > 0.015  # the older pair's move: 5 times the newer's
    assert explain(base, head, True, launches=tuple(_launches(s) for s in older), case_id=cid).cause == UNEXPLAINED
    assert bands.band([l2], cid).width == pytest.approx(bands.counter[l2][0] * bands.counter_margin)
    wide = "triton_fa2/b4_h16_s1k/fp16/causal"  # DRAM writes moved 51% between the two profiles
    assert bands.band(["dram__bytes_write.sum"], wide).width == pytest.approx(
        3 * bands.case[(wide, "dram__bytes_write.sum")][0]
    )


def test_a_tiny_noisy_counter_does_not_blind_its_rule(default_runs):
    """triton_fa2 b4_h16_s1k non-causal: DRAM writes of a few KB moved 888% between the two
    profiles, reads under 0.01%. The DRAM rule's signal is reads + writes, so its band is the signal's
    (noise_bands.NoiseBands.band), not the writes' 27-fold band: 20% more bytes read fires."""
    cid = "triton_fa2/b4_h16_s1k/fp16/noncausal"
    base = combine_kernels(k.metrics for k in default_runs[0][cid])
    assert load_bands().case[(cid, "dram__bytes_write.sum")][0] > 8
    head = {**base, "dram__bytes_read.sum": base["dram__bytes_read.sum"] * 1.2}
    assert "dram_traffic" in [c.rule for c in explain(base, head, True, case_id=cid).changes]
