"""scripts/gpu_pair_check.py's reading of two bundles and its verdict on their GPU identities,
on bundles written by the project's own writer (the GPU run itself happens on the GPU machine)."""

from __future__ import annotations

import pytest

from bundle_factory import make_bundle
from attnwatch.scripts.gpu_pair_check import compare_medians, identity_verdict, read_bundle

GPU0 = {"gpu_uuid": "GPU-0a0a", "gpu_pci_bus_id": "00000000:19:00.0", "gpu_index": 0}
GPU1 = {"gpu_uuid": "GPU-1b1b", "gpu_pci_bus_id": "00000000:3B:00.0", "gpu_index": 1}


@pytest.fixture
def pair(tmp_path):
    a = read_bundle(make_bundle(tmp_path / "a", run_id="a", variants=("sdpa",), environment=GPU0, seed=1))
    b = read_bundle(
        make_bundle(tmp_path / "b", run_id="b", variants=("sdpa",), environment=GPU1, seed=2, latency_scale=1.02)
    )
    return {"0": a, "1": b}


def test_a_bundle_is_read_for_identity_clocks_and_medians(pair):
    a = pair["0"]
    assert (a["gpu_uuid"], a["gpu_pci_bus_id"], a["gpu_index"], a["status"]) == (
        "GPU-0a0a",
        "00000000:19:00.0",
        0,
        "complete",
    )
    assert a["case_clock_before_mhz"] == [1980, 1980] and len(a["medians_us"]) == 4


def test_medians_are_compared_case_by_case(pair):
    result = compare_medians(pair["0"]["medians_us"], pair["1"]["medians_us"])
    assert result["summary"]["cases"] == 4
    assert 1.0 < result["summary"]["geomean"] < 1.04  # the planted 2%, through 1% sample noise


def test_identity_verdict(pair):
    expected = {"0": "GPU-0a0a", "1": "GPU-1b1b"}
    assert identity_verdict(pair, expected, seen={}) == []
    swapped = {"0": "GPU-1b1b", "1": "GPU-0a0a"}
    assert len(identity_verdict(pair, swapped, seen={})) == 2
    both_gpu0 = {"0": pair["0"], "1": {**pair["1"], "gpu_uuid": "GPU-0a0a"}}
    assert "do not name distinct GPUs" in identity_verdict(both_gpu0, {}, seen={})[0]
    # NVML saw run 0's measuring process on GPU 1 although its bundle says GPU 0.
    pair["0"]["child_pids"] = [4242]
    assert "ran on ['GPU-1b1b']" in identity_verdict(pair, expected, seen={"GPU-1b1b": {4242}})[0]
