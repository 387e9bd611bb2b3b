"""scripts/bisect_check.py's calibration of the planted spin: the line fitted through timed spins,
its refusals, the ratio read back from a compare, and that the plant timed is the plant
committed. The end-to-end run (calibration compare and bisect on this CPU) is
tests/test_bisect_cli.py's slow test."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "bisect_check.py"


@pytest.fixture(scope="module")
def check():
    spec = importlib.util.spec_from_file_location("bisect_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_spin_is_where_the_fitted_line_reaches_the_asked_share(check):
    # 20 us call; the spin's launch adds 1% on its own, each 1000 units 1% more
    base = 20.0
    points = [(s, base * (1 + 0.01 + s * 1e-5)) for s in (2000, 4000, 8000)]
    spin, a, b = check.fit_spin(base, points, 0.05)
    assert spin == 4000 and a == pytest.approx(0.01) and b == pytest.approx(1e-5)


def test_a_plant_that_cannot_realize_the_share_is_refused(check):
    with pytest.raises(check.CalibrationError, match="launch alone realizes \\+8.0%, more than the asked \\+5.0%"):
        check.fit_spin(20.0, [(1000, 20.0 * 1.09), (2000, 20.0 * 1.10)], 0.05)
    with pytest.raises(check.CalibrationError, match="did not make the call slower"):
        check.fit_spin(20.0, [(1000, 21.0), (2000, 21.0)], 0.05)


def test_the_realized_ratio_is_the_bad_revisions_interval(check):
    result = {
        "commits": ["g", "b"],
        "probes": [
            {
                "sha": "b",
                "intervals": ["torch_3op/h100_small/fp16/noncausal x1.051 [1.032, 1.070] (+5.1% [+3.2%, +7.0%])"],
            }
        ],
    }
    ratio, text = check.realized_ratio(result)
    assert ratio == pytest.approx(1.051) and "[1.032, 1.070]" in text
    assert check.realized_ratio({"commits": ["g", "b"], "probes": []}) == (None, None)


def test_the_plant_timed_is_the_plant_committed(check, tmp_path, monkeypatch):
    import scratch_checkout  # the copy bisect_check imported: on the path once it is loaded

    monkeypatch.setattr(scratch_checkout, "tree_files", lambda: [check.VARIANT_FILE])
    history = check.build_history(tmp_path, 2, 2, 0.05, 1234)
    text = (tmp_path / check.VARIANT_FILE).read_text()
    assert check.PLANT in text and "PLANTED_SPIN = 1234  #" in text
    assert "return Prepared(fn=_planted(run, q.is_cuda, case.id)," in text
    assert len(history["commits"]) == 2 and history["planted"] == history["bad"]
    calls = []
    slept = check.planted(lambda: calls.append(1), 20_000, on_gpu=False)  # CPU: 5 ms steady + 20 ms
    began = time.perf_counter()
    slept()
    assert calls == [1] and time.perf_counter() - began >= 0.025


def test_a_spin_per_case_plants_only_the_cases_it_names(check, tmp_path, monkeypatch):
    """scripts/select_check.py calibrates one spin per case: the others run unplanted."""
    import scratch_checkout  # the copy bisect_check imported: on the path once it is loaded

    monkeypatch.setattr(scratch_checkout, "tree_files", lambda: [check.VARIANT_FILE])
    check.build_history(tmp_path, 1, 1, 0.05, {"torch_3op/cpu_tiny/fp16/causal": 20_000})
    text = (tmp_path / check.VARIANT_FILE).read_text()
    spin_line = next(line for line in text.splitlines() if line.startswith("PLANTED_SPIN = "))
    namespace = {}
    exec(compile(spin_line + "\n" + text[text.index("CPU_STEADY_S") :], "<plant>", "exec"), namespace)
    assert namespace["PLANTED_SPIN"] == {"torch_3op/cpu_tiny/fp16/causal": 20_000}
    for case_id, least in (("torch_3op/cpu_tiny/fp16/causal", 0.025), ("torch_3op/cpu_tiny/fp16/noncausal", 0.005)):
        began = time.perf_counter()
        namespace["_planted"](lambda: None, False, case_id)()
        took = time.perf_counter() - began
        assert took >= least and (least > 0.01 or took < 0.02)
