"""What a newcomer meets at the command line: a closed pipe, an unknown revision, a missing path.

Each runs `python -m attnwatch.cli.main` in a real subprocess, as a shell would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from attnwatch.history.store.location import parse_location

REPO_ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(
        os.environ,
        ATTNWATCH_DB=str(tmp_path / "history.duckdb"),
        PYTHONPATH=str(REPO_ROOT) + (os.pathsep + path if path else ""),
    )


def _cli(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd or tmp_path,
        env=_env(tmp_path),
    )


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`attnwatch … | head`: the reader closes the pipe before the command writes; no traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "attnwatch", "variants"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=_env(tmp_path),
    )
    proc.stdout.close()  # before the child has imported anything: its first write meets a closed pipe
    err = proc.stderr.read().decode(errors="replace")
    assert proc.wait(timeout=120) == 141, err  # 128 + SIGPIPE, what `yes | head` leaves under pipefail
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


def test_an_unknown_base_revision_is_named(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "one"], check=True)
    done = _cli(tmp_path, "compare", "--base", "nosuchref", cwd=repo)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["attnwatch compare: error: no such commit or ref: nosuchref"]


def test_ingesting_a_path_that_does_not_exist_says_so(tmp_path):
    done = _cli(tmp_path, "ingest", str(tmp_path / "no-such-bundle"))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    # the path once, then what is wrong with it: no "path:" label after it (issue 44: "path: path:")
    assert len(lines) == 1 and lines[0].endswith("/no-such-bundle: no such file or directory"), lines
    assert ": path:" not in lines[0], lines


def test_ingesting_a_file_that_is_not_a_bundle_names_it_once(tmp_path):
    (tmp_path / "notes.txt").write_text("not a bundle\n")
    done = _cli(tmp_path, "ingest", str(tmp_path / "notes.txt"))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"attnwatch ingest: error: {tmp_path / 'notes.txt'}: not a bundle directory or a pytest-benchmark .json file"
    ]


def test_sigterm_unwinds_like_ctrl_c_so_clean_up_runs(monkeypatch, capsys):
    """SIGTERM (a cancelled CI step) used to end the process on the spot: no `finally`, no
    removed work directory. It now unwinds as Ctrl-C does, exits 143, and the handler is put back."""
    import signal
    import time

    import attnwatch.cli.commands.env as env_command
    from attnwatch.cli.main import main

    cleaned = []

    def long_command(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        finally:
            cleaned.append(True)

    monkeypatch.setattr(env_command, "_run", long_command)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["env"]) == 143
    assert cleaned == [True] and "attnwatch: terminated" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def _boom(message: str):
    def run(args):
        raise RuntimeError(message)

    return run


def test_an_unexpected_exception_is_one_line_naming_the_input_and_the_saved_traceback(tmp_path, monkeypatch, capsys):
    """A defect used to end in a raw traceback (exit 1, the status of a verdict). Now: one line
    with the command, the exception, the history and the input file, and the file holding the
    traceback, under the per-user state directory; exit 70 (EX_SOFTWARE)."""
    import attnwatch.cli.commands.ingest as ingest_command
    from attnwatch.cli.main import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(ingest_command, "_run", _boom("stored \x1b]52;c;AAAA\x07 and\nmore\x00"))
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    db = tmp_path / "h.duckdb"
    assert main(["--db", str(db), "ingest", str(bundle)]) == 70
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1, err
    line = err.strip()
    assert line.startswith(
        "attnwatch ingest: internal error: RuntimeError: stored \\x1b]52;c;AAAA\\x07 and | more\\x00"
    ), line
    assert f"history {db}" in line and f"input {bundle}" in line
    (saved,) = (tmp_path / "state" / "attnwatch" / "tracebacks").iterdir()
    assert f"full traceback in {saved}" in line
    assert (saved.stat().st_mode & 0o777) == 0o600 and (saved.parent.stat().st_mode & 0o777) == 0o700
    text = saved.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: stored" in text and "'ingest'" in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "state"]  # nothing beside the history


def test_a_traceback_directory_that_is_a_link_is_not_written_through(tmp_path, monkeypatch, capsys):
    import attnwatch.cli.commands.env as env_command
    from attnwatch.cli.main import main

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state" / "attnwatch").mkdir(parents=True)
    (tmp_path / "state" / "attnwatch" / "tracebacks").symlink_to(elsewhere)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(env_command, "_run", _boom("boom"))
    assert main(["env"]) == 70
    err = capsys.readouterr().err.strip()
    assert list(elsewhere.iterdir()) == []
    saved = Path(err.rsplit("full traceback in ", 1)[1].split(")")[0])
    try:
        assert saved.parent == Path(__import__("tempfile").gettempdir()) and "RuntimeError: boom" in saved.read_text()
    finally:
        saved.unlink()


def test_an_unexpected_exception_in_a_real_process_is_one_line(tmp_path):
    script = (
        "import sys, attnwatch.cli.commands.env as e\n"
        "def run(args): raise KeyError('no such \\x1b[2J key')\n"
        "e._run = run\n"
        "from attnwatch.cli.main import main\n"
        "sys.exit(main(['env']))\n"
    )
    env = dict(_env(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 70, done.stderr
    assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "internal error: KeyError: 'no such \\x1b[2J key'" in done.stderr and "\x1b" not in done.stderr
    assert "full traceback in " + str(tmp_path / "state" / "attnwatch" / "tracebacks") in done.stderr


def test_a_user_error_naming_control_characters_prints_them_escaped(tmp_path):
    done = _cli(tmp_path, "ingest", str(tmp_path / "no-such\x1b[31m-bundle"))
    assert done.returncode == 2
    assert "\x1b" not in done.stderr and "no-such\\x1b[31m-bundle" in done.stderr and len(done.stderr.splitlines()) == 1


def _step_history(tmp_path: Path) -> Path:
    """A history whose series step up after run 5: detect records alerts and their events."""
    from datetime import datetime, timedelta, timezone

    from bundle_factory import make_bundle
    from attnwatch.history.ingest.write import ingest_paths

    t0 = datetime(2026, 10, 1, tzinfo=timezone.utc)
    db = tmp_path / "history.duckdb"
    ingest_paths(
        parse_location(db),
        [
            make_bundle(
                tmp_path / f"b{i}",
                run_id=f"run-{i}",
                commit_sha=f"{i:040x}",
                seed=i,
                n_samples=10,
                started_at=t0 + timedelta(hours=i),
                commit_date=t0 + timedelta(hours=i),
                variants=("sdpa", "triton_fa2"),
                variant_scale={"triton_fa2": 1.2} if i >= 5 else None,
            )
            for i in range(10)
        ],
    )
    return db


def test_sigterm_inside_a_detect_statement_is_one_line_and_records_nothing(tmp_path):
    """SIGTERM that lands while DuckDB runs detect's INSERT of an alert event: DuckDB's client
    runs the handler and raises RuntimeError('Query interrupted'), which used to end in a
    traceback. Now the command says it was terminated, exits 143, and the transaction is rolled
    back: no alert without its event, nothing at all of this detect."""
    import fault_env

    db = _step_history(tmp_path)
    before = fault_env.content(db)
    done = fault_env.terminated_in("INSERT INTO alert_events", db, "detect")
    lines = [line for line in done.stderr.splitlines() if not line.startswith(fault_env.STATEMENTS_MARK)]
    assert done.returncode == 143 and lines == ["attnwatch: terminated"], done.stderr
    assert fault_env.content(db) == before
    again = fault_env.cli(db, "detect")
    assert again.returncode == 0, again.stderr
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        alerts, without_event = con.execute(
            "SELECT count(*), count(*) FILTER (WHERE alert_id NOT IN (SELECT alert_id FROM alert_events "
            "WHERE action = 'opened')) FROM alerts"
        ).fetchone()
    assert alerts > 0 and without_event == 0


def test_the_dashboard_server_failing_to_start_is_one_line(tmp_path, monkeypatch, capsys):
    """The dashboard's server process (`attnwatch dashboard` runs app.serve) failing before it
    listens: one line naming the history and the saved traceback, exit 70, not a traceback."""

    import attnwatch.app.serve as serve

    def broken() -> None:
        raise ImportError("no module named \x1b[31mplotly")

    monkeypatch.setattr(serve, "preload", broken)
    monkeypatch.setenv("ATTNWATCH_DB", str(tmp_path / "h.duckdb"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with pytest.raises(SystemExit) as ended:
        serve.main()
    assert ended.value.code == 70
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "\x1b" not in err, err
    assert err.startswith(
        "attnwatch dashboard: internal error while starting: ImportError: no module named \\x1b[31mplotly"
    )
    assert f"[history {tmp_path / 'h.duckdb'}]" in err and "full traceback in " + str(tmp_path / "state") in err


def test_the_commands_said_to_open_no_history_never_read_it():
    """An internal error's line names the history only for commands that use one."""
    from attnwatch.cli.main import COMMAND_MODULES
    from attnwatch.cli.top_level import WITHOUT_HISTORY

    commands = REPO_ROOT / "attnwatch" / "cli" / "commands"
    unused = {name for name in COMMAND_MODULES if "args.db" not in (commands / f"{name}.py").read_text()}
    assert unused == set(WITHOUT_HISTORY)


@pytest.mark.parametrize("command", ["cache-key", "install-extras", "variants"])
def test_a_command_of_two_words_that_opens_no_history_is_not_said_to(command):
    """The internal-error line's inputs: a command that never opens the history does not name it,
    whether its name has a dash (`cache-key`) or not."""
    import argparse

    from attnwatch.cli.top_level import _inputs

    args = argparse.Namespace(command=command, db="/no/such/history.duckdb")
    assert not [kind for kind, _ in _inputs(args) if kind == "history"]
    args = argparse.Namespace(command="detect", db="/no/such/history.duckdb")
    assert [kind for kind, _ in _inputs(args)] == ["history"]
