"""What a series is keyed by cannot be forged: a run of another repository is refused (a setting
names the repository, the history records it with its runs), and names that only look like
another (Cyrillic, fullwidth, invisible, bidirectional, no-break space) are refused with the file
and field, by the reader and by the writer alike (history/contract/names.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bundle_factory import make_bundle
from attnwatch.cli.main import main as cli_main
from attnwatch.history.store.db import open_read
from attnwatch.history.errors import BundleError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.contract.names import CASE_ID, LABEL, NAME, name_problem
from attnwatch.history.store.location import parse_location

LOOKALIKES = {
    "cyrillic": "\u0455dpa",  # ѕdpa
    "fullwidth": "\uff53dpa",  # ｓdpa
    "zero-width space": "sdpa\u200b",
    "right-to-left override": "sdpa\u202e",
    "no-break space": "sdpa\u00a0",
}


def _runs(db_path) -> list[tuple[str, str]]:
    if not Path(db_path).exists():
        return []
    with open_read(parse_location(db_path)) as con:
        return con.execute("SELECT run_id, repo FROM runs ORDER BY run_id").fetchall()


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


# --- names ---------------------------------------------------------------------------------------


def test_every_shipped_name_fits_the_rule():
    from attnwatch.kernels.cases import case_id
    from attnwatch.kernels.registry import all_variants
    from attnwatch.kernels.shapes import SHAPES

    variants = [v.name for v in all_variants()]
    assert variants and all(name_problem(v, NAME) is None for v in variants)
    assert all(name_problem(s, NAME) is None for s in SHAPES)
    assert name_problem(case_id("sdpa_flash", "fa_s1024_d64", "bf16", True), CASE_ID) is None
    assert name_problem("test_attention[fp16-1024] x", LABEL) is None


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
def test_a_lookalike_variant_is_refused_naming_file_and_field(tmp_path, db_path, kind, capsys):
    bad = make_bundle(tmp_path / "bad", run_id="bad", variants=("sdpa",), n_cases=1)
    forged = LOOKALIKES[kind]
    _edit_json(bad / "timings.json", lambda d: d["timings"][0].update(variant=forged))
    assert cli_main(["--db", str(db_path), "ingest", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "timings.json: timings[0].variant" in err and ascii(forged) in err, err
    assert len(err.strip().splitlines()) == 1 and not db_path.exists()


@pytest.mark.parametrize(
    ("file", "field", "edit"),
    [
        ("outcomes.json", "cases[0].shape_id", lambda d: d["cases"][0].update(shape_id="b4\u200b_h16")),
        ("outcomes.json", "cases[0].case_id", lambda d: d["cases"][0].update(case_id="sdpa/b4 h16/fp16/causal")),
        ("correctness.json", "records[0].dtype", lambda d: d["records"][0].update(dtype="fp\uff11\uff16")),
        ("samples.json", "samples", lambda d: d["samples"].update({"sdpa\u202e/x/fp16/causal": [1.0]})),
        ("manifest.json", "environment.gpu_name", lambda d: d["environment"].update(gpu_name="NVIDIA \u041d200")),
    ],
)
def test_lookalike_names_in_other_files_are_refused(tmp_path, db_path, file, field, edit):
    bad = make_bundle(tmp_path / "bad", run_id="bad", variants=("sdpa",), n_cases=1)
    _edit_json(bad / file, edit)
    with pytest.raises(BundleError) as info:
        ingest_paths(parse_location(db_path), [bad])
    assert info.value.path.endswith(file) and info.value.field == field
    assert not db_path.exists()


@pytest.mark.parametrize("kind", sorted(LOOKALIKES))
def test_the_writer_refuses_what_the_reader_refuses(tmp_path, kind):
    with pytest.raises(BundleError) as info:
        make_bundle(tmp_path / "bad", variants=(LOOKALIKES[kind],), n_cases=1)
    assert info.value.path.endswith("timings.json") and info.value.field.startswith("timings[0].")
    assert not (tmp_path / "bad").exists()


def test_an_imported_pytest_name_must_be_printable_ascii(tmp_path, db_path):
    document = {
        "version": "5.2.3",
        "datetime": "2026-11-01T12:00:00+00:00",
        "commit_info": {},
        "machine_info": {},
        "benchmarks": [
            {
                "name": "test_attn\u200b",
                "fullname": "t.py::test_attn\u200b",
                "group": None,
                "stats": {"median": 1e-3, "min": 1e-3, "max": 1e-3, "mean": 1e-3},
            }
        ],
    }
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(document))
    with pytest.raises(BundleError) as info:
        ingest_paths(parse_location(db_path), [path])
    assert info.value.field == "benchmarks[0].fullname" and "\\u200b" in str(info.value)


# --- repository ----------------------------------------------------------------------------------

GENUINE = "example/attention-kernels"  # the bundle factory's repository
FOREIGN = "evil/other-repo"


def test_a_foreign_repository_is_refused_once_the_history_has_runs(tmp_path, db_path, capsys, monkeypatch):
    monkeypatch.delenv("ATTNWATCH_REPO", raising=False)
    assert cli_main(["--db", str(db_path), "ingest", str(make_bundle(tmp_path / "genuine", run_id="genuine"))]) == 0
    foreign = make_bundle(tmp_path / "foreign", run_id="foreign", seed=3, repo=FOREIGN)
    capsys.readouterr()
    assert cli_main(["--db", str(db_path), "ingest", str(foreign)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{foreign / 'manifest.json'}: repo: '{FOREIGN}'" in err and repr(GENUINE) in err, err
    assert _runs(db_path) == [("genuine", GENUINE)]
    again = make_bundle(tmp_path / "again", run_id="again", seed=4)
    assert cli_main(["--db", str(db_path), "ingest", str(again)]) == 0
    assert _runs(db_path) == [("again", GENUINE), ("genuine", GENUINE)]


def test_the_setting_names_the_repository_before_the_history_exists(tmp_path, db_path, capsys, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_REPO", GENUINE)
    foreign = make_bundle(tmp_path / "foreign", run_id="foreign", repo=FOREIGN)
    assert cli_main(["--db", str(db_path), "ingest", str(foreign)]) == 2
    assert "ATTNWATCH_REPO" in capsys.readouterr().err and not db_path.exists()
    assert cli_main(["--db", str(db_path), "--repo", FOREIGN, "ingest", str(foreign)]) == 0  # --repo wins
    capsys.readouterr()
    genuine = make_bundle(tmp_path / "genuine", run_id="genuine")
    assert cli_main(["--db", str(db_path), "ingest", str(genuine)]) == 2  # the history holds FOREIGN's runs
    err = capsys.readouterr().err
    assert "ATTNWATCH_REPO is" in err and repr(FOREIGN) in err and len(err.strip().splitlines()) == 1, err
    assert _runs(db_path) == [("foreign", FOREIGN)]


def test_a_first_ingest_must_agree_with_itself(tmp_path, db_path):
    genuine = make_bundle(tmp_path / "genuine", run_id="genuine")
    foreign = make_bundle(tmp_path / "foreign", run_id="foreign", repo=FOREIGN)
    with pytest.raises(BundleError) as info:
        ingest_paths(parse_location(db_path), [genuine, foreign])
    assert info.value.path == str(foreign / "manifest.json") and info.value.field == "repo"
    assert _runs(db_path) == []


def test_a_history_of_several_repositories_asks_for_the_setting(tmp_path, db_path):
    from attnwatch.history.store.db import open_write
    from attnwatch.history.contract.repository import RepositoryError

    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "a", run_id="a")])
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", run_id="b", seed=2)])
    with open_write(parse_location(db_path)) as con:  # as a history written before the check could be
        con.execute("UPDATE runs SET repo = ? WHERE run_id = 'b'", [FOREIGN])
    genuine = make_bundle(tmp_path / "c", run_id="c", seed=3)
    with pytest.raises(RepositoryError, match="several repositories"):
        ingest_paths(parse_location(db_path), [genuine])
    ingest_paths(parse_location(db_path), [genuine], repo=GENUINE)
    assert ("c", GENUINE) in _runs(db_path)


# --- a pytest-benchmark file's repository: a bare name, or none (history.contract.repository) -----


def _plain(tmp_path, name: str, project: str | None, sha: str = "cd" * 20) -> Path:
    """A plain pytest-benchmark file whose commit_info.project is `project` (None: left out)."""
    from bundle_factory import make_pytest_benchmark_file

    path = make_pytest_benchmark_file(tmp_path / name, sha=sha)
    if project is None:
        _edit_json(path, lambda d: d["commit_info"].pop("project"))
    else:
        _edit_json(path, lambda d: d["commit_info"].update(project=project))
    return path


def test_a_bare_project_is_taken_as_the_history_repository_of_that_name_in_one_line(tmp_path, db_path, capsys):
    """pytest-benchmark writes the remote's basename ("attention-kernels"); the history's
    repository is example/attention-kernels: the file is stored as that repository's, said so."""
    assert cli_main(["--db", str(db_path), "ingest", str(make_bundle(tmp_path / "genuine", run_id="genuine"))]) == 0
    capsys.readouterr()
    plain = _plain(tmp_path, "old.json", "attention-kernels")
    assert cli_main(["--db", str(db_path), "ingest", str(plain)]) == 0
    out = capsys.readouterr().out
    assert (
        f"{plain}: commit_info.project 'attention-kernels' (pytest-benchmark's bare project name) taken as "
        f"'{GENUINE}', the history's repository of that name"
    ) in out, out
    assert {repo for _, repo in _runs(db_path)} == {GENUINE}


def test_a_bare_project_names_no_history_and_the_setting_fixes_it(tmp_path, db_path, capsys, monkeypatch):
    monkeypatch.delenv("ATTNWATCH_REPO", raising=False)
    plain = _plain(tmp_path, "old.json", "mykernels")
    assert cli_main(["--db", str(db_path), "ingest", str(plain)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.endswith(
            f"{plain}: commit_info.project: 'mykernels' is pytest-benchmark's bare project name, not "
            "OWNER/NAME, and this history names no repository yet: set ATTNWATCH_REPO (or --repo) to "
            "OWNER/mykernels; nothing was written"
        )
        and len(err.splitlines()) == 1
    ), err
    assert _runs(db_path) == []
    monkeypatch.setenv("ATTNWATCH_REPO", "myteam/mykernels")
    assert cli_main(["--db", str(db_path), "ingest", str(plain)]) == 0
    assert {repo for _, repo in _runs(db_path)} == {"myteam/mykernels"}


def test_a_bare_project_of_another_name_is_refused(tmp_path, db_path, capsys):
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "genuine", run_id="genuine")])
    other = _plain(tmp_path, "other.json", "other-kernels")
    assert cli_main(["--db", str(db_path), "ingest", str(other)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{other}: commit_info.project: 'other-kernels' (pytest-benchmark's bare project name) is not the NAME "
        f"of this history's repository '{GENUINE}'" in err
    ), err
    assert len(_runs(db_path)) == 1


def test_a_file_without_a_project_never_names_the_history(tmp_path, db_path, capsys, monkeypatch):
    """Issue 39: such a file once set the history's repository to '', and every file after it was
    refused. Now it is refused unless the setting names the repository it is stored as."""
    monkeypatch.delenv("ATTNWATCH_REPO", raising=False)
    anonymous = _plain(tmp_path, "anonymous.json", None)
    assert cli_main(["--db", str(db_path), "ingest", str(anonymous)]) == 2
    err = capsys.readouterr().err
    assert f"{anonymous}: commit_info.project: missing: the run does not say which repository it measured" in err
    assert _runs(db_path) == []
    assert cli_main(["--db", str(db_path), "ingest", str(make_bundle(tmp_path / "genuine", run_id="genuine"))]) == 0
    assert cli_main(["--db", str(db_path), "--repo", GENUINE, "ingest", str(anonymous)]) == 0
    assert f"{anonymous}: commit_info.project is missing: taken as '{GENUINE}'" in capsys.readouterr().out
    assert {repo for _, repo in _runs(db_path)} == {GENUINE}


def test_a_history_holding_empty_repositories_names_none(tmp_path, db_path):
    """A history written while '' could become its repository: its '' runs name nothing, so the
    next run is judged by the others (or, with none, names it)."""
    from attnwatch.history.store.db import open_write

    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "a", run_id="a")])
    with open_write(parse_location(db_path)) as con:
        con.execute("UPDATE runs SET repo = ''")
    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "b", run_id="b", seed=2)])
    assert sorted(_runs(db_path)) == [("a", ""), ("b", GENUINE)]


def test_a_checkout_without_a_remote_is_told_how_to_take_the_history_name(tmp_path, db_path, capsys):
    local = make_bundle(tmp_path / "local", run_id="local", repo="local/attention-kernels")
    assert cli_main(["--db", str(db_path), "--repo", GENUINE, "ingest", str(local)]) == 2
    err = capsys.readouterr().err
    assert (
        "'local/attention-kernels' is how a checkout without an origin remote is named: add the remote, or set "
        "ATTNWATCH_REPO where it is measured, and measure again" in err
    ), err


def test_an_export_with_runs_of_no_repository_is_imported_without_naming_the_history(tmp_path, db_path):
    """Runs stored with repo '' (before empty identities were refused) travel with an export, and
    the imported history is named by its other runs, or by the next ingest."""
    from attnwatch.history.store.db import open_write

    ingest_paths(parse_location(db_path), [make_bundle(tmp_path / "a", run_id="a")])
    with open_write(parse_location(db_path)) as con:
        con.execute("UPDATE runs SET repo = ''")
    assert cli_main(["--db", str(db_path), "export", str(tmp_path / "export")]) == 0
    copy = tmp_path / "copy.duckdb"
    assert cli_main(["--db", str(copy), "import", str(tmp_path / "export")]) == 0
    ingest_paths(parse_location(copy), [make_bundle(tmp_path / "b", run_id="b", seed=2)])
    assert sorted(_runs(copy)) == [("a", ""), ("b", GENUINE)]
