"""history/analysis/ceilings.toml: the one set of measured ceilings CI and the dashboard both read."""

from __future__ import annotations

import re

import pytest

from attnwatch.history.analysis.ceilings import CEILINGS_FILE, CeilingsError, find_ceiling, load_ceilings
from attnwatch.history.errors import HistoryError

GOOD = """
[[ceiling]]
gpu = "X"
kind = "matmul_tflops"
dtype = "fp16"
value = 900.0
how = "GEMM 8192^3, median"
measured = "X, 2026-11-21"
"""


def test_ceilings_are_measured_data_with_provenance():
    ceiling = find_ceiling("NVIDIA H200", "matmul_tflops", "bf16")
    assert ceiling is not None and 600 < ceiling.value < 800 and ceiling.dtype == "bf16"
    assert "2026" in ceiling.measured and ceiling.how
    copy = find_ceiling("NVIDIA H200", "copy_tbps", "fp16")  # recorded once, for any dtype
    assert copy.dtype == "any" and copy.value == pytest.approx(4.22, abs=0.005) and copy.unit == "TB/s"
    assert find_ceiling("Some Other GPU", "matmul_tflops", "bf16") is None
    assert find_ceiling(None, "matmul_tflops", "bf16") is None


def test_every_shipped_entry_names_its_measurement():
    entries = load_ceilings(CEILINGS_FILE)
    assert len(entries) >= 3
    assert all(c.value > 0 and c.how.strip() and c.measured.strip() for c in entries)


def test_an_exact_dtype_wins_over_any(tmp_path):
    path = tmp_path / "ceilings.toml"
    path.write_text(GOOD + GOOD.replace('dtype = "fp16"', 'dtype = "any"').replace("900.0", "800.0"))
    assert find_ceiling("X", "matmul_tflops", "fp16", path).value == 900.0
    assert find_ceiling("X", "matmul_tflops", "bf16", path).value == 800.0


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (GOOD.replace('how = "GEMM 8192^3, median"\n', ""), "ceiling[0].how: every ceiling needs its provenance"),
        (
            GOOD.replace('measured = "X, 2026-11-21"', 'measured = " "'),
            "ceiling[0].measured: every ceiling needs its provenance",
        ),
        (GOOD.replace("900.0", "-1.0"), "ceiling[0].value: expected a positive number"),
        (GOOD.replace("900.0", "true"), "ceiling[0].value: expected a positive number"),
        (GOOD.replace("matmul_tflops", "datasheet_tflops"), "ceiling[0].kind: 'datasheet_tflops' is not one of"),
        (GOOD + 'note = "x"\n', "ceiling[0].note: unknown field"),
        (GOOD + GOOD, "ceiling[1]: X matmul_tflops fp16 is listed twice"),
        ("ceiling = 3\n", "ceiling: expected a list"),
        ("[[ceiling]\n", "not valid TOML"),
    ],
)
def test_a_bad_ceilings_file_is_refused_naming_file_and_field(tmp_path, text, field):
    path = tmp_path / "ceilings.toml"
    path.write_text(text)
    with pytest.raises(CeilingsError, match=re.escape(field)) as raised:
        load_ceilings(path)
    assert str(path) in str(raised.value) and isinstance(raised.value, HistoryError)


def test_unknown_kind_asked_for_is_an_error():
    with pytest.raises(CeilingsError, match="kind"):
        find_ceiling("NVIDIA H200", "peak_tflops")


def test_the_ceilings_file_ships_as_package_data():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert "*.toml" in pyproject["tool"]["setuptools"]["package-data"]["*"]
    assert CEILINGS_FILE.parent.name == "analysis" and CEILINGS_FILE.is_file()  # history/analysis, a package
