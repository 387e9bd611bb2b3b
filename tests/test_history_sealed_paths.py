"""A history path that is no DuckDB file is refused before DuckDB is given it, and no DuckDB
connection of attnwatch loads an extension it did not name (history.store.file_check,
history.store.sealed).

Found by a replay of the reliability battery: ATTNWATCH_DB pointed at a SQLite file made `ingest`
try to download the SQLite extension, `md:x` tried MotherDuck and left a 2.3 MB file named `md:x`,
`http://127.0.0.1:9/x.duckdb` created the directories `http:/127.0.0.1:9/`, and a directory read
as "no history here yet". Each form runs through the real CLI in a child process, whose
extension directory (under HOME) must stay untouched, in a directory whose listing must not change.
"""

from __future__ import annotations

import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from bundle_factory import make_bundle
from fault_env import REPO_ROOT, child_env
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.sql.sandbox import SqlLimits, connect_config, lock_down, private_temp_dir
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.store.location import parse_location

SEALED = (
    "autoinstall_known_extensions",
    "autoload_known_extensions",
    "allow_community_extensions",
    "allow_unsigned_extensions",
)
PRODUCT_DIRS = ("attnwatch",)  # every layer is a folder of it


def _sqlite(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (run_id TEXT)")
    con.commit()
    con.close()


def _link_loop(path: Path) -> None:
    path.symlink_to(path.with_name("loop-b"))
    path.with_name("loop-b").symlink_to(path)


# name -> (the --db text, how the work directory gets what it names)
FORMS = {
    "a SQLite file": ("team.sqlite", lambda w: _sqlite(w / "team.sqlite")),
    "md:x": ("md:x", lambda w: None),
    "an http URL": ("http://127.0.0.1:9/x.duckdb", lambda w: None),
    "an s3 URL": ("s3://bucket/x.duckdb", lambda w: None),
    "an hf URL": ("hf://datasets/team/x.duckdb", lambda w: None),
    "a directory": ("histories", lambda w: (w / "histories").mkdir()),
    "a dangling symbolic link": ("gone.duckdb", lambda w: (w / "gone.duckdb").symlink_to(w / "nowhere.duckdb")),
    "a symbolic link loop": ("loop-a", lambda w: _link_loop(w / "loop-a")),
    "a text file": ("notes.duckdb", lambda w: (w / "notes.duckdb").write_text("not a database, only words\n")),
    "random bytes": ("noise.duckdb", lambda w: (w / "noise.duckdb").write_bytes(random.Random(39).randbytes(4096))),
    "a named pipe": ("pipe.duckdb", lambda w: os.mkfifo(w / "pipe.duckdb")),
}
WHERE_TODAY_SAID_NO_HISTORY = ("a directory", "a dangling symbolic link", "a symbolic link loop")


def _listing(root: Path) -> list[str]:
    out = []
    for folder, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(folder, n), root) for n in dirs + files]
    return sorted(out)


@pytest.fixture
def place(tmp_path):
    """(work directory the CLI runs in, a bundle outside it, the environment with a private HOME)."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    bundle = make_bundle(tmp_path / "bundle", n_samples=5)
    return work, bundle, {**child_env(), "HOME": str(home)}


def _cli(work: Path, env: dict, db: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", db, *args],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_path_that_is_no_history_is_refused_in_one_line_and_nothing_is_written(place, tmp_path, form):
    work, bundle, env = place
    db, make = FORMS[form]
    make(work)
    before = _listing(work)
    commands = [("ingest", str(bundle)), ("sql", "SELECT 1")]
    if form in WHERE_TODAY_SAID_NO_HISTORY:
        commands += [("detect",), ("migrate",), ("export", str(tmp_path / "export"))]
    for command in commands:
        done = _cli(work, env, db, *command)
        said = done.stderr.strip()
        assert done.returncode == 2, (command, done.returncode, said)
        assert len(said.splitlines()) == 1 and said.startswith(f"attnwatch {command[0]}: error: "), (command, said)
        # a URL is refused where the command line's --db is parsed, as given; past that, `sql`
        # names a history by its file name
        named = db if "://" in db else Path(db).name if command[0] == "sql" else db
        assert f"error: {named}: " in said and "no history here" not in said, (command, said)
        assert "download" not in said.lower() and "install" not in said.lower(), (command, said)
        assert _listing(work) == before, (command, said)
    assert not (tmp_path / "export").exists()
    assert not (Path(env["HOME"]) / ".duckdb").exists()  # no extension was fetched, nor its directory made


def test_a_missing_history_is_created_only_by_a_writer_and_only_below_a_directory(place):
    work, bundle, env = place
    (work / "notes.txt").write_text("a file\n")
    (work / "gone").symlink_to(work / "nowhere")
    before = _listing(work)
    for command in (("sql", "SELECT 1"), ("detect",), ("migrate",)):
        done = _cli(work, env, "new.duckdb", *command)
        assert done.returncode == 2 and "no history here" in done.stderr, (command, done.stderr)
    for parent in ("notes.txt", "gone"):
        done = _cli(work, env, f"{parent}/new.duckdb", "ingest", str(bundle))
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert f"{parent}/new.duckdb: " in done.stderr and "is not a directory" in done.stderr, done.stderr
    assert _listing(work) == before
    done = _cli(work, env, "team/new.duckdb", "ingest", str(bundle))  # as today: the folders are made
    assert done.returncode == 0, done.stderr
    assert (work / "team" / "new.duckdb").is_file()


def test_a_file_duckdb_writes_has_the_header_the_check_reads(tmp_path):
    from attnwatch.history.store import file_check

    path = tmp_path / "plain.duckdb"
    duckdb.connect(str(path)).close()
    head = path.read_bytes()[: file_check.HEADER_BYTES]
    assert head[file_check.MAGIC_OFFSET :] == file_check.MAGIC == b"DUCK"
    assert file_check.existing(path, str(path)) is True
    assert file_check.existing(tmp_path / "absent.duckdb", "absent") is False


def test_every_history_connection_keeps_extension_loading_off(tmp_path):
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [make_bundle(tmp_path / "b", n_samples=5)])
    _sqlite(tmp_path / "other.sqlite")
    settings = "SELECT " + ", ".join(f"current_setting('{s}')" for s in SEALED)
    with private_temp_dir() as temp_dir:
        sandbox = open_read(parse_location(db), config=connect_config(SqlLimits(), temp_dir))
        for opened in (open_read(parse_location(db)), open_write(parse_location(db)), sandbox):
            with opened as con:
                if opened is sandbox:
                    lock_down(con, SqlLimits())
                assert con.execute(settings).fetchone() == (False,) * len(SEALED)
                # no progress bar drawn on stdout into a command's output
                assert con.execute("SELECT current_setting('enable_progress_bar')").fetchone() == (False,)
                assert con.execute("SELECT current_setting('lock_configuration')").fetchone() == (True,)
                with pytest.raises(duckdb.Error, match="locked"):
                    con.execute("SET autoload_known_extensions = true")
                # What would load an extension answers that it is not loaded: nothing is fetched.
                with pytest.raises(duckdb.CatalogException, match="sqlite_scan.*not in the catalog"):
                    con.execute(f"SELECT * FROM sqlite_scan('{tmp_path / 'other.sqlite'}', 'runs')")
                with pytest.raises(duckdb.Error) as info:
                    con.execute("SELECT * FROM read_csv('https://127.0.0.1:9/x.csv')")
                said = str(info.value)
                assert "download" not in said.lower() and ("httpfs to be loaded" in said or "disabled" in said), said


def test_the_dashboards_reads_keep_extension_loading_off(tmp_path):
    from attnwatch.app.data.store import current_source, read_frame

    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [make_bundle(tmp_path / "b", n_samples=5)])
    frame = read_frame(current_source(db), "SELECT " + ", ".join(f"current_setting('{s}') AS {s}" for s in SEALED))
    assert frame.iloc[0].tolist() == [False] * len(SEALED)


def test_every_duckdb_connection_of_the_product_is_opened_in_one_place():
    opened = []
    for top in PRODUCT_DIRS:
        for path in sorted((REPO_ROOT / top).rglob("*.py")):
            if "duckdb.connect(" in path.read_text(encoding="utf-8"):
                opened.append(str(path.relative_to(REPO_ROOT)))
    assert opened == ["attnwatch/history/store/sealed.py"], opened


def test_sql_that_would_start_a_file_log_is_refused_in_one_line(tmp_path):
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [make_bundle(tmp_path / "b", n_samples=5)])
    logs = tmp_path / "logs"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "--db",
            str(db),
            "sql",
            f"CALL enable_logging(storage='file', storage_path='{logs}')",
        ],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == "", (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert "enable_logging is not available to user SQL" in done.stderr and "terminate" not in done.stderr
    assert not logs.exists()
