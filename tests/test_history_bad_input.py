"""Bad input: each case gets a message naming the file and the field, exit 2, nothing written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from bundle_factory import as_format_1, make_bundle
from attnwatch.history.contract.bundle import SCHEMA_VERSIONS
from attnwatch.cli.main import main as cli_main
from attnwatch.history.contract.bundle import MAX_FILE_BYTES
from attnwatch.history.contract.timings import BUNDLE_UPGRADERS
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.errors import BundleError, MigrationError, SchemaTooNewError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.store.location import parse_location

TABLES = ("runs", "commits", "results", "samples", "correctness", "builds", "ncu_metrics", "ncu_cases")


def _counts(db_path) -> dict[str, int]:
    with open_read(parse_location(db_path)) as con:
        return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


@pytest.fixture
def stored(tmp_path, db_path):
    """A history holding one good run, and a second good bundle not yet ingested."""
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "first", run_id="first", seed=1)])
    good = make_bundle(tmp_path / "good", run_id="good", seed=2)
    return db_path, good, _counts(db_path)


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _refused(stored, bad: Path, file_name: str, field: str, capsys) -> str:
    """Ingest bad + good together through the CLI: exit 2, message names file and field, no rows."""
    db_path, good, before = stored
    code = cli_main(["--db", str(db_path), "ingest", str(good), str(bad)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert file_name in err and field in err, err
    assert _counts(db_path) == before
    with pytest.raises(BundleError) as info:
        ingest_paths(parse_location(db_path), [good, bad])
    assert file_name in info.value.path and field in info.value.field
    assert _counts(db_path) == before
    return err


def test_truncated_json(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    text = (bad / "benchmark.json").read_text()
    (bad / "benchmark.json").write_text(text[: len(text) // 2])
    assert "truncated JSON" in _refused(stored, bad, "benchmark.json", "json", capsys)


def test_invalid_json(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    (bad / "manifest.json").write_text('{"run_id": bad, }')
    assert "invalid JSON" in _refused(stored, bad, "manifest.json", "json", capsys)


def test_wrong_type_in_manifest(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "manifest.json", lambda d: d.update(pr_number="7"))
    assert "expected an integer" in _refused(stored, bad, "manifest.json", "pr_number", capsys)


def test_wrong_type_in_timing(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "timings.json", lambda d: d["timings"][3].update(batch=1.5))
    _refused(stored, bad, "timings.json", "timings[3].batch", capsys)


def test_nan_latency(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "timings.json", lambda d: d["timings"][0].update(median_us=float("nan")))
    assert "NaN" in (bad / "timings.json").read_text()
    assert "not a finite number" in _refused(stored, bad, "timings.json", "median_us", capsys)


def test_negative_latency_sample(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    path = bad / "samples.json"
    data = json.loads(path.read_text())
    case = sorted(data["samples"])[0]
    data["samples"][case][3] = -2.5
    path.write_text(json.dumps(data))
    assert "negative" in _refused(stored, bad, "samples.json", f"samples.{case}[3]", capsys)


def test_negative_latency_statistic(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "timings.json", lambda d: d["timings"][1].update(min_us=-1.0))
    _refused(stored, bad, "timings.json", "timings[1].min_us", capsys)


def test_unknown_schema_version(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "outcomes.json", lambda d: d.update(schema_version=99))
    assert "newer than this attnwatch" in _refused(stored, bad, "outcomes.json", "schema_version", capsys)


def test_old_schema_version_without_upgrader(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "manifest.json", lambda d: d.update(schema_version=0))
    assert "no upgrader" in _refused(stored, bad, "manifest.json", "schema_version", capsys)


def test_duplicate_case_ids_in_outcomes(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "outcomes.json", lambda d: d["cases"].append(dict(d["cases"][0])))
    assert "duplicate case id" in _refused(stored, bad, "outcomes.json", "case_id", capsys)


def test_duplicate_case_ids_in_benchmarks(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "benchmark.json", lambda d: d["benchmarks"].append(d["benchmarks"][0]))
    assert "duplicate case id" in _refused(stored, bad, "benchmark.json", "benchmarks[", capsys)


def test_oversized_file_is_refused_unread(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    with open(bad / "samples.json", "r+b") as f:  # sparse: no disk used, size is real
        f.truncate(MAX_FILE_BYTES + 1)
    assert "refused unread" in _refused(stored, bad, "samples.json", "size", capsys)


def test_non_utf8_file_name(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    os.close(os.open(os.fsencode(str(bad)) + b"/notes-\xff.json", os.O_CREAT | os.O_WRONLY))
    _refused(stored, bad, "notes-", "file name", capsys)


def test_non_utf8_content(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    raw = (bad / "manifest.json").read_bytes().replace(b'"notes": ""', b'"notes": "caf\xe9"')
    assert b"\xe9" in raw
    (bad / "manifest.json").write_bytes(raw)
    assert "not UTF-8" in _refused(stored, bad, "manifest.json", "encoding", capsys)


def test_symlinked_file_is_refused(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    (bad / "builds.json").unlink()
    (bad / "builds.json").symlink_to("/etc/passwd")
    _refused(stored, bad, "builds.json", "file", capsys)


@pytest.mark.parametrize("where", ["extra_dir", "nested/deeper/link"])
def test_a_symbolic_link_anywhere_inside_a_bundle_is_refused(stored, tmp_path, capsys, where):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    link = bad / where
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to("/etc", target_is_directory=True)
    assert "symbolic link" in _refused(stored, bad, where.split("/")[-1], "file", capsys)


def test_a_stored_bundle_given_again_with_a_link_inside_is_refused_not_skipped(stored, tmp_path, capsys):
    db_path, good, before = stored
    assert cli_main(["--db", str(db_path), "ingest", str(good)]) == 0
    (good / "extra_dir").symlink_to("/etc", target_is_directory=True)
    assert cli_main(["--db", str(db_path), "ingest", str(good)]) == 2
    assert "extra_dir: file: is a symbolic link" in capsys.readouterr().err


def test_a_bundle_that_is_itself_a_symbolic_link_is_refused(stored, tmp_path, capsys):
    real = make_bundle(tmp_path / "real", run_id="bad")
    link = tmp_path / "linked"
    link.symlink_to(real, target_is_directory=True)
    assert "symbolic link" in _refused(stored, link, "linked", "path", capsys)


def test_compare_reads_no_round_with_a_symbolic_link(tmp_path):
    from attnwatch.ci.compare.rounds import read_round

    bundle = make_bundle(tmp_path / "head-round1", run_id="r")
    (bundle / "extra_dir").symlink_to("/etc", target_is_directory=True)
    with pytest.raises(BundleError, match="symbolic link"):
        read_round(bundle)
    link = tmp_path / "linked-round"
    link.symlink_to(make_bundle(tmp_path / "plain", run_id="p"), target_is_directory=True)
    with pytest.raises(BundleError, match="symbolic link"):
        read_round(link)


def test_a_symlinked_pytest_benchmark_file_is_refused(stored, tmp_path, capsys):
    from bundle_factory import make_pytest_benchmark_file

    link = tmp_path / "linked.json"
    link.symlink_to(make_pytest_benchmark_file(tmp_path / "bench.json"))
    assert "symbolic link" in _refused(stored, link, "linked.json", "file", capsys)


def test_a_bundle_of_too_many_entries_is_refused(stored, tmp_path, capsys):
    from attnwatch.history.contract.validate import MAX_BUNDLE_ENTRIES

    bad = make_bundle(tmp_path / "bad", run_id="bad")
    for i in range(MAX_BUNDLE_ENTRIES):
        (bad / f"extra{i}").mkdir()
    assert "more than" in _refused(stored, bad, "bad", "path", capsys)


def test_ok_outcome_without_timing(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad", with_samples=False)
    _edit_json(bad / "timings.json", lambda d: d["timings"].pop(0))
    assert "no timing" in _refused(stored, bad, "outcomes.json", "status", capsys)


def test_unknown_field_is_refused(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    _edit_json(bad / "manifest.json", lambda d: d["environment"].update(gpu_nmae="typo"))
    _refused(stored, bad, "manifest.json", "environment.gpu_nmae", capsys)


def test_reused_run_id_with_different_content(stored, tmp_path, capsys):
    db_path, _, before = stored
    again = make_bundle(tmp_path / "again", run_id="first", seed=99)  # same id, other numbers
    code = cli_main(["--db", str(db_path), "ingest", str(again)])
    err = capsys.readouterr().err
    assert code == 2 and "run_id" in err and "different content" in err and str(again) in err
    assert _counts(db_path) == before


def test_same_run_id_twice_in_one_call_with_different_content(stored, tmp_path):
    db_path, _, before = stored
    a = make_bundle(tmp_path / "a", run_id="twin", seed=3)
    b = make_bundle(tmp_path / "b", run_id="twin", seed=4)
    with pytest.raises(BundleError, match="different content") as info:
        ingest_paths(parse_location(db_path), [a, b])
    assert info.value.field == "run_id"
    assert _counts(db_path) == before


def test_database_newer_than_code(stored, tmp_path, capsys):
    db_path, good, before = stored
    with open_write(parse_location(db_path)) as con:
        con.execute("INSERT INTO schema_migrations VALUES (999, 'from_the_future', now() AT TIME ZONE 'UTC', 'x')")
    code = cli_main(["--db", str(db_path), "ingest", str(good)])
    err = capsys.readouterr().err
    assert code == 2 and "schema version 999" in err and str(db_path) in err
    with pytest.raises(SchemaTooNewError):
        with open_read(parse_location(db_path)):
            pass
    con = duckdb.connect(str(db_path), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == before["runs"]
    con.close()


def test_edited_applied_migration_is_refused(stored):
    db_path, good, _ = stored
    con = duckdb.connect(str(db_path))
    con.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
    con.close()
    with pytest.raises(MigrationError, match="checksum"):
        ingest_paths(parse_location(db_path), [good])


def test_old_manifest_upgraded_by_registered_function(tmp_path, db_path, monkeypatch):
    """A fake bundle format 0 (GPU name at the manifest's top level) is upgraded by an explicit
    function, and then to the current format by the shipped ones, one format at a time."""

    def bundle_v0_to_v1(documents: dict, directory: Path) -> dict:
        manifest = documents["manifest.json"]
        manifest["environment"]["gpu_name"] = manifest.pop("gpu")
        manifest["schema_version"] = 1
        return documents

    monkeypatch.setitem(BUNDLE_UPGRADERS, 0, bundle_v0_to_v1)
    bundle = as_format_1(make_bundle(tmp_path / "old", run_id="old-format"))

    def to_v0(d):
        d["gpu"] = d["environment"].pop("gpu_name")
        d["schema_version"] = 0

    _edit_json(bundle / "manifest.json", to_v0)
    ingest_paths(parse_location(db_path), [bundle])
    with open_read(parse_location(db_path)) as con:
        assert con.execute("SELECT gpu_name, bundle_schema_version FROM runs").fetchone() == (
            "NVIDIA H200",
            SCHEMA_VERSIONS["attnwatch.manifest"],
        )


def test_manifest_listing_a_missing_file(stored, tmp_path, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad")
    (bad / "builds.json").unlink()
    _refused(stored, bad, "manifest.json", "files.builds", capsys)
