"""Text that reaches the screen from untrusted data, and the provenance of the measured ceilings the
roofline draws (history/analysis/ceilings.toml; its loader's own checks are in test_history_ceilings.py)."""

from __future__ import annotations

import json

from attnwatch.app.ui import code_span, escape_markdown, safe_file_name, truncate
from attnwatch.history.analysis.ceilings import find_ceiling


def test_escape_markdown_neutralises_markup():
    text = "<script>x</script> **b** [l](javascript:y) `c` $m$ # h | t"
    escaped = escape_markdown(text)
    for ch in "<*[]()`$#|":
        assert f"\\{ch}" in escaped
    assert "\\<script\\>" in escaped


def test_code_span_cannot_be_closed_early():
    assert code_span("a`b\nc") == "`a'b c`"


def test_truncate_keeps_the_first_line_and_drops_control_characters():
    assert truncate("first\x1b[31m line\nsecond") == "first[31m line"
    assert truncate(None) == "" and truncate("") == ""


def test_safe_file_name():
    assert safe_file_name("compare_../../etc/passwd;rm.csv") == "compare_.._.._etc_passwd_rm.csv"


def test_h200_ceilings_are_the_recorded_measurement(fixtures_dir):
    recorded = json.loads((fixtures_dir / "timing" / "h200_sdpa_backends.json").read_text())["ceilings"]
    fp16 = find_ceiling("NVIDIA H200", "matmul_tflops", "fp16")
    bf16 = find_ceiling("NVIDIA H200", "matmul_tflops", "bf16")
    copy = find_ceiling("NVIDIA H200", "copy_tbps", "fp16")
    assert fp16.value == recorded["gemm_fp16_8192_tflops"]
    assert bf16.value == recorded["gemm_bf16_8192_tflops"]
    assert copy.value == recorded["d2d_copy_TBps"]
    assert all("h200_sdpa_backends.json" in c.measured for c in (fp16, bf16, copy))


def test_unknown_gpu_has_no_ceilings():
    assert find_ceiling("NVIDIA L4", "matmul_tflops", "fp16") is None
    assert find_ceiling("NVIDIA L4", "copy_tbps") is None
