"""`attnwatch run` end to end on a CPU: a real child, real pytest-benchmark JSON, history's
validator, and an ingest into a real DuckDB file; bad arguments exit 2 and write nothing."""

from __future__ import annotations

import json

import pytest

from attnwatch.cli.main import main
from attnwatch.history.contract.validate import load_bundle


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "bundle"
    db = out.parent / "history.duckdb"
    rc = main(
        [
            "--db",
            str(db),
            "run",
            "--shapes",
            "cpu",
            "--variants",
            "sdpa,sdpa_math,torch_3op,sdpa_cudnn",
            "--out",
            str(out),
            "--time-cap",
            "0.2",
            "--no-progress",
            "--ingest",
        ]
    )
    return rc, out, db


def test_exit_status_and_files(cpu_run):
    rc, out, _ = cpu_run
    assert rc == 0
    for name in (
        "manifest.json",
        "timings.json",
        "benchmark.json",
        "outcomes.json",
        "correctness.json",
        "builds.json",
        "samples.json",
    ):
        assert (out / name).is_file(), name
    load_bundle(out)  # history's validator accepts it


def test_manifest_says_cpu_honestly(cpu_run):
    manifest = json.loads((cpu_run[1] / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["shape_set"] == "cpu"
    assert manifest["environment"]["device_kind"] == "cpu" and manifest["environment"]["gpu_name"] is None


def test_benchmark_json_carries_extra_info_and_machine_info(cpu_run):
    bench = json.loads((cpu_run[1] / "benchmark.json").read_text())
    timings = {t["case_id"]: t for t in json.loads((cpu_run[1] / "timings.json").read_text())["timings"]}
    assert bench["machine_info"]["attnwatch"]["device_kind"] == "cpu"
    assert "python_version" in bench["machine_info"]  # pytest-benchmark's own keys are kept
    names = {b["name"] for b in bench["benchmarks"]}
    assert "test_bench[sdpa/cpu_tiny/fp16/causal]" in names
    assert sorted(b["extra_info"]["attnwatch_case"] for b in bench["benchmarks"]) == sorted(timings)
    for b in bench["benchmarks"]:
        assert "attnwatch" not in b["extra_info"]  # the timing is stored once, in timings.json
        t = timings[b["extra_info"]["attnwatch_case"]]
        assert t["timing_mode"] == "cpu_wall" and t["median_us"] > 0 and t["n"] >= 10
        assert b["extra_info"]["attnwatch_stats_are"].startswith("host wall-clock")
        assert b["stats"]["rounds"] == 5 and b["stats"]["median"] > 0  # pytest-benchmark's own measurement
        assert b["params"] == {"case_id": t["case_id"]} and b["group"] == "/".join(t["case_id"].split("/")[1:])
        assert t["gap_to_baseline"] == pytest.approx(
            t["median_us"] / timings["sdpa/" + t["case_id"].split("/", 1)[1]]["median_us"]
        )


def test_outcomes_correctness_and_samples_agree(cpu_run):
    out = cpu_run[1]
    outcomes = {o["case_id"]: o for o in json.loads((out / "outcomes.json").read_text())["cases"]}
    assert outcomes["sdpa_cudnn/cpu_tiny/fp16/causal"]["status"] == "skipped"
    assert "CUDA" in outcomes["sdpa_cudnn/cpu_tiny/fp16/causal"]["error"]
    ok = {c for c, o in outcomes.items() if o["status"] == "ok"}
    assert len(ok) == 6
    records = json.loads((out / "correctness.json").read_text())["records"]
    assert {(r["case_id"], r["seed"]) for r in records} == {(c, s) for c in ok for s in (0, 1, 2)}
    assert all(r["passed"] for r in records)
    samples = json.loads((out / "samples.json").read_text())["samples"]
    assert set(samples) == ok


def test_ingested_into_duckdb(cpu_run):
    import duckdb

    _, out, db = cpu_run
    run_id = json.loads((out / "manifest.json").read_text())["run_id"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        n = con.execute("select count(*) from results where run_id = ?", [run_id]).fetchone()[0]
    finally:
        con.close()
    assert n >= 6


def test_each_check_stores_its_margin_and_counts(cpu_run):
    """The child's CheckResults reach the history whole (ci.records): margin, counts, calls, profile."""
    import duckdb

    _, out, db = cpu_run
    run_id = json.loads((out / "manifest.json").read_text())["run_id"]
    con = duckdb.connect(str(db), read_only=True)
    try:
        rows = con.execute(
            "SELECT tolerance_used, violations, nonfinite, calls, profile FROM correctness WHERE run_id = ?", [run_id]
        ).fetchall()
    finally:
        con.close()
    assert len(rows) == 18
    assert all(
        0 < used < 1 and (violations, nonfinite, calls, profile) == (0, 0, 2, "normal")
        for used, violations, nonfinite, calls, profile in rows
    )


@pytest.mark.parametrize(
    "argv,message",
    [
        (["run", "--shapes", "no_such_set"], "unknown shape set"),
        (["run", "--shapes", "cpu", "--variants", "nope"], "unknown variant"),
        (["run", "--shapes", "cpu", "--dtypes", "fp8"], "unknown dtype"),
    ],
)
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "never"
    assert main([*argv, "--out", str(out), "--device", "cpu"]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_ncu_requested_without_ncu_records_why(tmp_path, monkeypatch):
    """--ncu on a machine without Nsight Compute: the run still succeeds and ncu.json says why
    each case has no metrics (the profiler's own failure is data, not a lost case)."""
    monkeypatch.setenv("ATTNWATCH_NCU", str(tmp_path / "no-ncu-here"))
    out = tmp_path / "b"
    assert (
        main(
            [
                "run",
                "--shapes",
                "cpu",
                "--variants",
                "sdpa",
                "--causal",
                "no",
                "--out",
                str(out),
                "--no-progress",
                "--no-correctness",
                "--time-cap",
                "0.1",
                "--ncu",
            ]
        )
        == 0
    )
    loaded = load_bundle(out)
    assert [c.case_id for c in loaded.ncu_cases] == ["sdpa/cpu_tiny/fp16/noncausal"]
    assert "ncu not found" in loaded.ncu_cases[0].error


def test_commit_option_is_checked_and_recorded(tmp_path, capsys):
    assert (
        main(["run", "--shapes", "cpu", "--commit", "NOT-A-SHA", "--out", str(tmp_path / "x"), "--device", "cpu"]) == 2
    )
    assert "not a lowercase hex git SHA" in capsys.readouterr().err
    out = tmp_path / "b"
    sha = "ab" * 20
    assert (
        main(
            [
                "run",
                "--shapes",
                "cpu",
                "--variants",
                "sdpa",
                "--causal",
                "no",
                "--out",
                str(out),
                "--no-progress",
                "--no-correctness",
                "--time-cap",
                "0.1",
                "--commit",
                sha,
            ]
        )
        == 0
    )
    assert json.loads((out / "manifest.json").read_text())["commit_sha"] == sha


def test_a_tree_without_git_refuses_to_ingest_an_unknown_commit(tmp_path):
    """A copied checkout (no .git): `run --ingest` stops before measuring, since the history
    would refuse a bundle whose commit is 'unknown'; it names the way out (--commit)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    copy = tmp_path / "copy"
    for package in ("attnwatch", "ci", "history", "kernels"):
        shutil.copytree(repo / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "--db",
            str(tmp_path / "h.duckdb"),
            "run",
            "--shapes",
            "cpu",
            "--ingest",
            "--out",
            str(tmp_path / "b"),
        ],
        cwd=copy,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(copy), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "no git history" in done.stderr and "--commit" in done.stderr
    assert not (tmp_path / "b").exists() and not (tmp_path / "h.duckdb").exists()


def test_the_measuring_child_loads_no_installed_pytest_plugin_but_pytest_benchmark(tmp_path):
    """A pytest plugin installed beside attnwatch (a pytest11 entry point, as a team's own or
    hypothesis' is) is loaded by a plain pytest session but never by the timed child of `run`."""
    import os
    import subprocess
    import sys

    plugins = tmp_path / "plugins"
    (plugins / "marking_plugin-1.0.dist-info").mkdir(parents=True)
    (plugins / "marking_plugin-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: marking-plugin\nVersion: 1.0\n"
    )
    (plugins / "marking_plugin-1.0.dist-info" / "entry_points.txt").write_text("[pytest11]\nmarking = marking_plugin\n")
    (plugins / "marking_plugin.py").write_text(
        "import os\n\ndef pytest_configure(config):\n"
        "    with open(os.environ['MARKS'], 'a') as f:\n        f.write('loaded\\n')\n"
    )
    marks = tmp_path / "marks.txt"
    env = {
        **os.environ,
        "MARKS": str(marks),
        "PYTHONPATH": os.pathsep.join([str(plugins), os.environ.get("PYTHONPATH", "")]),
    }
    (tmp_path / "test_nothing.py").write_text("def test_nothing():\n    pass\n")
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_nothing.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert plain.returncode == 0 and marks.read_text() == "loaded\n", plain.stdout  # the plugin is found
    marks.unlink()
    run = subprocess.run(
        [sys.executable, "-m", "attnwatch", "run", "--shapes", "cpu", "--variants", "sdpa"]
        + ["--dtypes", "fp16", "--causal", "no", "--time-cap", "0.2", "--no-progress", "--no-correctness"]
        + ["--out", str(tmp_path / "bundle")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert not marks.exists()
    assert load_bundle(tmp_path / "bundle").outcomes  # measured all the same
