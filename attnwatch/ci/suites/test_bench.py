"""One pytest-benchmark test per planned case: `test_bench[<variant>/<shape>/<dtype>/<causal>]`.

The device statistics (interleaved CUDA-event timing, ci.timing) are measured by the group
measurer and journalled once, in the case's `result` event (a history.contract.bundle.CaseTiming; the
bundle's timings.json). pytest-benchmark's own `stats` are a second, real measurement of the
same case: host wall-clock seconds per synchronized call (`benchmark.pedantic`, L2 flushed and
the device idle before each round), labelled in `extra_info["attnwatch_stats_are"]`; the entry
names its case in `extra_info["attnwatch_case"]`.
"""

from __future__ import annotations

import pytest

from attnwatch.ci.suites.worker import CaseResult
from attnwatch.history.contract.bundle import CASE_LINK_KEY

HOST_STATS_LABEL = (
    "host wall-clock seconds per synchronized call (launch + device time + sync), L2 flushed before each round"
)
CPU_STATS_LABEL = "host wall-clock seconds per call on the CPU"


def test_bench(case_id, measurer, journal, benchmark):
    planned_case = measurer.case(case_id)
    result: CaseResult = measurer.result(planned_case)
    if result.status in ("skipped", "unsupported"):
        measurer.outcome(planned_case, result.status, result.error)
        pytest.skip(f"{result.status}: {result.error}")
    if result.status != "ok" or result.timing is None:
        measurer.outcome(planned_case, "failed", result.error)
        pytest.fail(f"{planned_case.case_id}: {result.error}", pytrace=False)

    benchmark.group = planned_case.group
    benchmark.extra_info[CASE_LINK_KEY] = planned_case.case_id
    try:
        _host_timing(planned_case, measurer, benchmark, result.fn)
    except Exception as exc:  # a CUDA error never gets here: measurer.phase ends the child
        measurer.outcome(planned_case, "failed", f"host timing: {type(exc).__name__}: {exc}")
        raise
    journal.write("bench", case=planned_case.case_id, entry=benchmark.stats.as_dict(include_data=False))
    measurer.outcome(planned_case, "ok")


def _host_timing(planned_case, measurer, benchmark, fn) -> None:
    with measurer.phase(planned_case.case_id, "host_timing"):
        if measurer.plan.device_kind == "cuda":
            import torch

            benchmark.extra_info["attnwatch_stats_are"] = HOST_STATS_LABEL

            def setup():
                measurer.flusher.flush()
                torch.cuda.synchronize()

            def call_and_sync():
                fn()
                torch.cuda.synchronize()

            benchmark.pedantic(call_and_sync, setup=setup, rounds=measurer.config.host_rounds, warmup_rounds=1)
        else:
            benchmark.extra_info["attnwatch_stats_are"] = CPU_STATS_LABEL
            benchmark.pedantic(fn, rounds=measurer.config.host_rounds, warmup_rounds=1)
