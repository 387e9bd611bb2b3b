"""Long kernels on a power-capped GPU (ci/timing/power.py): per-sample clocks, the clock band
with its counts, the clock-normalised median beside the latency, pacing sized from the call's
duration or from NVML power (a fake NVML), the recipes of ci/run_config.toml, and the fields
through bundle -> ingest -> query."""

from __future__ import annotations

import sys

import duckdb
import numpy as np
import pytest

from bundle_factory import case_id, make_bundle
from fake_nvml import FakeGpu, FakeNvml
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.run_config import timing_config, with_recipe
from attnwatch.ci.timing.derived import case_timing
from attnwatch.ci.timing.sampler import Subject, kept, measure_interleaved
from attnwatch.ci.timing.gpu_state import NullMonitor, NvmlMonitor
from attnwatch.ci.timing.power import (
    PacingPolicy,
    assign_clocks,
    band_keep,
    duty_gap_us,
    modal_clock,
    summarize_clocks,
)
from attnwatch.ci.timing.timers import NoFlush
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

F_MAX = 1980.0


def test_each_call_gets_the_clock_read_while_it_was_in_flight_else_the_nearest():
    # calls 0 and 3 were read twice and once; 1 and 2 (short) none; 4 none, after the last read
    clocks = assign_clocks(5, [(0, 1980), (0, 1960), (3, 1700), (7, 1000)])
    assert clocks == [1970.0, 1700.0, 1700.0, 1700.0, 1700.0]
    assert assign_clocks(3, []) == [None, None, None]


def test_band_keeps_the_modal_clock_and_counts_what_it_drops():
    clocks = [1980.0] * 6 + [1965.0] * 2 + [1600.0, 1515.0, None]
    assert modal_clock([c for c in clocks if c]) == 1980.0
    keep = band_keep(clocks, 0.01)
    assert keep == [True] * 8 + [False, False, False]  # 1965 is within 1% of 1980; no clock: out
    assert band_keep(clocks, 0.0) == [True] * 11  # off: nothing dropped
    samples = [1000.0] * 8 + [1300.0, 1350.0, 1000.0]
    kept, summary = summarize_clocks(samples, clocks, F_MAX, 0.01)
    assert kept == [1000.0] * 8
    assert summary.band_discarded_samples == 3
    assert summary.sm_clock_min_mhz == 1515.0 and summary.sm_clock_max_mhz == 1980.0
    _, no_band = summarize_clocks(samples, clocks, F_MAX, 0.0)
    assert no_band.band_discarded_samples is None  # no band: nothing to count, not "0 dropped"


def test_the_normalised_median_is_cycle_time_at_the_reference_clock():
    # a clock-bound kernel: 1 ms at 1980 MHz, slower in proportion at lower clocks
    clocks = [1980.0, 1800.0, 1600.0, 1515.0, 1700.0]
    samples = [1000.0 * F_MAX / c for c in clocks]
    kept, summary = summarize_clocks(samples, clocks, F_MAX, 0.0)
    assert kept == samples  # the latency statistics keep every sample
    assert summary.clock_normalised_median_us == pytest.approx(1000.0)
    assert np.median(samples) > 1100.0  # the latency itself is not corrected
    assert summarize_clocks(samples, [None] * 5, F_MAX, 0.0)[1].clock_normalised_median_us is None


def test_duty_pacing_sizes_the_gap_from_the_calls_own_duration():
    policy = PacingPolicy(mode="duty", duty=0.5)
    assert policy.gap_us("a") == 0.0  # nothing known before the first block
    policy.after_block([2000.0, 2100.0, 1900.0], "a")
    assert policy.gap_us("a") == pytest.approx(2000.0)
    assert duty_gap_us(1000.0, 0.8) == pytest.approx(250.0)
    policy.after_block([3000.0] * 3, "a")
    assert policy.gap_us("a") == pytest.approx(3000.0)  # follows the subject's last block
    assert policy.gap_us("b") == 0.0  # per subject
    with pytest.raises(ValueError):
        PacingPolicy(mode="duty", duty=0.0)


def test_power_pacing_follows_nvml_draw_against_the_enforced_limit(monkeypatch):
    gpu = FakeGpu(uuid="GPU-a", pci_bus_id="00000000:19:00.0", power_mw=700_000, power_limit_mw=700_000)
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml([gpu]))
    monitor = NvmlMonitor(0)
    assert monitor.power_limit_w() == 700.0 and monitor.max_sm_clock_mhz() == 1980
    policy = PacingPolicy(mode="power", margin=0.9)
    block = [2000.0] * 10
    policy.after_block(block, "k", monitor.power_w(), monitor.power_limit_w(), capped=True)
    assert policy.busy_fraction("k") == pytest.approx(0.9)  # at the cap: d * margin * L / P
    policy.after_block(block, "k", monitor.power_w(), monitor.power_limit_w(), capped=True)
    assert policy.busy_fraction("k") == pytest.approx(0.81)  # still capped: down by the margin again
    assert policy.gap_us("k") == pytest.approx(2000.0 * (1 / 0.81 - 1))
    gpu.power_mw = 450_000  # paced well under the limit: the gap shrinks again
    policy.after_block(block, "k", monitor.power_w(), monitor.power_limit_w(), capped=False)
    assert policy.busy_fraction("k") == pytest.approx(min(1.0, 0.81 * 0.9 * 700 / 450))
    for _ in range(20):  # always capped: the busy fraction never falls below its floor
        policy.after_block(block, "k", 700.0, 700.0, capped=True)
    assert policy.busy_fraction("k") == policy.min_duty


class ClockedTimer:
    """A block timer of a clock-bound kernel on a GPU whose clock the script sets per call."""

    mode = "cuda_events"

    def __init__(self, clocks: list[float], base_us: float = 1000.0) -> None:
        self.clocks = list(clocks)
        self.base_us = base_us
        self.gaps: list[float] = []
        self.last_clocks: list[float | None] = []

    def time_block(self, fn, calls, flusher, key=None, gap_us=0.0, clock=None):
        self.gaps.append(gap_us)
        got = [self.clocks.pop(0) for _ in range(calls)]
        self.last_clocks = got if clock is not None else []
        return [self.base_us * F_MAX / c for c in got]

    def synchronize(self):
        return None


class ClockedMonitor(NullMonitor):
    available = True

    def __init__(self, reasons=("sw_power_cap",)):
        self._reasons = list(reasons)

    def sm_clock_mhz(self):
        return 1980

    def max_sm_clock_mhz(self):
        return int(F_MAX)

    def reasons(self):
        return self._reasons

    def power_w(self):
        return 700.0

    def power_limit_w(self):
        return 700.0


def _case() -> PlannedCase:
    return PlannedCase("triton_fa2", "fa_s8192_d64", 2, 16, 8192, 64, "fp16", True)


def _clock_script(n: int, seed: int = 3) -> list[float]:
    """Mostly at 1980 MHz, two calls in five pulled down by the power cap (1515-1900)."""
    rng = np.random.default_rng(seed)
    return [float(rng.choice([1515, 1605, 1740, 1900])) if rng.random() < 0.4 else F_MAX for _ in range(n)]


def _measure(recipe: str, **overrides):
    config = with_recipe(timing_config("cuda"), recipe).with_overrides(
        min_samples=40, max_samples=200, time_cap_s=60.0, **overrides
    )
    timer = ClockedTimer(_clock_script(400))
    raw = measure_interleaved([Subject(_case().case_id, lambda: None)], config, timer, NoFlush(), ClockedMonitor())[
        _case().case_id
    ]
    return raw, timer, case_timing(_case(), raw, "g#1.0")


def test_plain_records_no_clock_and_says_so():
    raw, timer, timing = _measure("plain")
    assert timing.timing_recipe == "plain"
    assert raw.clocks_mhz == [] and timing.clock_normalised_median_us is None and timing.pacing_gap_s is None
    assert timing.rel_spread > 0.01 and not timing.converged  # the capped quarter spreads the latency
    assert set(timer.gaps) == {0.0}


def test_clock_recipe_stores_the_normalised_median_beside_an_untouched_latency():
    raw, _, timing = _measure("clock")
    assert len(raw.clocks_mhz) == len(raw.samples_us) == timing.n
    assert timing.median_us == pytest.approx(float(np.median(raw.samples_us)))  # latency: all samples, as measured
    assert timing.clock_normalised_median_us == pytest.approx(1000.0)
    assert timing.reference_clock_mhz == F_MAX and timing.sm_clock_min_mhz == 1515.0
    assert timing.band_discarded_samples is None


def test_band_recipe_drops_off_clock_samples_counts_them_and_converges():
    raw, _, timing = _measure("band")
    samples, clocks = kept(raw)
    assert timing.n == len(samples) == len(clocks) == len(raw.samples_us) - timing.band_discarded_samples
    assert all(abs(c - 1980.0) <= 19.8 for c in clocks)
    assert timing.band_discarded_samples > 0
    assert timing.converged and timing.rel_spread <= 0.01 and timing.median_us == pytest.approx(1000.0)


def test_paced_recipes_charge_a_gap_and_report_its_cost():
    raw, timer, timing = _measure("paced_duty")
    assert timer.gaps[0] == 0.0 and all(g > 0 for g in timer.gaps[1:])
    assert timing.pacing_gap_s == pytest.approx(sum(timer.gaps) * 10 * 1e-6)
    _, power_timer, power_timing = _measure("paced_power")
    assert power_timer.gaps[1] > 0 and power_timing.timing_recipe == "paced_power"


def test_recipes_are_data_and_a_bad_one_is_refused_by_name():
    assert with_recipe(timing_config("cuda"), "band").clock_band > 0
    with pytest.raises(ValueError, match=r"run_config.toml: no \[timing.recipes.fast\]"):
        with_recipe(timing_config("cuda"), "fast")
    with pytest.raises(ValueError, match="need clock_record"):
        timing_config("cuda").with_overrides(pacing="duty", pacing_duty=0.5)


def test_the_recipe_and_clock_summary_survive_bundle_ingest_and_query(tmp_path, db_path):
    cid = case_id("triton_fa2", "fa_s8192_d64", "fp16", True)
    stored = {
        "timing_recipe": "band",
        "sm_clock_median_mhz": 1980.0,
        "sm_clock_min_mhz": 1515.0,
        "sm_clock_max_mhz": 1980.0,
        "reference_clock_mhz": 1980.0,
        "clock_normalised_median_us": 2400.5,
        "pacing_gap_s": None,
        "band_discarded_samples": 37,
        "throttle_reasons": ["sw_power_cap"],
        "throttled_samples": 120,
    }
    from bundle_factory import FactoryShape

    shape = FactoryShape("fa_s8192_d64", 2, 16, 8192, 64)
    ingest_paths(
        parse_location(db_path),
        [
            make_bundle(
                tmp_path / "b",
                variants=("triton_fa2",),
                shapes=(shape,),
                causal=(True,),
                timing_overrides={cid: stored},
            )
        ],
    )
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        row = con.execute(
            "SELECT timing_recipe, sm_clock_median_mhz, sm_clock_min_mhz, sm_clock_max_mhz, "
            "reference_clock_mhz, clock_normalised_median_us, pacing_gap_s, band_discarded_samples, "
            "median_us FROM result_details WHERE case_id = ?",
            [cid],
        ).fetchone()
    finally:
        con.close()
    assert row[:8] == ("band", 1980.0, 1515.0, 1980.0, 1980.0, 2400.5, None, 37)
    assert row[8] != 2400.5  # the latency column is the latency


def test_each_samples_clock_is_stored_with_it_and_a_mismatch_is_refused_by_file_and_field(tmp_path, db_path):
    import dataclasses
    import json

    from bundle_factory import bundle_contents
    from attnwatch.history.contract.bundle_writer import write_bundle
    from attnwatch.history.contract.validate import load_bundle
    from attnwatch.history.errors import BundleError

    contents = bundle_contents(variants=("sdpa",), causal=(True,), n_samples=20)
    cid = next(iter(contents.samples))
    clocks = [1980.0] * 15 + [1515.0, None, 1605.0, 1980.0, 1965.0]
    bundle = write_bundle(tmp_path / "b", dataclasses.replace(contents, sample_clocks={cid: clocks}))
    assert load_bundle(bundle).sample_clocks == {cid: clocks}
    ingest_paths(parse_location(db_path), [bundle])
    con = duckdb.connect(str(db_path), read_only=True)
    try:
        stored = [
            r[0]
            for r in con.execute(
                "SELECT sm_clock_mhz FROM samples WHERE case_id = ? ORDER BY sample_index", [cid]
            ).fetchall()
        ]
        others = con.execute("SELECT count(*), count(sm_clock_mhz) FROM samples WHERE case_id <> ?", [cid]).fetchone()
    finally:
        con.close()
    assert stored == clocks
    assert others[0] > 0 and others[1] == 0  # cases without a clock record: NULL

    path = bundle / "samples.json"
    document = json.loads(path.read_text())
    document["sm_clock_mhz"][cid] = clocks[:-1]
    path.write_text(json.dumps(document))
    with pytest.raises(BundleError, match=r"samples\.json: sm_clock_mhz\..*19 clocks but 20 samples"):
        load_bundle(bundle)


def test_run_refuses_an_unknown_recipe_in_one_line_before_measuring(tmp_path):
    import os
    import subprocess

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "run",
            "--device",
            "cpu",
            "--shapes",
            "cpu",
            "--recipe",
            "fast",
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--recipe" in lines[0] and "[timing.recipes.fast]" in lines[0]
    assert "plain, band, clock, paced_duty, paced_power" in lines[0]
    assert not (tmp_path / "run").exists()


def test_pacing_leaves_calls_under_its_minimum_length_alone():
    """paced_duty paces only the long calls (ci/run_config.toml pacing_min_call_us): a short call's
    figure must not move because the long ones are paced."""
    policy = PacingPolicy(mode="duty", duty=0.5, min_call_us=1000.0)
    policy.after_block([150.0, 150.0, 151.0], key="short")
    policy.after_block([2000.0, 2010.0, 1990.0], key="long")
    assert policy.gap_us("short") == 0.0
    assert policy.gap_us("long") == pytest.approx(2000.0)
