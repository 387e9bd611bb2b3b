"""What a newcomer meets at the command line: a closed pipe, an unknown revision, a missing path.

Each runs `python -m ci.cli` in a real subprocess, as a shell would.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _env(tmp_path: Path) -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, ATTNWATCH_DB=str(tmp_path / "history.duckdb"),
                PYTHONPATH=str(REPO_ROOT) + (os.pathsep + path if path else ""))


def _cli(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnwatch.ci.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd or tmp_path, env=_env(tmp_path))


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    """`attnwatch … | head`: the reader closes the pipe before the command writes; no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "attnwatch.ci.cli", "variants"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=tmp_path, env=_env(tmp_path))
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
    assert len(lines) == 1 and lines[0].endswith("no-such-bundle: path: no such file or directory"), lines


def test_sigterm_unwinds_like_ctrl_c_so_clean_up_runs(monkeypatch, capsys):
    """SIGTERM (a cancelled CI step) used to end the process on the spot: no `finally`, no
    removed work directory. It now unwinds as Ctrl-C does, exits 143, and the handler is put back."""
    import signal
    import time

    import attnwatch.ci.commands.env as env_command
    from attnwatch.ci.cli import main

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
