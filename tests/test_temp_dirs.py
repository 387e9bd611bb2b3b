"""Temporary directories do not outlive their process: real children, killed as CI kills them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from attnwatch.history.temp_dirs import mark_kept, owned_temp_dir, sweep_stale

REPO_ROOT = Path(__file__).resolve().parent.parent
HOLD = "import sys, time\nprint({expr}, flush=True)\ntime.sleep(120)\n"


def _child(tmp: Path, code: str) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(REPO_ROOT))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)


def _killed_holding(tmp: Path, setup: str, expr: str) -> Path:
    """A child that makes its directory and is SIGKILLed: no clean-up of its own runs."""
    child = _child(tmp, setup + HOLD.format(expr=expr))
    try:
        path = Path(child.stdout.readline().strip())
        assert path.is_dir() and path.parent == tmp
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    return path


def test_a_killed_lake_connections_extension_dir_is_swept_by_the_next_process(tmp_path):
    setup = "from attnwatch.history.store.lake import _extension_dir\n"
    killed = _killed_holding(tmp_path, setup, "_extension_dir()")
    assert killed.name.startswith("attnwatch-ext-") and killed.exists()
    done = subprocess.run(
        [sys.executable, "-c", setup + "print(_extension_dir())"],
        capture_output=True,
        text=True,
        env=dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=str(REPO_ROOT)),
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert not killed.exists(), "the dead process's directory was not swept"
    assert not Path(done.stdout.strip()).exists(), "a process that ended normally left its directory"
    assert list(tmp_path.glob("attnwatch-ext-*")) == []


def test_a_directory_kept_for_the_user_or_held_by_a_live_process_is_not_swept(tmp_path):
    kept = _killed_holding(
        tmp_path,
        "from attnwatch.history.temp_dirs import owned_temp_dir, mark_kept\n",
        "(lambda p: (mark_kept(p, 'logs shown to the user'), p)[1])(owned_temp_dir('attnwatch-run-'))",
    )
    live = _child(
        tmp_path,
        "from attnwatch.history.temp_dirs import owned_temp_dir\n"
        + HOLD.format(expr="owned_temp_dir('attnwatch-run-')"),
    )
    try:
        held = Path(live.stdout.readline().strip())
        dead = _killed_holding(
            tmp_path, "from attnwatch.history.temp_dirs import owned_temp_dir\n", "owned_temp_dir('attnwatch-run-')"
        )
        assert sweep_stale("attnwatch-run-", tmp_path) == [dead]
        assert kept.is_dir() and held.is_dir() and not dead.exists()
    finally:
        live.kill()
        live.wait(timeout=30)


def test_names_carry_the_owner_pid(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path = owned_temp_dir("attnwatch-run-")
    assert path.name.startswith(f"attnwatch-run-{os.getpid()}-") and oct(path.stat().st_mode & 0o777) == "0o700"
    mark_kept(path, "test")
    assert sweep_stale("attnwatch-run-", tmp_path) == []  # our own, alive, and kept
