"""`attnwatch compare`: verdicts from recorded bundles, exit codes, and a real A/B through git
worktrees on this CPU (kernels of two commits measured by the harness, interleaved)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main
from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.report import NO_RUN_NOISE
from attnwatch.ci.compare.measure import round_order
from attnwatch.ci.compare.report import load_report

REPO_ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 11, 2, tzinfo=timezone.utc)
VARIANTS = ("sdpa", "triton_fa2", "cuda_wmma")


def _bundles(tmp_path, side, rounds=3, **kw):
    return [
        make_bundle(
            tmp_path / f"{side}-{r}",
            run_id=f"{side}-{r}",
            commit_sha=("a" if side == "base" else "c") * 40,
            started_at=T0 + timedelta(minutes=10 * r + (side == "head")),
            variants=VARIANTS,
            n_samples=200,
            seed=100 * (side == "head") + r,
            trigger="compare",
            **kw,
        )
        for r in range(rounds)
    ]


def _compare(tmp_path, base, head, *extra):
    out = tmp_path / "out"
    rc = main(
        ["compare", "--base-bundles", *map(str, base), "--head-bundles", *map(str, head), "--out", str(out), *extra]
    )
    return rc, out / "compare.json"


def test_planted_regression_is_the_only_verdict_and_fails_the_check(tmp_path, capsys):
    base = _bundles(tmp_path, "base")
    head = _bundles(tmp_path, "head", variant_scale={"triton_fa2": 1.06})
    rc, path = _compare(tmp_path, base, head)
    assert rc == 0  # without --fail-on the command only reports
    report = load_report(path)
    verdicts = {c.case_id: c.verdict for c in report.cases}
    assert {cid for cid, v in verdicts.items() if v == "regression"} == {
        cid for cid in verdicts if cid.startswith("triton_fa2/")
    }
    assert {v for cid, v in verdicts.items() if not cid.startswith("triton_fa2/")} == {"no change"}
    slow = next(c for c in report.cases if c.verdict == "regression")
    assert 1.03 < slow.low < slow.ratio < slow.high < 1.09
    assert slow.head.gap_to_baseline > slow.base.gap_to_baseline
    assert len(slow.base.round_medians_us) == 3 and slow.base.n_samples == 600
    assert report.gpu_name == "NVIDIA H200" and report.min_effect == 0.02 and report.rounds == 3
    table = capsys.readouterr().out
    assert "regression" in table and "wrote" in table
    rc, _ = _compare(tmp_path, base, head, "--fail-on", "regression")
    assert rc == 1


def test_same_code_passes_the_check(tmp_path):
    rc, path = _compare(tmp_path, _bundles(tmp_path, "base"), _bundles(tmp_path, "head"), "--fail-on", "regression")
    assert rc == 0
    assert {c.verdict for c in load_report(path).cases} == {"no change"}


def test_compare_json_names_the_repository_of_its_rounds(tmp_path):
    rc, path = _compare(tmp_path, _bundles(tmp_path, "base", rounds=2), _bundles(tmp_path, "head", rounds=2))
    assert rc == 0 and load_report(path).repo == "example/attention-kernels"


def _dirty(bundle: Path) -> Path:
    manifest = json.loads((bundle / "manifest.json").read_text())
    (bundle / "manifest.json").write_text(json.dumps({**manifest, "dirty": True}))
    return bundle


def test_a_dirty_side_is_marked_and_refused_by_fail_on_unless_allowed(tmp_path, capsys):
    """A head round of a checkout with uncommitted changes: compare.json and the comment say so,
    the measure-again commands carry the note, and --fail-on regression refuses it unless
    --allow-dirty."""
    base = _bundles(tmp_path, "base", rounds=2)
    head = [_dirty(b) for b in _bundles(tmp_path, "head", rounds=2)]
    rc, path = _compare(tmp_path, base, head)
    assert rc == 0
    report = load_report(path)
    assert (report.base_dirty, report.head_dirty) == (False, True)
    assert f"WARNING: the head measured uncommitted changes on top of {'c' * 12}" in capsys.readouterr().out
    body = render_comment(report)
    assert (
        f"> ⚠️ **The head measured uncommitted changes** on top of `{'c' * 12}`: its numbers are not that commit's"
        in body
    )
    assert "not the code that ran" in body  # the measure-again commands (history.reproduce.DIRTY_NOTE)
    path.unlink()
    rc, path = _compare(tmp_path, base, head, "--fail-on", "regression")
    err = capsys.readouterr().err.strip()
    assert rc == 2 and not path.exists() and len(err.splitlines()) == 1, err
    assert "the head is a checkout with uncommitted changes" in err and "--allow-dirty" in err
    rc, path = _compare(tmp_path, base, head, "--fail-on", "regression", "--allow-dirty")
    assert rc == 0 and load_report(path).head_dirty


def test_correctness_failure_and_crash_in_the_head_fail_the_check(tmp_path):
    head = _bundles(
        tmp_path,
        "head",
        statuses={"cuda_wmma/l4_mission/fp16/causal": "failed", "triton_fa2/l4_mission/fp16/causal": "crashed"},
    )
    rc, path = _compare(tmp_path, _bundles(tmp_path, "base"), head, "--fail-on", "regression")
    assert rc == 1
    report = load_report(path)
    by_id = {c.case_id: c for c in report.cases}
    assert by_id["cuda_wmma/l4_mission/fp16/causal"].correctness_failed
    assert by_id["triton_fa2/l4_mission/fp16/causal"].verdict == "failed"
    assert "crashed" in by_id["triton_fa2/l4_mission/fp16/causal"].head.error


def test_a_case_only_in_the_head_is_new_not_a_failure(tmp_path):
    base = _bundles(tmp_path, "base", statuses={"triton_fa2": "skipped"})
    rc, path = _compare(tmp_path, base, _bundles(tmp_path, "head"), "--fail-on", "regression")
    assert rc == 0
    assert {c.verdict for c in load_report(path).cases if c.variant == "triton_fa2"} == {"new"}


def test_rounds_from_different_gpus_are_refused(tmp_path, capsys):
    head = _bundles(tmp_path, "head", gpu_name="NVIDIA H100 80GB HBM3")
    rc, path = _compare(tmp_path, _bundles(tmp_path, "base"), head)
    assert rc == 2 and not path.exists()
    assert "one GPU model" in capsys.readouterr().err


def test_broken_bundle_is_named(tmp_path, capsys):
    base = _bundles(tmp_path, "base", rounds=1)
    (base[0] / "samples.json").write_text(json.dumps({"samples": {"sdpa/l4_mission/fp16/causal": [1.0, float("nan")]}}))
    rc, _ = _compare(tmp_path, base, _bundles(tmp_path, "head", rounds=1))
    assert rc == 2
    err = capsys.readouterr().err
    assert "samples.json" in err


def test_rounds_are_read_by_the_bundle_reader(tmp_path, capsys):
    """compare reads rounds with history's validator: a format it does not know, or a record
    the reader refuses, is an error naming the file and field, not a silent guess."""
    base, head = _bundles(tmp_path, "base", rounds=1), _bundles(tmp_path, "head", rounds=1)
    outcomes = json.loads((head[0] / "outcomes.json").read_text())
    (head[0] / "outcomes.json").write_text(json.dumps({**outcomes, "schema_version": 99}))
    rc, path = _compare(tmp_path, base, head)
    assert rc == 2 and not path.exists()
    err = capsys.readouterr().err
    assert "outcomes.json: schema_version: 99 is newer than this attnwatch" in err
    correctness = json.loads((base[0] / "correctness.json").read_text())
    correctness["records"][0]["passed"] = "yes"
    (base[0] / "correctness.json").write_text(json.dumps(correctness))
    (head[0] / "outcomes.json").write_text(json.dumps(outcomes))
    rc, _ = _compare(tmp_path, base, head)
    assert rc == 2 and "correctness.json: records[0].passed: expected true/false" in capsys.readouterr().err


NO_DUCKDB = """
import importlib.abc, runpy, sys
class NoDatabase(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("duckdb", "streamlit", "plotly"):
            raise ImportError("not installed on this runner: " + name)
sys.meta_path.insert(0, NoDatabase())
sys.argv = ["attnwatch", "compare", *sys.argv[1:]]
runpy.run_module("attnwatch", run_name="__main__")
"""


def test_compare_runs_where_duckdb_is_not_installed(tmp_path):
    """A GPU runner measures but may have no duckdb: `python -m attnwatch compare` must not need it."""
    base, head = _bundles(tmp_path, "base", rounds=2), _bundles(tmp_path, "head", rounds=2)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            NO_DUCKDB,
            "--base-bundles",
            *map(str, base),
            "--head-bundles",
            *map(str, head),
            "--out",
            str(tmp_path / "out"),
            "--fail-on",
            "regression",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert load_report(tmp_path / "out" / "compare.json").rounds == 2


def test_the_measuring_modules_need_no_database():
    """The GPU host measures with warm workers and has no duckdb: neither the compare session
    nor the worker process nor the crash attribution may import it."""
    modules = ", ".join(
        f"attnwatch.ci.{name}"
        for name in (
            "compare.session",
            "compare.side",
            "workers.server",
            "workers.client",
            "attribution",
            "supervisor",
            "suites.worker",
        )
    )
    script = NO_DUCKDB.split("sys.argv =")[0] + f"import {modules}\nprint('ok')\n"
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_both_workers_get_the_machines_cutlass_headers(monkeypatch, tmp_path):
    """The headers are ignored by git: a worktree of the base has none, so without this its
    worker would skip every CUTLASS variant and the A/B would call them `new`."""
    from attnwatch.ci.compare.session import machine_env
    from attnwatch.kernels.cutlass.headers import cutlass_include_dir

    monkeypatch.delenv("CUTLASS_INCLUDE_DIR", raising=False)
    found = cutlass_include_dir()
    assert machine_env() == ({"CUTLASS_INCLUDE_DIR": str(found)} if found else {})
    monkeypatch.setenv("CUTLASS_INCLUDE_DIR", str(tmp_path))
    assert machine_env() == {}  # an explicit choice reaches the workers through the environment itself


def test_one_round_warns_that_the_interval_lacks_run_to_run_noise(tmp_path, capsys):
    """One round per side cannot show between-round variation: the interval is too narrow (an
    A/A with --rounds 1 on an H200 excluded zero for many cases). Never silently."""
    rc, path = _compare(tmp_path, _bundles(tmp_path, "base", rounds=1), _bundles(tmp_path, "head", rounds=1))
    assert rc == 0
    report = load_report(path)
    warning = [n for n in report.notes if n.startswith(NO_RUN_NOISE)]
    assert len(warning) == 1 and f"{len(report.cases)} of {len(report.cases)} compared cases" in warning[0]
    assert NO_RUN_NOISE in capsys.readouterr().out  # the job log
    body = render_comment(report)
    assert f"⚠️ **The {NO_RUN_NOISE}**" in body  # and the PR comment, near the top
    assert body.index(NO_RUN_NOISE) < body.index("<details>")


def test_pooled_intervals_warn_and_three_rounds_do_not(tmp_path):
    base, head = _bundles(tmp_path, "base"), _bundles(tmp_path, "head")
    _, path = _compare(tmp_path, base, head, "--method", "pooled")
    assert any(n.startswith(NO_RUN_NOISE) and "pooled" in n for n in load_report(path).notes)
    _, path = _compare(tmp_path, base, head)
    report = load_report(path)
    assert not any(NO_RUN_NOISE in n for n in report.notes)
    assert "does not include" not in render_comment(report)


def test_the_cost_lines_put_the_largest_first_and_mark_a_cached_build():
    from attnwatch.cli.commands.compare import by_variant_text

    text = by_variant_text({"cuda_wmma": 0.61, "triton_fa2": 4.7, "sdpa": 0.004}, {"sdpa"})
    assert text == "triton_fa2 4.70, cuda_wmma 0.61, sdpa 0.00 (cached)"


def test_rounds_alternate_abba():
    assert [round_order(r) for r in range(4)] == [
        ("base", "head"),
        ("head", "base"),
        ("base", "head"),
        ("head", "base"),
    ]


@pytest.mark.slow
def test_real_ab_through_worktrees_on_cpu(tmp_path):
    """Clone this repository, add a commit, and let compare measure HEAD~1 against HEAD for real, into
    a folder an earlier compare of more rounds used: its rounds and its worker's link to a checkout
    now gone are replaced (they crashed the worker's start, and the PR workflow would have stored
    the stale rounds as this pull request's), a file of the user's beside them is kept."""
    if not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    clone = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO_ROOT), str(clone)], check=True)

    def git(*a):
        return subprocess.run(["git", "-C", str(clone), *a], check=True, capture_output=True, text=True).stdout.strip()

    git(
        "-c", "user.name=t", "-c", "user.email=t@example.org", "commit", "--quiet", "--allow-empty", "-m", "head commit"
    )
    base_sha, head_sha = git("rev-parse", "HEAD~1"), git("rev-parse", "HEAD")
    out = tmp_path / "out"
    (out / "bundles" / "base-round5").mkdir(parents=True)
    (out / "workers" / "base" / "kernels-shim").mkdir(parents=True)
    (out / "workers" / "base" / "kernels-shim" / "kernels").symlink_to(tmp_path / "gone" / "kernels")
    (out / "notes.txt").write_text("mine")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); from attnwatch.cli.main import main; "
            "sys.exit(main(sys.argv[1:]))",
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
            "2",
            "--no-correctness",
            "--out",
            str(out),
        ],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "held an earlier compare's bundles, workers: removed" in done.stderr
    assert sorted(p.name for p in (out / "bundles").iterdir()) == [
        f"{s}-round{k}" for s in ("base", "head") for k in (1, 2)
    ]
    assert (out / "notes.txt").read_text() == "mine"
    report = load_report(out / "compare.json")
    assert (report.merge_base_sha, report.head_sha) == (base_sha, head_sha)
    assert {c.case_id for c in report.cases} == {"sdpa/cpu_tiny/fp16/noncausal", "torch_3op/cpu_tiny/fp16/noncausal"}
    assert all(c.base.status == c.head.status == "ok" and c.ratio for c in report.cases)
    session = json.loads((out / "session.json").read_text())
    assert session["schedule"] == [["base", 1, 2], ["head", 1, 2], ["head", 2, 2], ["base", 2, 2]]  # A B | B A
    assert {name: s["commit_sha"] for name, s in session["sides"].items()} == {"base": base_sha, "head": head_sha}
    # each side imported its own revision's kernels, from a worktree of that revision
    paths = {name: s["kernels_path"] for name, s in session["sides"].items()}
    assert all(p.endswith("/checkout/attnwatch/kernels") for p in paths.values()) and paths["base"] != paths["head"]
    assert [s["times"]["workers_started"] for s in session["sides"].values()] == [1, 1]
    for name, side in session["sides"].items():  # which kernel each side's warm-up went to
        warmup = side["times"]["warmup_by_variant"]
        assert set(warmup) == {"sdpa", "torch_3op"}
        assert sum(warmup.values()) == pytest.approx(side["times"]["warmup_s"])
        assert f"compare: {name}: warm-up by variant (s): " in done.stderr
    assert len(git("worktree", "list").splitlines()) == 1  # the temporary checkouts are gone


@pytest.mark.slow
def test_only_the_changed_cases_are_profiled_on_both_sides_and_explained(tmp_path, monkeypatch, fixtures_dir):
    """A base whose torch_3op does its work three times: the head's torch_3op is an improvement,
    sdpa unchanged. Only torch_3op is profiled (the stand-in ncu replays real H200 output), on
    both sides, and compare.json and the comment carry the counter rules' verdict."""
    import stand_in_ncu  # tests/ helper

    stand_in_ncu.install(tmp_path, monkeypatch, fixtures_dir)
    monkeypatch.setenv("FAKE_NCU_ARGS", str(tmp_path / "ncu_args.json"))
    export = tmp_path / "base"
    export.mkdir()
    archive = subprocess.run(  # as a revision before the package held kernels/: a real top-level folder
        ["git", "-C", str(REPO_ROOT), "archive", "--prefix=kernels/", "HEAD:attnwatch/kernels"],
        check=True,
        capture_output=True,
    )
    subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
    source = export / "kernels" / "variants" / "torch_3op.py"
    text = source.read_text()
    assert text.count("    return Prepared(fn=run,") == 1
    planted = (
        "    once = run\n\n    def run():  # planted: three times the work\n"
        "        once()\n        once()\n        return once()\n\n    return Prepared(fn=run,"
    )
    source.write_text(text.replace("    return Prepared(fn=run,", planted))
    out = tmp_path / "out"
    rc = main(
        [
            "compare",
            "--base-root",
            str(export),
            "--base",
            "slow-base",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,torch_3op",
            "--causal",
            "no",
            "--rounds",  # sequential: a shared, loaded CPU can leave three rounds undecided
            "8",
            "--min-rounds",
            "3",
            "--no-correctness",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    report = load_report(out / "compare.json")
    by_case = {c.case_id: c for c in report.cases}
    fast = by_case["torch_3op/cpu_tiny/fp16/noncausal"]
    assert fast.verdict == "improvement", fast
    assert fast.explanation is not None and fast.explanation.cause  # both sides were profiled
    from attnwatch.ci.compare.analysis import EXPLAINED
    from attnwatch.history.analysis.tiers import tier

    # the decided changes: sdpa too when this shared CPU's noise made it a sure change under 3%
    changed = {cid for cid, c in by_case.items() if tier(c.verdict, c.low, c.high) in EXPLAINED}
    assert {cid for cid, c in by_case.items() if c.explanation is not None} == changed
    plans = sorted((out / "ncu").glob("*/pass0/plan.json"))
    assert [p.parent.parent.name for p in plans] == ["base", "head"]
    for plan in plans:  # only the decided changes were profiled
        profiled = {f"{c['variant']}/cpu_tiny/fp16/noncausal" for c in json.loads(plan.read_text())["cases"]}
        assert profiled == changed
    from attnwatch.ci.ncu.metrics import choose_sections, metrics_argument

    args = json.loads((tmp_path / "ncu_args.json").read_text())  # the head's: every counter a rule reads
    assert args[args.index("--metrics") + 1] == metrics_argument(choose_sections("explain"))
    assert "#### ncu: why the changed cases moved" in render_comment(report)


@pytest.mark.slow
def test_base_root_measures_an_exported_checkout_without_git(tmp_path):
    """--base-root: the base's kernels come from a plain directory (a host without the history),
    laid out as this revision is: the top-level `kernels` a link to `attnwatch/kernels`."""
    export = tmp_path / "base"
    export.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "HEAD", "kernels", "attnwatch/kernels"],
        check=True,
        capture_output=True,
    )
    subprocess.run(["tar", "-x", "-C", str(export)], input=archive.stdout, check=True)
    out = tmp_path / "out"
    rc = main(
        [
            "compare",
            "--base-root",
            str(export),
            "--base",
            "exported-head",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa",
            "--causal",
            "no",
            "--rounds",
            "1",
            "--no-correctness",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    report = load_report(out / "compare.json")
    assert report.base_ref == "exported-head" and report.rounds == 1
    (case,) = report.cases
    assert case.case_id == "sdpa/cpu_tiny/fp16/noncausal" and case.base.status == case.head.status == "ok"
    assert any("interval does not include run-to-run noise" in n for n in report.notes)
    session = json.loads((out / "session.json").read_text())
    assert (export / "kernels").is_symlink()
    assert session["sides"]["base"]["kernels_path"] == str((export / "attnwatch" / "kernels").resolve())
