"""The one command that measures a case again (history.reproduce): exact case, commits and
settings, shell-safe, for every registered operator's cases (each selects exactly itself
through `attnwatch run`'s and `attnwatch compare`'s own parser and selection, and a real CPU
run of an RMSNorm command measures that one case); none for a pytest node id or a plugin case;
and, in a real git repository, the command a PR comment row offers measures exactly that case
between exactly those commits."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from attnwatch.cli.main import build_parser
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import load_report
from attnwatch.cli.compare_flags import resolve_defaults
from attnwatch.ci.compare.setup import plan_for
from attnwatch.cli.settings import case_choice
from attnwatch.ci.selection import select_cases
from attnwatch.kernels import registry
from attnwatch.kernels.cases import DTYPES, case_id
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.shapes import SHAPES
from git_clone import REPO_ROOT, attnwatch, clone_with_commits
from attnwatch.history.reproduce import DIRTY_NOTE, compare_command, run_command

A, B = "a" * 40, "b" * 40


@pytest.mark.parametrize(
    "case, mode_flag",
    [
        ("sdpa/b4_h16_s1k/bf16/causal", " --causal yes"),
        ("triton_fa2/h100_small/fp16/noncausal", " --causal no"),
        # RMSNorm runs in its one mode whatever --causal says (ci.plan.plan_cases): no mode flag.
        ("rmsnorm_triton/rms_t8k_h8192/bf16/fwd", ""),
    ],
)
def test_commands_name_the_exact_case_and_commits(case, mode_flag):
    variant, shape, dtype, _ = case.split("/")
    selection = f"--shapes {shape} --variants {variant} --dtypes {dtype}{mode_flag}"
    assert run_command(case, A) == f"git checkout --detach {A} && attnwatch run {selection}"
    assert run_command(case, A, "cpu") == f"git checkout --detach {A} && attnwatch run {selection} --device cpu"
    assert run_command(case, A, dirty=True) == f"git checkout --detach {A} && attnwatch run {selection}" + DIRTY_NOTE
    assert compare_command(case, A, B, dirty=True).endswith(selection + DIRTY_NOTE)
    assert DIRTY_NOTE.startswith("  # ")  # a shell comment: pasted, the command runs as without it
    assert compare_command(case, A, B, method="rounds-t", rounds=8) == (
        f"attnwatch compare --base {A} --head {B} {selection} --method rounds-t --rounds 8"
    )


def test_untrusted_case_ids_cannot_become_a_second_command():
    for hostile in ("x;rm -rf ~/$(id)/fp16/causal", "sdpa/s/fp16/fwd;id", "sdpa/s/fp16/$(id)"):
        assert compare_command(hostile, A, B) is None and run_command(hostile, A) is None
    assert run_command("not/a/case", A) is None and run_command("sdpa/s/fp16/causal", "HEAD; id") is None
    assert compare_command("sdpa/s/fp16/causal", A, None) is None


@pytest.mark.parametrize(
    "case",
    [
        "test_softmax/4096/fp16",  # a gpu_benchmark (pytest plugin) case: operator `callable`
        "tests/bench/test_x.py::test_y[a/b]",  # a plain pytest-benchmark entry: pytest's node id
        "bench/suite/fp16/test_x.py::test_y",
    ],
)
def test_a_pytest_result_gets_no_command(case):
    """The history does not keep the directory or options the suite ran with (module docstring
    of history.reproduce): no command rather than a guessed one."""
    assert run_command(case, A) is None and compare_command(case, A, B) is None


def _one_case_per_mode():
    """(variant, shape id, dtype, mode) of every registered variant, each dtype and each of its
    operator's declared modes, on the first named shape of its operator."""
    for variant in registry.all_variants():
        op = get_operator(variant.operator)
        shape = next(s for s in SHAPES.values() if isinstance(s, op.shape_type))
        for dtype in DTYPES:
            for mode in op.modes:
                yield variant.name, shape.id, dtype, mode


def test_every_operators_command_selects_exactly_its_case():
    """The flags, read by the CLI's own parser, select the case and nothing else, in `attnwatch
    run` (either device) and in `attnwatch compare`: the registry's operators and modes (an
    operator with two modes and no flag to choose one fails here)."""
    parser = build_parser()
    seen = set()
    for variant, shape, dtype, mode in _one_case_per_mode():
        wanted = case_id(variant, shape, dtype, mode)
        run = parser.parse_args(shlex.split(run_command(wanted, A).split(" && ", 1)[1])[1:])
        for device in ("cuda", "cpu"):
            picked = select_cases(run.shapes, run.variants, run.dtypes, run.causal, device).cases
            assert [c.case_id for c in picked] == [wanted], (wanted, device)
        compare = parser.parse_args(shlex.split(compare_command(wanted, A, B))[1:])
        resolve_defaults(compare)  # as the command does before planning
        assert [c.case_id for c in plan_for(case_choice(compare))] == [wanted]
        seen.add(registry.get(variant).operator)
    assert {"attention", "rmsnorm"} <= seen


def test_the_rmsnorm_command_measures_that_one_case_on_the_cpu(tmp_path):
    """The command a CPU run's RMSNorm row offers, run for real (no correctness, a few samples):
    its bundle holds that case and no other."""
    wanted = "rmsnorm_torch/rms_cpu_tiny/fp16/fwd"
    words = shlex.split(run_command(wanted, A, "cpu").split(" && ", 1)[1])
    done = attnwatch(
        tmp_path,
        *words[1:],
        "--no-correctness",
        "--no-progress",
        "--max-samples",
        "20",
        "--out",
        str(tmp_path / "again"),
        "--commit",
        A,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads((tmp_path / "again" / "outcomes.json").read_text())
    assert [(o["case_id"], o["status"]) for o in outcomes["cases"]] == [(wanted, "ok")]


@pytest.mark.slow
def test_the_command_a_comment_row_offers_measures_that_case_again(tmp_path):
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone, _ = clone_with_commits(tmp_path, "head")
    run = lambda args, out: attnwatch(clone, *args, "--no-correctness", "--out", str(out))  # noqa: E731
    first = run(
        [
            "compare",
            "--base",
            "HEAD~1",
            "--head",
            "HEAD",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,torch_3op",
            "--dtypes",
            "fp16",
            "--causal",
            "no",
            "--rounds",
            "1",
        ],
        tmp_path / "first",
    )
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
    assert (repeat.merge_base_sha, repeat.head_sha, repeat.method) == (
        report.merge_base_sha,
        report.head_sha,
        report.method,
    )
