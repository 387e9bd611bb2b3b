"""Which kernel a slower call added or swapped, named from real profiles.

tests/data/ncu/h200_raw_spin_plant_{base,head}.csv are the two sides' profiles of an H200
compare in which the head's torch_3op calls end with a planted spin kernel
(scripts/select_check.py --compares planted --ncu changed). The same masked-fill kernel is
printed with different namespaces in the two profiles, so the kernels are matched without them.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import pytest

from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.analysis import compare_rounds
from attnwatch.ci.compare.rounds import read_round
from attnwatch.ci.ncu.parse import parse_ncu_csv
from attnwatch.history.analysis.kernel_launches import (
    NAME_CHARS,
    NAMES_SHOWN,
    Launch,
    kernel_key,
    launch_counters,
    launches_changed,
    short_kernel_name,
)
from attnwatch.history.analysis.ncu_explain import DURATION, UNEXPLAINED, combine_kernels, explain
from attnwatch.history.analysis.thresholds import load_thresholds
from bundle_factory import SHAPES, make_bundle
from compare_factory import make_report
from attnwatch.history.store.location import parse_location

CASES = [f"torch_3op/{shape}/fp16/{mode}" for shape in ("h100_small", "b4_h16_s1k") for mode in ("noncausal", "causal")]


def _profile(fixtures_dir, side: str) -> dict[str, list]:
    """case id -> its kernels (ParsedKernel) in launch order."""
    kernels = defaultdict(list)
    for kernel in parse_ncu_csv(fixtures_dir / "ncu" / f"h200_raw_spin_plant_{side}.csv").kernels:
        kernels[kernel.nvtx_range].append(kernel)
    return dict(kernels)


@pytest.fixture(scope="module")
def sides(fixtures_dir):
    return _profile(fixtures_dir, "base"), _profile(fixtures_dir, "head")


def _launches(kernels) -> list[Launch]:
    return [Launch(k.kernel_name, k.metrics.get(DURATION), launch_counters(k.metrics)) for k in kernels]


def test_the_profiles_print_one_kernel_two_ways_and_the_key_matches_them(sides):
    base, head = sides
    case = "torch_3op/b4_h16_s1k/fp16/causal"
    b_fill, h_fill = base[case][1].kernel_name, head[case][1].kernel_name  # the masked fill, after the first GEMM
    assert b_fill.startswith("void at::elementwise_kernel<") and h_fill.startswith("void native::elementwise_kernel<")
    assert b_fill != h_fill and kernel_key(b_fill) == kernel_key(h_fill)
    assert short_kernel_name(b_fill) == short_kernel_name(h_fill) == "elementwise_kernel"


@pytest.mark.parametrize("case", CASES)
def test_the_planted_spin_is_the_only_kernel_named(sides, case):
    base, head = sides
    said = launches_changed(_launches(base[case]), _launches(head[case]))
    spin = head[case][-1]
    assert spin.kernel_name == "cuda::<unnamed>::spin_kernel(long)"
    assert said == f"new spin_kernel ({spin.metrics[DURATION] / 1000:.3g} µs)"
    assert launches_changed(_launches(head[case]), _launches(base[case])).startswith("gone spin_kernel (")


@pytest.mark.parametrize("case", CASES)
def test_the_cause_counts_the_launches_and_names_the_new_one(sides, case):
    base, head = sides
    b, h = (combine_kernels(k.metrics for k in side[case]) for side in (base, head))
    found = explain(b, h, slower=True, launches=(_launches(base[case]), _launches(head[case])))
    assert found.changes[0].rule == "kernels"
    assert found.cause.startswith("more kernel launches per call (")
    assert found.cause.endswith(": new spin_kernel (" + f"{head[case][-1].metrics[DURATION] / 1000:.3g} µs)")
    assert ": new" not in explain(b, h, slower=True).cause  # no launches given: the counters alone


def test_another_kernel_at_the_same_count_is_named_when_no_counter_moved(sides):
    """A library that picks another kernel (here: the other shape's second GEMM) changes no count."""
    base, _ = sides
    ours, other = base["torch_3op/h100_small/fp16/noncausal"], base["torch_3op/b4_h16_s1k/fp16/noncausal"]
    swapped = _launches(ours)[:2] + _launches(other)[2:]
    counters = combine_kernels(k.metrics for k in ours)
    found = explain(counters, counters, slower=True, launches=(_launches(ours), swapped))
    assert found.changes == []
    assert found.cause.startswith(UNEXPLAINED)
    assert found.cause.endswith(
        "; the call's kernels differ: new nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT "
        f"({other[2].metrics[DURATION] / 1000:.3g} µs); gone nvjet_sm90_hsh_64x128_64x8_1x2_h_bz_NNN "
        f"({ours[2].metrics[DURATION] / 1000:.3g} µs)"
    )


@pytest.mark.parametrize(
    "name, short",
    [
        (
            "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4, 0, 0, cutlass::half_t>, true>"
            "(Flash_fwd_params)",
            "flash_fwd_kernel",
        ),
        (
            "void <unnamed>::softmax_warp_forward<c10::Half, c10::Half, float, 10, 0, 0>(T2 *, const T1 *, int, int, int, "
            "const bool *, int, bool)",
            "softmax_warp_forward",
        ),
        ("void at::native::(anonymous namespace)::fill<float>(float *)", "fill"),
        (
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
            "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0",
        ),
        ("k" * (NAME_CHARS + 5), "k" * (NAME_CHARS - 1) + "…"),
        ("_attn_fwd", "_attn_fwd"),
    ],
)
def test_a_signature_is_shown_by_its_function_name(name, short):
    assert short_kernel_name(name) == short


def test_repeated_and_many_kernels_are_counted_not_listed():
    base = [Launch("void at::native::k<1>(int)", 1000.0)]
    head = base + [Launch("void at::native::copy<2>(int)", 2000.0)] * 3 + [Launch(f"extra_{i}", None) for i in range(4)]
    said = launches_changed(base, head)
    assert said == "new copy (×3, 2 µs each), extra_0, extra_1 and 2 more"
    assert NAMES_SHOWN == 3
    # instantiations are different kernels: the template arguments stay in the key
    assert launches_changed(base, [Launch("void at::native::k<2>(int)", 1000.0)]) == "new k (1 µs); gone k (1 µs)"
    assert launches_changed(base, list(base)) is None


def test_a_compare_of_two_real_bundles_names_the_spin_in_its_cause(sides, tmp_path, fixtures_dir):
    """Through the bundle writer and the validating reader (read_round), as `attnwatch compare` reads its rounds."""
    base, head = sides

    def side(name: str, profile: dict, scale: float):
        launches = {case: [(k.kernel_name, k.metrics) for k in profile[case]] for case in CASES}
        return read_round(
            make_bundle(
                tmp_path / name,
                run_id=name,
                variants=("sdpa", "torch_3op"),
                shapes=(SHAPES[1], SHAPES[2]),
                with_ncu=True,
                ncu_launches=launches,
                variant_scale={"torch_3op": scale},
                seed=1 if name == "head" else 0,
            )
        )

    cases = compare_rounds(
        [side("base", base, 1.0)],
        [side("head", head, 1.08)],
        load_thresholds("NVIDIA H200"),
        method="pooled",
        resamples=400,
    )
    slower = {c.case_id: c for c in cases if c.verdict == "regression"}
    assert set(slower) == set(CASES)
    for case_id, comparison in slower.items():
        assert comparison.explanation.changes[0].rule == "kernels"
        assert comparison.explanation.cause.endswith(
            f": new spin_kernel ({head[case_id][-1].metrics[DURATION] / 1000:.3g} µs)"
        )
    # the PR comment's ncu section says it under each case
    body = render_comment(dataclasses.replace(make_report(fixtures_dir), cases=cases))
    section = body[body.index("#### ncu: why the changed cases moved") :]
    assert section.count(r"new spin\_kernel \(") == len(CASES)  # as md_text escapes it


def test_an_alert_on_a_stored_history_names_the_spin_in_its_cause(sides, tmp_path):
    """The history's path (ncu_metrics rows, history.detection.ncu_cause): the step's run against the one before."""
    from datetime import datetime, timedelta, timezone

    from attnwatch.history.detection.ncu_cause import cause_of
    from attnwatch.history.ingest.write import ingest_paths

    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    paths = []
    for i, profile in enumerate(sides):
        launches = {case: [(k.kernel_name, k.metrics) for k in profile[case]] for case in CASES}
        paths.append(
            make_bundle(
                tmp_path / f"run-{i}",
                run_id=f"run-{i}",
                commit_sha=f"{i + 1:040x}",
                started_at=t0 + timedelta(hours=i),
                commit_date=t0 + timedelta(hours=i),
                variants=("torch_3op",),
                shapes=(SHAPES[1], SHAPES[2]),
                with_ncu=True,
                ncu_launches=launches,
                seed=i,
            )
        )
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), paths)
    _, head = sides
    for case in CASES:
        found = cause_of(parse_location(db), "regression", "run-1", case)
        assert found.changes[0].rule == "kernels"
        assert found.cause.endswith(f": new spin_kernel ({head[case][-1].metrics[DURATION] / 1000:.3g} µs)")
    # read as a speed-up, one launch more explains nothing, and the new kernel is still named
    faster = cause_of(parse_location(db), "improvement", "run-1", CASES[0])
    assert faster.changes == [] and faster.cause.startswith(UNEXPLAINED)
    assert faster.cause.endswith(
        f"; the call's kernels differ: new spin_kernel ({head[CASES[0]][-1].metrics[DURATION] / 1000:.3g} µs)"
    )


def test_the_kernel_pages_table_leads_with_the_bare_name_and_keeps_the_full_one_last(fixtures_dir):
    """A real profile's rows (torch_3op's four kernels) as app.data.kernel.kernels_wide lays them out."""
    import pandas as pd

    from attnwatch.app.data.kernel import kernels_wide

    kernels = [
        k
        for k in parse_ncu_csv(fixtures_dir / "ncu" / "h200_raw_sdpa_flash_3op.csv").kernels
        if k.nvtx_range == "torch_3op"
    ]
    rows = pd.DataFrame(
        [
            {"kernel_index": i, "kernel_name": k.kernel_name, "metric_name": name, "value": value}
            for i, k in enumerate(kernels)
            for name, value in k.metrics.items()
        ]
    )
    table = kernels_wide(rows)
    assert list(table["kernel"]) == [
        "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_TNT",
        "vectorized_elementwise_kernel",
        "softmax_warp_forward",
        "nvjet_sm90_hsh_64x512_64x2_1x2_h_bz_coopB_NNT",
    ]
    assert list(table.columns[:2]) == ["kernel_index", "kernel"] and table.columns[-1] == "kernel_name"
    assert list(table["kernel_name"]) == [k.kernel_name for k in kernels]
    assert table.loc[2, DURATION] == kernels[2].metrics[DURATION]
