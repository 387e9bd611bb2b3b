"""The engine for callables that are not registry variants: the pytest plugin's `gpu_benchmark`.

A user's benchmark hands over a call (and, optionally, a reference call of the same work);
they are measured with the recipe of every other measurement (docs/design.md "Measurement
recipe"), on the same parts as `Engine` (ci/engine/group.py): the device, L2 flusher, guarded
block timer with its stream pool and clock monitor of ci/suites/case_setup.py; warm-up (the
first call of the process for `warmup_min_s`, so clocks leave idle), the interleaved adaptive
sampler of ci/timing/sampler.py (call and reference round-robin, so drift hits both alike),
CUDA-graph replay of a launch-bound call, the settings of ci/run_config.toml ([timing.cuda] or
[timing.cpu]), and statistics by history.analysis.statistics.summarize. What it does not do is
what the user's own test owns: inputs are theirs (no input rotation or placement spacer), and
correctness is judged by the plugin against what the test passed.

On a CPU the timer is host wall-clock (`cpu_wall`), which every record then says.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable

from attnwatch.ci.engine.group import interleave_id
from attnwatch.ci.run_config import TimingConfig, timing_config
from attnwatch.ci.suites.case_setup import device_monitor, open_device
from attnwatch.ci.timing.derived import apply_gaps
from attnwatch.ci.timing.sampler import RawMeasurement, Subject, measure_interleaved, warm_up
from attnwatch.ci.timing.graphs import graph_replay_us
from attnwatch.history.analysis.statistics import median, summarize
from attnwatch.history.contract.bundle import CaseTiming

CPU_NOTE = (
    "cpu_wall: host wall-clock per call on a CPU with one intra-op thread (torch.set_num_threads(1) while "
    "measuring), caches not flushed; not a GPU measurement"
)
CUDA_NOTE = "cuda_events: device time per call from a CUDA event pair, L2 flushed before each call, blocks guarded"


class CallableEngine:
    """One per process and device kind: the device opened once, each `measure` a new round."""

    def __init__(self, device_kind: str, config: TimingConfig | None = None) -> None:
        self.device_kind = device_kind
        self.config = config or timing_config(device_kind)
        self.device, self.flusher, self.timer = open_device(device_kind, self.config)
        self.monitor = device_monitor(device_kind, self.device)
        self.rounds = 0  # measure calls so far: each is its own interleave group
        self.warm = False  # clocks left idle: the first warm-up of the process ran for warmup_min_s
        self.note = CUDA_NOTE if device_kind == "cuda" else CPU_NOTE

    def sync(self) -> None:
        import torch

        if self.device_kind == "cuda":
            torch.cuda.synchronize()

    def measure(self, subjects: list[Subject], group: str) -> tuple[dict[str, RawMeasurement], str]:
        """Warm up and time `subjects` interleaved; graph replay of a launch-bound one.
        Returns the raw measurements and the interleave group id they share. On a CPU, with one
        intra-op thread (as open_device sets it, CPU_NOTE): the caller restores its own count."""
        if self.device_kind == "cpu":
            import torch

            torch.set_num_threads(1)
        self.timer.renew_streams()
        self.rounds += 1
        for subject in subjects:
            warm_up(
                subject.fn,
                self.config.with_overrides(warmup_min_s=0.0) if self.warm else self.config,
                self.timer,
                self.flusher,
            )
            self.warm = True
        raws = measure_interleaved(subjects, self.config, self.timer, self.flusher, self.monitor, after_block=self.sync)
        for subject in subjects:
            raw = raws[subject.key]
            if (
                raw.error is None
                and self.device_kind == "cuda"
                and raw.samples_us
                and median(raw.samples_us) < self.config.graph_threshold_us
            ):
                try:
                    raw.graph_median_us, raw.graph_note = graph_replay_us(
                        subject.fn, self.flusher, self.config.graph_calls, self.config.graph_replays
                    )
                except Exception as exc:  # noqa: BLE001 - a side figure: its error costs it, not the case
                    raw.graph_median_us, raw.graph_note = None, f"graph replay failed: {type(exc).__name__}: {exc}"
        return raws, interleave_id(group, self.rounds)

    def host_call(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """`fn` followed by a device synchronization: what a host wall-clock sample should time."""

        def call() -> Any:
            out = fn()
            self.sync()
            return out

        return call

    def before_host_call(self) -> None:
        """The L2 flush and an idle device before a host-timed call (pytest-benchmark's rounds)."""
        self.flusher.flush()
        self.sync()


# The operator of a pytest-plugin case: the user's callable, none of kernels.operators (its work
# is the FLOP and byte counts the test gave, not an operator's model).
CALLABLE_OPERATOR = "callable"


def callable_timing(
    case_id: str,
    variant: str,
    shape_id: str,
    dtype: str,
    raw: RawMeasurement,
    group_id: str,
    flops: float | None,
    nbytes: float | None = None,
) -> CaseTiming:
    """A CaseTiming of a callable: the samples' Summary and what was measured how.

    A callable has no attention shape: batch, heads and the lengths are 1 (so µs/head is the
    median), causal is false, its operator is CALLABLE_OPERATOR (not attention), TFLOPS is flops /
    median when the test gave `flops=`, else 0 (the measurement record's `flops_per_call` is then
    null and says it is unknown), and `bytes` is the test's `bytes=` (None when not given).
    """
    s = summarize(raw.samples_us)
    return CaseTiming(
        case_id=case_id,
        variant=variant,
        shape_id=shape_id,
        batch=1,
        heads=1,
        seq_q=1,
        seq_k=1,
        head_dim=1,
        dtype=dtype,
        causal=False,
        timing_mode=raw.timing_mode,
        **asdict(s),
        us_per_head=s.median_us,
        tflops=(flops / (s.median_us * 1e-6) / 1e12) if flops else 0.0,
        converged=raw.converged,
        graph_median_us=raw.graph_median_us,
        sm_clock_mhz_before=raw.sm_clock_mhz_before,
        sm_clock_mhz_after=raw.sm_clock_mhz_after,
        throttle_reasons=list(raw.throttle_reasons),
        throttled_samples=raw.throttled_samples,
        interleave_group=group_id,
        guard_retimed_blocks=raw.guard_retimed_blocks,
        guard_uncovered_blocks=raw.guard_uncovered_blocks,
        operator=CALLABLE_OPERATOR,
        bytes=float(nbytes) if nbytes else None,
    )


def with_reference_gap(timing: CaseTiming, reference: CaseTiming) -> None:
    """The test's gap to its reference, taken as every gap is (ci/timing/derived.py)."""
    apply_gaps([timing, reference], {timing.operator: reference.variant}, {})
