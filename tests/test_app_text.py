"""Text that reaches the screen from untrusted data, and the measured ceilings' provenance."""

from __future__ import annotations

import json

import pytest

from app.data.ceilings import CeilingsError, load_ceilings
from app.ui import code_span, escape_hover, escape_markdown, safe_file_name, truncate


def test_escape_markdown_neutralises_markup():
    text = "<script>x</script> **b** [l](javascript:y) `c` $m$ # h | t"
    escaped = escape_markdown(text)
    for ch in "<*[]()`$#|":
        assert f"\\{ch}" in escaped
    assert "\\<script\\>" in escaped


def test_code_span_cannot_be_closed_early():
    assert code_span("a`b\nc") == "`a'b c`"


def test_escape_hover_escapes_html_and_truncates():
    hover = escape_hover("<b>x</b> & " + "y" * 200, limit=40)
    assert hover.startswith("&lt;b&gt;x&lt;/b&gt; &amp; ") and len(truncate("<b>x</b> & " + "y" * 200, 40)) == 40
    assert "<" not in hover


def test_truncate_keeps_the_first_line_and_drops_control_characters():
    assert truncate("first\x1b[31m line\nsecond") == "first[31m line"
    assert truncate(None) == "" and truncate("") == ""


def test_safe_file_name():
    assert safe_file_name("compare_../../etc/passwd;rm.csv") == "compare_.._.._etc_passwd_rm.csv"


def test_h200_ceilings_are_the_recorded_measurement(fixtures_dir):
    recorded = json.loads((fixtures_dir / "timing" / "h200_sdpa_backends.json").read_text())["ceilings"]
    ceilings = load_ceilings("NVIDIA H200")
    assert ceilings.peak_for("fp16") == recorded["gemm_fp16_8192_tflops"]
    assert ceilings.peak_for("bf16") == recorded["gemm_bf16_8192_tflops"]
    assert ceilings.dram_tbps == recorded["d2d_copy_TBps"]
    assert all("h200_sdpa_backends.json" in reason or "same file" in reason for reason in ceilings.reasons.values())


def test_unknown_gpu_has_no_ceilings():
    assert load_ceilings("NVIDIA L4") is None


def test_a_ceiling_without_provenance_is_refused(tmp_path):
    bad = tmp_path / "ceilings.toml"
    bad.write_text('[gpu."X"]\nfp16_tflops = 900.0\ndram_tbps = 3.0\ndram_tbps_reason = "measured"\n')
    with pytest.raises(CeilingsError, match="fp16_tflops_reason"):
        load_ceilings("X", bad)
