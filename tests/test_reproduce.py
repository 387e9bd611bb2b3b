"""The one command that measures a case again (history.reproduce): exact case, commits and
settings, shell-safe; and, in a real git repository, the command a PR comment row offers
measures exactly that case between exactly those commits."""

from __future__ import annotations

import re
import shlex

import pytest

from attnwatch.ci.comment.render import render_comment
from attnwatch.ci.compare.report import load_report
from git_clone import REPO_ROOT, attnwatch, clone_with_commits
from attnwatch.history.reproduce import compare_command, run_command
A, B = "a" * 40, "b" * 40


def test_commands_name_the_exact_case_and_commits():
    assert run_command("sdpa/b4_h16_s1k/bf16/causal", A) == (
        f"git checkout --detach {A} && attnwatch run --shapes b4_h16_s1k --variants sdpa --dtypes bf16 --causal yes")
    assert compare_command("triton_fa2/h100_small/fp16/noncausal", A, B, method="rounds-t", rounds=8) == (
        f"attnwatch compare --base {A} --head {B} --shapes h100_small --variants triton_fa2 --dtypes fp16 "
        "--causal no --method rounds-t --rounds 8")
    assert run_command("sdpa/cpu_tiny/fp16/noncausal", A, "cpu").endswith("--causal no --device cpu")


def test_untrusted_case_ids_cannot_become_a_second_command():
    hostile = "x;rm -rf ~/$(id)/fp16/causal"
    words = shlex.split(compare_command(hostile, A, B))
    assert words[words.index("--variants") + 1] == "x;rm -rf ~"
    assert run_command("not/a/case", A) is None and run_command("sdpa/s/fp16/causal", "HEAD; id") is None
    assert compare_command("sdpa/s/fp16/causal", A, None) is None


@pytest.mark.slow
def test_the_command_a_comment_row_offers_measures_that_case_again(tmp_path):
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone, _ = clone_with_commits(tmp_path, "head")
    run = lambda args, out: attnwatch(clone, *args, "--no-correctness", "--out", str(out))  # noqa: E731
    first = run(["compare", "--base", "HEAD~1", "--head", "HEAD", "--shapes", "cpu", "--variants", "sdpa,torch_3op",
                 "--dtypes", "fp16", "--causal", "no", "--rounds", "1"], tmp_path / "first")
    assert first.returncode == 0, first.stderr[-3000:]
    report = load_report(tmp_path / "first" / "compare.json")
    case = "torch_3op/cpu_tiny/fp16/noncausal"
    row = next(line for line in render_comment(report).splitlines() if line.startswith(f"| `{case}`"))
    command = re.search(r"`(attnwatch compare [^`]+)`", row).group(1)
    words = shlex.split(command)
    assert words[:2] == ["attnwatch", "compare"]
    again = run(words[1:], tmp_path / "again")
    assert again.returncode == 0, again.stderr[-3000:]
    repeat = load_report(tmp_path / "again" / "compare.json")
    assert [c.case_id for c in repeat.cases] == [case]
    assert (repeat.merge_base_sha, repeat.head_sha, repeat.method) == (report.merge_base_sha, report.head_sha, report.method)
