"""The ncu CSV parser and per-case aggregation, on real H200 output and on malformed files."""

from __future__ import annotations

import pytest

from attnwatch.ci.ncu.aggregate import CaseWork, aggregate_case, group_by_case
from attnwatch.ci.ncu.metrics import (
    choose_sections,
    metric_specs,
    metrics_argument,
    optional_metrics,
    sections,
    specs_in,
)
from attnwatch.ci.ncu.parse import NcuParseError, nvtx_range_name, parse_ncu_csv, parse_number

RAW = "ncu/h200_raw_sdpa_flash_3op.csv"  # recorded with the first 21 metrics of the list
PR_DEFAULT = "ncu/h200_raw_pr_default.csv"  # every section, a whole `attnwatch ncu --shapes pr` pass
ADDED_SINCE = {
    "lts__t_bytes.sum",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum",
    "smsp__inst_executed.sum",
}
DETAILS = "ncu/h200_details_full_sdpa_flash.csv"
# the exact section's counters beyond the rules' (history/analysis/exact_counters.toml): the
# per-opcode counts and the shared-memory wavefronts, both read where present
EXACT_SECTION = {"sass__inst_executed_per_opcode", "smsp__sass_l1tex_pipe_lsu_wavefronts_mem_shared.sum"}


@pytest.fixture(scope="module")
def raw(fixtures_dir):
    return parse_ncu_csv(fixtures_dir / RAW)


def test_raw_page_has_the_six_kernels_attributed_to_their_ranges(raw):
    assert raw.page == "raw"
    assert [k.nvtx_range for k in raw.kernels] == ["sdpa", "sdpa_flash"] + ["torch_3op"] * 4
    assert raw.kernels[0].kernel_name.startswith("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma")
    # a long template name with commas survives CSV quoting whole
    assert "Flash_fwd_kernel_traits<64, 128, 128, 4, 0, 0, cutlass::half_t" in raw.kernels[1].kernel_name
    assert any(n.startswith("==PROF== Connected") for n in raw.notes)


def test_thousands_separators_and_base_units(raw):
    assert raw.kernels[0].metrics["gpu__time_duration.sum"] == 43680.0  # printed "43,680" ns
    assert raw.kernels[1].metrics["dram__bytes_read.sum"] == 25_234_176.0
    assert raw.kernels[0].metrics["sm__cycles_elapsed.avg.per_second"] == pytest.approx(1_747_448_384.95)
    # the metrics added to the list after this recording are reported missing, not read as zero
    added = ADDED_SINCE | {s.metric for s in metric_specs() if "_issue_stalled_" in s.metric}
    assert all(set(k.missing) == added for k in raw.kernels)


def test_every_listed_metric_is_what_ncu_2025_prints(fixtures_dir):
    report = parse_ncu_csv(fixtures_dir / PR_DEFAULT)
    assert len({k.nvtx_range for k in report.kernels}) == 20  # 10 variants x 2 shapes, fp16 non-causal
    assert report.unknown_columns == []
    # the per-opcode counts (an instanced metric, the `exact` section) were added after this
    # recording: not read as zero, and not a failed case (optional evidence, read where present)
    for kernel in report.kernels:
        assert {s.metric for s in metric_specs()} - optional_metrics() == set(kernel.metrics), kernel.nvtx_range
        assert not kernel.missing
    assert metrics_argument(choose_sections("all")).count(",") == len(metric_specs()) - 1


def test_sections_choose_parts_of_the_list():
    assert choose_sections(None) == tuple(s.name for s in sections() if s.default)
    core = metrics_argument(("core",)).split(",")
    assert "gpu__time_duration.sum" in core and "launch__registers_per_thread" in core
    assert not any("stalled" in m for m in core)
    with pytest.raises(ValueError, match="unknown ncu section 'bogus'"):
        choose_sections("core,bogus")


def test_the_explain_list_is_what_the_counter_rules_read_and_the_default_list_is_part_of_it():
    """The list a judged case is explained with: every counter a rule reads, and beyond them only
    the duration and launch resources (launch__ values need no counter pass of their own); the
    rest is --sections all. The default list (every chosen case, one replay pass) is part of it
    and leaves out the L1 global counters and the stall ratios, which cost the other passes."""
    from attnwatch.history.analysis.ncu_explain import DURATION, load_rules

    read = {c for rule in load_rules() for c in rule.counters if not c.startswith(("timing__", "case__"))}
    read |= {rule.when.counter for rule in load_rules() if rule.when}
    explain = {s.metric for s in specs_in(choose_sections("explain"))}
    assert read <= explain
    # beyond them: the duration, and the per-opcode counts and shared-memory wavefronts the exact
    # compare reads (history/analysis/exact_counters.toml; smsp__inst_executed.sum is a rule's
    # counter too)
    assert {m for m in explain - read if not m.startswith("launch__")} == {DURATION, *EXACT_SECTION}
    unread = {s.metric for s in metric_specs()} - explain
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in unread and not unread & read
    default = {s.metric for s in specs_in(None)}
    assert default < explain
    left_out = explain - default
    assert {m for m in left_out if "stalled" not in m} == {
        "l1tex__t_bytes_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_bytes_pipe_lsu_mem_global_op_st.sum",
        *EXACT_SECTION,
    }
    assert all(s.cost and s.reason for s in sections())


def test_replay_settings_are_data_with_reasons():
    from attnwatch.ci.ncu.metrics import replay_settings

    settings = replay_settings()
    assert (settings.replay_mode, settings.cache_control) == ("kernel", "all")


def test_a_metric_not_asked_for_is_not_missing(fixtures_dir):
    report = parse_ncu_csv(fixtures_dir / RAW, requested=frozenset(s.metric for s in specs_in(("core",))))
    assert all(not k.missing for k in report.kernels)


def test_multi_kernel_case_sums_durations_and_weights_percentages(raw):
    groups = group_by_case(raw.kernels)
    m = aggregate_case("torch_3op", groups["torch_3op"])
    durations = [42432, 60992, 104928, 42720]  # ns, from the fixture
    assert m.kernel_count == 4
    assert m.duration_us == pytest.approx(sum(durations) / 1000)
    sm = [21.86, 16.26, 78.39, 21.11]
    assert m.sm_throughput_pct == pytest.approx(sum(s * d for s, d in zip(sm, durations)) / sum(durations))
    assert m.sm_throughput_pct != pytest.approx(sum(sm) / 4)  # not a plain mean
    assert m.registers_per_thread == 168  # the largest kernel need
    assert m.hmma_instructions == 131072 + 65536 + 65536
    assert m.gmma_instructions == 131072 + 65536
    # the softmax kernel is the longest, and registers bound its occupancy (limit 10 vs 32 for smem)
    assert m.occupancy_limiter == "registers"


def test_spills_and_wgmma_are_visible(raw):
    groups = group_by_case(raw.kernels)
    flash = aggregate_case("sdpa_flash", groups["sdpa_flash"])
    cudnn = aggregate_case("sdpa", groups["sdpa"])
    assert flash.registers_per_thread == 255
    assert flash.local_memory_bytes == 53_215_232 + 18_315_904  # FA2 spills on Hopper
    assert flash.gmma_instructions == 0  # HMMA (mma.sync) path
    assert cudnn.gmma_instructions == 393_216  # wgmma path
    assert cudnn.local_memory_bytes == 0


def test_derived_roofline_inputs(raw):
    groups = group_by_case(raw.kernels)
    flops = 4 * 4 * 16 * 1024 * 1024 * 64
    ideal = 4 * 4 * 16 * 1024 * 64 * 2
    m = aggregate_case("sdpa", groups["sdpa"], CaseWork(flops=flops, ideal_bytes=ideal, peak_tflops=666.6))
    assert m.achieved_tflops == pytest.approx(flops / 43.68e-6 / 1e12)
    assert m.arithmetic_intensity == pytest.approx(flops / (25_186_816 + 1_537_280))
    assert m.pct_of_peak == pytest.approx(100 * m.achieved_tflops / 666.6)
    assert m.dram_bytes_ideal == ideal


def test_details_page_maps_named_rows_and_keeps_the_rest(fixtures_dir):
    report = parse_ncu_csv(fixtures_dir / DETAILS)
    assert report.page == "details"
    (kernel,) = report.kernels
    assert kernel.nvtx_range == "sdpa_flash"
    assert kernel.metrics["gpu__time_duration.sum"] == 65408.0
    assert kernel.metrics["sm__throughput.avg.pct_of_peak_sustained_elapsed"] == 46.20
    assert kernel.metrics["sm__warps_active.avg.pct_of_peak_sustained_active"] == 11.98
    assert kernel.metrics["details/Memory Workload Analysis/Local Memory Spilling Requests"] == 514048
    assert any("Unable to access the following 6 metrics" in n for n in report.notes)
    m = aggregate_case("sdpa_flash", report.kernels)
    assert m.duration_us == pytest.approx(65.408)
    assert m.occupancy_limiter == "registers+shared_mem"
    assert "not collected" in (m.error or "")  # tensor-pipe counters are not on the details page


def test_nvtx_column_forms():
    assert nvtx_range_name('743  "<default domain>:sdpa:none:none:none:none:none:none" ') == "sdpa"
    cell = '9  "<default domain>:triton_fa2/b4_h16_s1k/fp16/causal:none:none:none:none:none:none" '
    assert nvtx_range_name(cell) == "triton_fa2/b4_h16_s1k/fp16/causal"
    assert nvtx_range_name("") is None


def test_parse_number():
    assert parse_number("2,147,483,647") == 2147483647
    assert parse_number("n/a") is None
    with pytest.raises(ValueError):
        parse_number("PolicySpread")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", "header"),
        ("==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - no permission\n", "header"),
        (
            '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n"","","","","ns"\n"0","k","(1,1,1)"\n',
            "data row 1",
        ),
        (
            '"ID","Kernel Name","Block Size","Grid Size","gpu__time_duration.sum"\n"","","","","ns"\n"0","k","a","b","12x"\n',
            "gpu__time_duration.sum",
        ),
        ('"ID","Kernel Name","Block Size","Grid Size"\n"","","",""\n"zero","k","a","b"\n', "column ID"),
        ('"ID","Block Size","Grid Size"\n"0","a","b"\n', "header"),
    ],
)
def test_malformed_csv_names_file_and_place(tmp_path, text, where):
    path = tmp_path / "broken.csv"
    path.write_text(text)
    with pytest.raises(NcuParseError) as info:
        parse_ncu_csv(path)
    assert str(path) in str(info.value)
    assert where in str(info.value)


def test_permission_error_is_quoted_in_the_message(tmp_path):
    path = tmp_path / "perm.csv"
    path.write_text("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")
    with pytest.raises(NcuParseError, match="ERR_NVGPUCTRPERM"):
        parse_ncu_csv(path)


def test_missing_metric_column_is_recorded_not_fatal(fixtures_dir, tmp_path):
    lines = (fixtures_dir / RAW).read_text().splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    import csv
    import io

    rows = list(csv.reader(io.StringIO("\n".join(lines[header_at:]))))
    drop = rows[0].index("lts__t_sector_hit_rate.pct")
    kept = [[c for j, c in enumerate(r) if j != drop] for r in rows]
    buffer = io.StringIO()
    csv.writer(buffer, quoting=csv.QUOTE_ALL).writerows(kept)
    path = tmp_path / "fewer.csv"
    path.write_text(buffer.getvalue())
    report = parse_ncu_csv(path)
    assert "lts__t_sector_hit_rate.pct" in report.kernels[0].missing
    m = aggregate_case("sdpa", [report.kernels[0]])
    assert m.l2_hit_rate_pct is None
    assert "lts__t_sector_hit_rate.pct" in m.error
    assert m.duration_us == pytest.approx(43.68)
