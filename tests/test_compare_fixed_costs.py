"""What a compare's parent pays before its workers start, outside the measured parts of
compare.json's `times` ("other"): it reads the device through NVML only, never importing torch
or running nvcc for a record it does not keep (each worker records its own environment)."""

from __future__ import annotations

import subprocess
import sys

from attnwatch.ci.compare.setup import device_kind
from attnwatch.ci.environment import capture_environment


def test_the_parent_reads_the_device_kind_without_importing_torch():
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys\nfrom attnwatch.ci.compare.setup import device_kind\n"
            "print(device_kind(), 'torch' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("False")


def test_the_device_kind_is_what_the_environment_record_says():
    env = capture_environment(probe_device=False)
    assert device_kind() == (env.device_kind, env.gpu_name)


def test_other_is_split_into_outside_the_rounds_requests_and_the_rest():
    """A compare's wall: 20 s, of which 16 s in the rounds (looks 1 s), 1.5 s final judging, 0.5 s ncu."""
    from types import SimpleNamespace

    from attnwatch.ci.compare.costs import format_other, other_split, time_breakdown
    from attnwatch.ci.compare.side import SideTimes

    sides = {
        name: SimpleNamespace(
            times=SideTimes(
                startup_s=2.0,
                build_s=1.0,
                fingerprint_s=0.5,
                correctness_s=1.0,
                prepare_s=1.0,
                timing_s=2.0,
                requests_s=4.5,
            )
        )
        for name in ("base", "head")
    }
    session = SimpleNamespace(sides=sides, select_s=0.25, measured=SimpleNamespace(wall_s=16.0, looks_s=1.0))
    times = time_breakdown(session, wall_s=20.0, judging_s=1.5, profiling_s=0.5)
    split = other_split(session, times)
    assert times["other_s"] == 20.0 - (2.0 + 1.0 + 0.75 + 2.0 + 6.0 + 2.5 + 0.5)  # 5.25
    assert split == {"outside_s": 2.0, "requests_s": 1.0, "rest_s": 2.25}
    assert format_other(split) == ("other = outside the rounds 2.0 + requests beyond their stages 1.0 + the rest 2.2")
