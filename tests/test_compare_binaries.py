"""A compare reads both sides' kernel binaries and says how their code differs: real nvcc builds
(sm_90a, no GPU needed) of cuda_scalar from this checkout and from a copy with one added
barrier in its key loop; the line leads the explained case's cause in compare.json."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attnwatch.ci.compare.binaries import code_changes
from attnwatch.history.analysis.sass import find_tool
from attnwatch.history.analysis.sass_diff import BinaryDiff, KernelDiff, OpcodeChange, describe_binaries

REPO = Path(__file__).resolve().parent.parent
LOOP = "        __syncthreads();\n"


@pytest.mark.skipif(
    shutil.which("nvcc") is None or find_tool("cuobjdump") is None,
    reason="needs nvcc and cuobjdump to build and read sm_90a cubins",
)
def test_an_added_barrier_is_named_in_the_code_change(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "cache"))
    head = tmp_path / "head"
    shutil.copytree(REPO / "kernels", head / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    source = head / "kernels" / "cuda" / "cuda_scalar.cu"
    text = source.read_text()
    assert text.count(LOOP) == 1  # the barrier after the K/V tile is loaded, inside the key loop
    source.write_text(text.replace(LOOP, LOOP + "        __syncthreads();  // planted\n"))
    said = []
    found = code_changes(
        ["cuda_scalar", "triton_fa2"], {"base": None, "head": head}, tmp_path / "work", said.append, arch="sm_90a"
    )
    assert set(found) == {"cuda_scalar"}, said  # Triton's binaries are not read by the compare
    text = describe_binaries(found["cuda_scalar"])
    assert all(part.split(": ", 1)[1] == "+1 BAR in a loop" for part in text.split(" | ")), text
    # the same tree on both sides: nothing to say
    assert (
        code_changes(["cuda_scalar"], {"base": None, "head": None}, tmp_path / "work2", said.append, arch="sm_90a")
        == {}
    )


def test_the_code_change_leads_the_cause(fixtures_dir):
    from attnwatch.ci.compare.analysis import compare_rounds
    from attnwatch.ci.ncu.aggregate import group_by_case
    from attnwatch.ci.ncu.parse import parse_ncu_csv
    from attnwatch.history.analysis.ncu_explain import combine_kernels
    from attnwatch.history.analysis.thresholds import load_thresholds
    from compare_factory import make_rounds

    case = "sdpa_flash/b4_h16_s1k/fp16/noncausal"
    groups = group_by_case(parse_ncu_csv(fixtures_dir / "ncu" / "h200_raw_pr_default.csv").kernels)
    counters = combine_kernels(k.metrics for k in groups["cuda_wmma/b4_h16_s1k/fp16/noncausal"])
    base, head = make_rounds(fixtures_dir, slowdown={case: 1.06}, counters={case: (counters, counters)})
    variant_diff = BinaryDiff([KernelDiff("k", [OpcodeChange("BAR", "barrier", "in a loop", 0, 1)])])

    def judged(code_changes):
        compared = compare_rounds(
            base, head, load_thresholds("NVIDIA H200"), method="hierarchical", resamples=400, code_changes=code_changes
        )
        (slow,) = [c for c in compared if c.case_id == case]
        return slow

    slow = judged({"sdpa_flash": variant_diff})
    # the case's launches (cuda_wmma's kernel) and the binaries' kernel ("k") cannot be compared
    # by name, so the whole diff is said
    assert slow.verdict == "regression" and slow.explanation.cause == "k: +1 BAR in a loop"
    # a binary compiled at run time is a case's (ci/compare/runtime_binaries.py): keyed by case id
    # it leads that case's cause, over its variant's
    case_diff = BinaryDiff([KernelDiff("k", [], resources={"registers": (223, 168)})])
    assert judged({"sdpa_flash": variant_diff, case: case_diff}).explanation.cause == "k: registers 223 → 168"
