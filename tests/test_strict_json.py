"""Strict JSON, through the real `attnwatch` command line (subprocesses, real files, a real history):
every JSON file attnwatch reads goes through one reader (history/contract/json_limits.py) that
refuses a key given twice, nesting past its bound, integers past 64 bits, numbers a float cannot
hold and NaN/Infinity where the format has none; the contract refuses timestamps without a UTC
offset and latencies under the floor of history/contract/limits.toml. Each refusal is one line
naming the file and the key path, exit 2, and the history is left exactly as it was. The bundle
writer refuses the same (one contract on both sides)."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from bundle_factory import bundle_contents, make_bundle, make_pytest_benchmark_file
from compare_factory import make_report
from fault_env import cli, content
from attnwatch.ci.compare.report import write_report
from attnwatch.history.contract.bundle_writer import write_bundle
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location


@pytest.fixture
def history(tmp_path) -> Path:
    """An existing history holding one run (so ingest's "already stored?" check reads each input)."""
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [make_bundle(tmp_path / "stored", run_id="stored", seed=1)])
    return db


def refused(db: Path, *args: str, names: tuple[str, ...], command: str = "ingest") -> str:
    """Run the CLI; it must fail in one line naming every one of `names` and leave the history as it was."""
    before = content(db)
    result = cli(db, command, *args)
    err = result.stderr.strip()
    assert result.returncode == 2, (result.returncode, result.stdout, err[-2000:])
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err[-2000:]
    for name in names:
        assert name in err, err
    assert content(db) == before
    return err


def _edit(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


# --- keys given twice -------------------------------------------------------------------------------


def test_a_manifest_with_two_run_ids_is_refused_not_stored_under_the_second(history, tmp_path):
    bad = make_bundle(tmp_path / "bad", run_id="first-id", seed=2)
    manifest = bad / "manifest.json"
    text = manifest.read_text()
    manifest.write_text(text.replace('"run_id": "first-id"', '"run_id": "first-id", "run_id": "second-id"', 1))
    err = refused(history, str(bad), names=(str(manifest), "run_id", "given twice"))
    assert err.startswith("attnwatch ingest: error: ")


def test_a_key_given_twice_deep_in_a_file_is_named_by_its_key_path(history, tmp_path):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    timings = bad / "timings.json"
    data = json.loads(timings.read_text())
    third = json.dumps(data["timings"][2])
    data["timings"][2] = "__THIRD__"
    timings.write_text(json.dumps(data).replace('"__THIRD__"', third[:-1] + ', "median_us": 1.0}'))
    refused(history, str(bad), names=(str(timings), "timings[2].median_us", "given twice"))


def test_a_pytest_benchmark_file_with_a_key_given_twice_is_refused(history, tmp_path):
    plain = make_pytest_benchmark_file(tmp_path / "plain.json")
    text = plain.read_text()
    plain.write_text(text.replace('"dirty": false', '"dirty": false, "dirty": true', 1))
    refused(history, str(plain), names=(str(plain), "commit_info.dirty", "given twice"))


def test_compare_json_with_a_key_given_twice_is_refused(history, tmp_path, fixtures_dir):
    report = write_report(make_report(fixtures_dir), tmp_path / "compare.json")
    text = report.read_text()
    report.write_text(text.replace('"head_sha": ', '"head_sha": "' + "9" * 40 + '", "head_sha": ', 1))
    refused(
        history,
        "--compare",
        str(report),
        "--dry-run",
        names=(str(report), "head_sha", "given twice"),
        command="comment",
    )


# --- depth and number range -------------------------------------------------------------------------


def test_a_manifest_nested_100000_deep_into_an_existing_history_is_one_line(history, tmp_path):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    manifest = bad / "manifest.json"
    manifest.write_text('{"run_id": "bad", "notes": ' + "[" * 100_000 + "]" * 100_000 + "}")
    refused(history, str(bad), names=(str(manifest), "nested too deeply"))


def test_a_5000_digit_integer_in_timings_is_one_line_naming_the_field(history, tmp_path):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    timings = bad / "timings.json"
    _edit(timings, lambda d: d["timings"][0].update(n="__BIG__"))
    timings.write_text(timings.read_text().replace('"__BIG__"', "9" * 5000))
    refused(history, str(bad), names=(str(timings), "timings[0].n", "5000 digits"))


def test_an_integer_past_64_bits_is_refused(history, tmp_path):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    builds = bad / "builds.json"
    _edit(builds, lambda d: d["builds"][0].update(registers_per_thread=2**64))
    refused(history, str(bad), names=(str(builds), "builds[0].registers_per_thread", "64-bit"))


@pytest.mark.parametrize(
    "literal, says",
    [
        ("NaN", "NaN is not a finite number"),
        ("-Infinity", "not a finite number"),
        ("1e400", "too large for a 64-bit float"),
    ],
)
def test_nan_and_infinity_are_refused_where_the_format_has_none(history, tmp_path, literal, says):
    """builds.json's `config` holds anything JSON holds: the reader, not a field's type, refuses these."""
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    builds = bad / "builds.json"
    _edit(builds, lambda d: d["builds"][1]["config"].update(tile="__X__"))
    builds.write_text(builds.read_text().replace('"__X__"', literal))
    refused(history, str(bad), names=(str(builds), "builds[1].config.tile", says))


def test_pytest_benchmark_files_may_hold_nan_and_infinity(tmp_path):
    """pytest-benchmark writes them (ops of a zero mean): its own file is read with them."""
    db = tmp_path / "history.duckdb"
    plain = make_pytest_benchmark_file(tmp_path / "plain.json")
    plain.write_text(plain.read_text().replace('"ops": ', '"ops": Infinity, "x_ops": ', 1))
    result = cli(db, "--repo", "example/attention-kernels", "ingest", str(plain))
    assert result.returncode == 0, result.stderr


# --- impossible latencies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "literal, says",
    [
        ("1e-400", "too small for a 64-bit float"),
        ("0.0", "is not a latency"),
        ("5e-324", "is not a latency"),
        ("0.0000001", "is not a latency"),
    ],
)
def test_a_zero_subnormal_or_underflowing_sample_is_refused(history, tmp_path, literal, says):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    samples = bad / "samples.json"
    case = sorted(json.loads(samples.read_text())["samples"])[0]
    _edit(samples, lambda d: d["samples"][case].__setitem__(0, "__X__"))
    samples.write_text(samples.read_text().replace('"__X__"', literal))
    refused(history, str(bad), names=(str(samples), f"samples.{case}[0]", says))


def test_a_pytest_benchmark_minimum_of_zero_seconds_is_refused(history, tmp_path):
    plain = make_pytest_benchmark_file(tmp_path / "plain.json")
    _edit(plain, lambda d: d["benchmarks"][0]["stats"].update(min=0.0))
    refused(history, str(plain), names=(str(plain), "benchmarks[0].stats.min", "not a latency"))


# --- timestamps -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["started_at", "commit_date"])
def test_a_manifest_timestamp_without_a_utc_offset_is_refused(history, tmp_path, field):
    bad = make_bundle(tmp_path / "bad", run_id="bad", seed=2)
    manifest = bad / "manifest.json"
    _edit(manifest, lambda d: d.update({field: "2026-11-01T11:00:00"}))
    refused(history, str(bad), names=(str(manifest), field, "no UTC offset"))


def test_pytest_benchmark_datetime_is_utc_only_in_versions_that_defined_it_so(history, tmp_path):
    """pytest-benchmark before 5.0 wrote datetime.utcnow() (UTC, no offset): read as UTC; a 5.x file
    without an offset is refused like any other timestamp."""
    for version, accepted in (("4.0.0", True), ("5.2.3", False)):
        plain = make_pytest_benchmark_file(tmp_path / f"plain-{version}.json", median_s=2e-4)
        _edit(
            plain,
            lambda d: (
                d.update(version=version, datetime="2026-10-01T09:00:00.5")
                or d["commit_info"].update(project="example/attention-kernels")
            ),
        )
        if accepted:
            result = cli(history, "ingest", str(plain))
            assert result.returncode == 0, result.stderr
            assert "inserted pb-" in result.stdout
        else:
            refused(history, str(plain), names=(str(plain), "datetime", "no UTC offset"))


def test_compare_json_created_at_without_an_offset_is_refused(history, tmp_path, fixtures_dir):
    report = make_report(fixtures_dir)
    report.created_at = "2026-11-21 12:00:00"
    path = write_report(report, tmp_path / "compare.json")
    refused(
        history,
        "--compare",
        str(path),
        "--dry-run",
        names=(str(path), "created_at", "no UTC offset"),
        command="comment",
    )


# --- the writer refuses what the reader refuses -------------------------------------------------------


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(started_at=datetime(2026, 11, 1, 12, 0)), "started_at"),  # naive
        (
            dict(recorded={"sdpa/l4_mission/fp16/noncausal": [0.0] + [10.0] * 49}),
            "min_us",
        ),  # the statistics of the samples
        (dict(recorded={"sdpa/l4_mission/fp16/noncausal": [5e-324] + [10.0] * 49}), "min_us"),
    ],
)
def test_the_bundle_writer_refuses_what_the_reader_refuses_and_writes_nothing(tmp_path, change, field):
    out = tmp_path / "bundle"
    contents = bundle_contents(run_id="w", **change)
    with pytest.raises(BundleError) as refusal:
        write_bundle(out, contents)
    assert field in refusal.value.field, str(refusal.value)
    assert not out.exists()
