"""The timing engine on a CPU: sampler stopping rules, interleaving, throttle flags, derived
metrics (TFLOPS, gaps), configuration and the journal, fed with real recorded H200 samples."""

from __future__ import annotations

import json
import math

import pytest

from attnwatch.ci.journal import JournalReader, JournalWriter
from attnwatch.ci.run_config import TimingConfig, default_dtypes, timing_config
from attnwatch.ci.plan import PlannedCase
from attnwatch.ci.timing.derived import apply_gaps, case_timing
from attnwatch.ci.timing.sampler import RawMeasurement, Subject, measure_interleaved
from attnwatch.ci.timing.gpu_state import NullMonitor, decode_reasons, is_throttling
from attnwatch.ci.timing.timers import CpuWallTimer, NoFlush
from attnwatch.history.contract.bundle import CaseTiming


class ReplayTimer:
    """A block timer that replays recorded per-call samples (the fixtures' real H200 noise)."""

    mode = "cuda_events"

    def __init__(self, samples: dict[str, list[float]]) -> None:
        self.samples = {k: list(v) for k, v in samples.items()}
        self.order: list[str] = []

    def time_block(self, fn, calls, flusher, key=None):
        key = fn()
        self.order.append(key)
        out, self.samples[key] = self.samples[key][:calls], self.samples[key][calls:]
        if not out:
            raise RuntimeError(f"{key}: recording exhausted")
        return out

    def synchronize(self):
        return None


class ScriptedMonitor(NullMonitor):
    def __init__(self, reasons_per_read: list[list[str]]) -> None:
        self.script = list(reasons_per_read)

    def sm_clock_mhz(self):
        return 1980

    def reasons(self):
        return self.script.pop(0) if self.script else []


def _config(**changes) -> TimingConfig:
    return timing_config("cuda").with_overrides(**{"time_cap_s": 60.0, **changes})


@pytest.fixture(scope="module")
def h200(fixtures_dir):
    data = json.loads((fixtures_dir / "timing" / "h200_event_samples.json").read_text())
    proc = data["processes"]["process0"]
    return {k: v["us"][1:] for k, v in proc.items()}  # first call of each is a cold outlier


def test_config_files_load_with_reasons():
    for kind in ("cuda", "cpu"):
        cfg = timing_config(kind)
        assert cfg.min_samples <= cfg.max_samples
    assert default_dtypes("nightly") == ["fp16", "bf16"]
    with pytest.raises(ValueError, match="unknown keys"):
        TimingConfig.from_dict({**timing_config("cpu").to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="min_samples"):
        timing_config("cpu").with_overrides(min_samples=10, max_samples=5)


def test_gpu_timing_spreads_blocks_over_a_stream_pool_and_a_cpu_has_none():
    assert timing_config("cuda").streams == 32  # torch's whole per-device pool (ci/run_config.toml)
    assert timing_config("cpu").streams == 1
    with pytest.raises(ValueError, match="streams"):
        timing_config("cuda").with_overrides(streams=0)
    CpuWallTimer().renew_streams()  # the worker renews every round on any device: a no-op here


def test_sampler_stops_on_spread_target_with_real_noise(h200):
    key = "torch_3op/B16_H16_S2048_D64"  # IQR/median ~0.1% on the H200
    timer = ReplayTimer({key: h200[key]})
    raw = measure_interleaved(
        [Subject(key, lambda: key)], _config(min_samples=40, target_rel_spread=0.01), timer, NoFlush(), NullMonitor()
    )[key]
    assert raw.converged
    assert 40 <= len(raw.samples_us) <= 50  # stopped at the first block past min_samples
    assert raw.timing_mode == "cuda_events"


def test_sampler_caps_samples_when_spread_stays_high(h200):
    key = "sdpa_cudnn/B1_H16_S1024_D64"  # bimodal 17.6/18.5 us: IQR/median ~4%
    timer = ReplayTimer({key: h200[key]})
    raw = measure_interleaved(
        [Subject(key, lambda: key)],
        _config(min_samples=20, max_samples=120, target_rel_spread=0.001),
        timer,
        NoFlush(),
        NullMonitor(),
    )[key]
    assert not raw.converged
    assert len(raw.samples_us) == 120


def test_round_robin_rotates_and_interleaves(h200):
    keys = ["sdpa_cudnn/B4_H16_S1024_D64", "sdpa_flash/B4_H16_S1024_D64", "torch_3op/B4_H16_S1024_D64"]
    timer = ReplayTimer({k: h200[k] for k in keys})
    cfg = _config(min_samples=50, max_samples=50, block_calls=10)
    measure_interleaved([Subject(k, (lambda k=k: k)) for k in keys], cfg, timer, NoFlush(), NullMonitor())
    rounds = [timer.order[i : i + 3] for i in range(0, len(timer.order), 3)]
    assert len(rounds) == 5 and all(sorted(r) == sorted(keys) for r in rounds)
    assert [r[0] for r in rounds[:3]] == keys  # the first subject of a round rotates


def test_throttled_blocks_are_flagged_and_counted(h200):
    key = "sdpa_flash/B4_H16_S1024_D64"
    monitor = ScriptedMonitor([[], ["sw_power_cap"], ["gpu_idle"], ["hw_thermal_slowdown"]])
    raw = measure_interleaved(
        [Subject(key, lambda: key)],
        _config(min_samples=40, max_samples=40, block_calls=10),
        ReplayTimer({key: h200[key]}),
        NoFlush(),
        monitor,
    )[key]
    assert raw.throttled_samples == 20
    assert raw.throttle_reasons == ["sw_power_cap", "gpu_idle", "hw_thermal_slowdown"]
    assert raw.sm_clock_mhz_before == raw.sm_clock_mhz_after == 1980


def test_nvml_reason_bits_decode():
    assert decode_reasons(0x1 | 0x4 | 0x40) == ["gpu_idle", "sw_power_cap", "hw_thermal_slowdown"]
    assert not is_throttling(["gpu_idle", "applications_clocks_setting"])
    assert is_throttling(["hw_slowdown"])


def test_a_raising_subject_is_dropped_others_continue():
    def bad():
        raise ValueError("boom")

    raws = measure_interleaved(
        [Subject("bad", bad), Subject("good", lambda: sum(range(50)))],
        timing_config("cpu").with_overrides(max_samples=10, min_samples=5),
        CpuWallTimer(),
        NoFlush(),
        NullMonitor(),
    )
    assert raws["bad"].error == "ValueError: boom" and not raws["bad"].samples_us
    assert len(raws["good"].samples_us) >= 5 and raws["good"].timing_mode == "cpu_wall"


def test_fatal_errors_propagate_with_their_subject():
    from attnwatch.ci.timing.sampler import SubjectFailed

    def poisoned():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    with pytest.raises(SubjectFailed) as info:
        measure_interleaved(
            [Subject("p", poisoned)],
            timing_config("cpu"),
            CpuWallTimer(),
            NoFlush(),
            NullMonitor(),
            is_fatal=lambda exc: "CUDA error" in str(exc),
        )
    assert info.value.key == "p"


def _timing(variant: str, median: float, group: str = "g") -> CaseTiming:
    dims = PlannedCase(variant, "b4_h16_s1k", 4, 16, 1024, 64, "fp16", True)
    raw = RawMeasurement(key=dims.case_id, timing_mode="cuda_events", samples_us=[median * 0.99, median, median * 1.01])
    return case_timing(dims, raw, group)


def test_derived_metrics_follow_the_design_definitions():
    t = _timing("triton_fa2", 40.0)
    assert t.median_us == pytest.approx(40.0)
    assert t.us_per_head == pytest.approx(40.0 / 64)
    flops = 4 * 4 * 16 * 1024 * 1024 * 64 / 2  # causal halves
    assert t.tflops == pytest.approx(flops / 40e-6 / 1e12)
    assert t.rel_spread == pytest.approx(t.iqr_us / t.median_us)


def test_gaps_only_within_an_interleave_group():
    group_a = [
        _timing("sdpa", 40.0, "a"),
        _timing("sdpa_flash", 60.0, "a"),
        _timing("sdpa_cudnn", 38.0, "a"),
        _timing("triton_fa2", 42.0, "a"),
    ]
    group_b = [_timing("triton_fa2", 50.0, "b")]  # no sdpa measured with it: no gap
    apply_gaps(group_a + group_b, {"attention": "sdpa"}, {"attention": ["sdpa_flash", "sdpa_cudnn", "fa4_sm90"]})
    fa2 = group_a[3]
    assert (fa2.gap_to_baseline, fa2.baseline_variant) == (pytest.approx(42.0 / 40.0), "sdpa")
    assert fa2.gap_to_backends == {"sdpa_cudnn": pytest.approx(42 / 38), "sdpa_flash": pytest.approx(42 / 60)}
    assert fa2.fastest_reference == "sdpa_cudnn" and fa2.gap_to_fastest_reference == pytest.approx(42 / 38)
    assert group_a[0].gap_to_baseline == 1.0
    assert group_b[0].gap_to_baseline is None and group_b[0].fastest_reference is None


def test_journal_survives_torn_last_line(tmp_path):
    path = tmp_path / "j.jsonl"
    writer = JournalWriter(path)
    reader = JournalReader(path)
    writer.write("begin", case="a", stage="prepare")
    with open(path, "ab") as fh:
        fh.write(b'{"kind": "beat", "ca')  # a child killed mid-write
    events = reader.read_new()
    assert [e["kind"] for e in events] == ["begin"]
    with open(path, "ab") as fh:
        fh.write(b'se": "a"}\n')
    assert reader.read_new()[0]["case"] == "a"
    writer.close()


def test_cpu_wall_timer_measures_real_time():
    import time

    samples = CpuWallTimer().time_block(lambda: time.sleep(0.002), 3, NoFlush())
    assert len(samples) == 3 and all(s >= 2000 for s in samples) and all(math.isfinite(s) for s in samples)


def test_guard_policy_grows_past_the_host_enqueue_time_and_bounds_retries():
    from attnwatch.ci.timing.timers import GuardPolicy

    policy = GuardPolicy(initial_us=1000.0, growth=2.0, max_us=50_000.0, max_attempts=3)
    assert policy.guard_us() == 1000.0
    # the host took 3 ms to enqueue: the next guard must outlast that
    assert policy.after_block(covered=False, enqueue_us=3000.0, attempt=0) is True
    assert policy.guard_us() == 6000.0 and policy.retimed_blocks == 1
    assert policy.after_block(covered=False, enqueue_us=3000.0, attempt=1) is True
    assert policy.guard_us() == 12000.0
    # the last attempt is kept, and counted as uncovered rather than silently clean
    assert policy.after_block(covered=False, enqueue_us=3000.0, attempt=2) is False
    assert policy.uncovered_blocks == 1
    for _ in range(10):
        policy.after_block(covered=False, enqueue_us=1e6, attempt=0)
    assert policy.guard_us() == 50_000.0  # capped


def test_guard_policy_shrinks_back_to_what_the_subject_needs():
    from attnwatch.ci.timing.timers import GuardPolicy

    policy = GuardPolicy(initial_us=1000.0, growth=2.0, max_us=50_000.0, max_attempts=4, floor_us=200.0, window=8)
    policy.after_block(covered=False, enqueue_us=8000.0, attempt=0)  # one slow enqueue (a first call)
    assert policy.guard_us() == 16_000.0
    guards = []
    for _ in range(8):  # then blocks that enqueue in 150 µs: the slow one counts until it leaves the window
        assert policy.after_block(covered=True, enqueue_us=150.0, attempt=0) is False
        guards.append(policy.guard_us())
    assert guards == [16_000.0] * 7 + [300.0]  # then 2 x 150 µs
    for _ in range(8):
        policy.after_block(covered=True, enqueue_us=10.0, attempt=0)
    assert policy.guard_us() == 200.0  # never below the floor


def test_guard_policy_sizes_from_first_attempts_not_from_retimings():
    from attnwatch.ci.timing.timers import GuardPolicy

    # A block's first attempt follows another subject's block and enqueues in 600 µs; its
    # immediate re-timing, warm, in 200 µs. Sized from the re-timing (400 µs), every first
    # attempt would fail again; sized from first attempts, the next one is covered.
    policy = GuardPolicy(initial_us=500.0, growth=2.0, max_attempts=4)
    assert policy.after_block(covered=False, enqueue_us=600.0, attempt=0, key="k") is True
    assert policy.after_block(covered=True, enqueue_us=200.0, attempt=1, key="k") is False
    assert policy.guard_us("k") == 1200.0
    for _ in range(20):  # steady state: first attempts of 600 µs under a 1200 µs guard are covered
        assert policy.after_block(covered=policy.guard_us("k") > 600.0, enqueue_us=600.0, attempt=0, key="k") is False
    assert policy.retimed_blocks == 1


def test_guard_policy_keeps_one_guard_per_subject():
    from attnwatch.ci.timing.timers import GuardPolicy

    policy = GuardPolicy(initial_us=1000.0, growth=2.0, max_us=50_000.0, max_attempts=4)
    # sdpa_math's many ops take 5 ms to enqueue; a one-kernel case beside it takes 100 µs.
    policy.after_block(covered=False, enqueue_us=5000.0, attempt=0, key="sdpa_math")
    policy.after_block(covered=True, enqueue_us=5000.0, attempt=1, key="sdpa_math")
    policy.after_block(covered=True, enqueue_us=100.0, attempt=0, key="triton_fa2")
    assert policy.guard_us("sdpa_math") == 10_000.0  # what that case needs
    assert policy.guard_us("triton_fa2") == 200.0  # 2 x its own enqueue, not the slow neighbour's guard
    assert policy.guard_us("not seen yet") == 1000.0


def test_open_device_refuses_anything_but_a_device_kind_name():
    """A namespace or torch.device once fell through to the host timer, which times a GPU call's
    launch, not the call (a calibration read 1000x medians that no spin moved)."""
    from types import SimpleNamespace

    from attnwatch.ci.run_config import timing_config
    from attnwatch.ci.suites.case_setup import open_device

    for wrong in (SimpleNamespace(device_kind="cuda"), "gpu", None):
        with pytest.raises(ValueError, match="device kind must be 'cuda' or 'cpu'"):
            open_device(wrong, timing_config("cpu"))
    import torch

    threads = torch.get_num_threads()
    try:
        assert open_device("cpu", timing_config("cpu"))[2].mode == "cpu_wall"
    finally:
        torch.set_num_threads(threads)  # open_device pins one intra-op thread for the process
