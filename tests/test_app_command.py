"""`attnwatch dashboard`: the command line, and a real server answering HTTP on loopback."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from attnwatch.cli.main import main
from attnwatch.cli.commands.dashboard import entrypoint

START_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dry_run_prints_a_headless_loopback_streamlit_command(capsys, tmp_path):
    assert main(["--db", str(tmp_path / "h.duckdb"), "dashboard", "--port", "8600", "--dry-run"]) == 0
    out = capsys.readouterr()
    command = out.out.split()
    assert command[1:4] == ["-m", "attnwatch.app.serve", "run"]  # streamlit's own CLI, the app's modules imported first
    assert Path(command[4]).name == "streamlit_app.py" and Path(command[4]).is_file()
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.port") + 1] == "8600"
    assert command[command.index("--server.headless") + 1] == "true"
    assert command[command.index("--runner.magicEnabled") + 1] == "false"
    assert "does not exist yet" in out.err  # a missing history is announced, not an error


def test_no_page_relies_on_magic():
    """Served without Streamlit's magic, a bare expression in a page would show nothing there
    (while AppTest, with magic, would draw it): every page draws through st calls."""
    app_dir = Path(entrypoint()).parent
    for script in [app_dir / "streamlit_app.py", *sorted((app_dir / "views").glob("*.py"))]:
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Expr) and not isinstance(
                node.value, (ast.Call, ast.Await, ast.Yield, ast.YieldFrom)
            ):
                assert isinstance(node.value, ast.Constant) and isinstance(node.value.value, str), (
                    f"{script.name}:{node.lineno}: a bare expression (magic is off in the served dashboard)"
                )


def test_the_served_dashboard_skips_streamlits_once_per_process_repl_check(monkeypatch):
    from streamlit import delta_generator, env_util

    from attnwatch.app.serve import preload

    def walked():
        raise AssertionError("the first element still walks the stack to ask whether this is a REPL")

    monkeypatch.setattr(env_util, "is_repl", walked)
    monkeypatch.setattr(delta_generator, "_use_warning_has_been_displayed", False)  # as in a new process
    preload()
    delta_generator._maybe_print_use_warning()  # what the first element of a process calls


def test_a_port_out_of_range_is_a_clear_error(capsys, tmp_path):
    assert main(["--db", str(tmp_path / "h.duckdb"), "dashboard", "--port", "70000", "--dry-run"]) == 2
    assert "--port: 70000 is not a TCP port" in capsys.readouterr().err


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_the_server_answers_on_loopback_and_a_sigterm_to_the_command_frees_the_port(tmp_path):
    """SIGTERM to `attnwatch dashboard` alone (as a service manager sends it) stops Streamlit too."""
    port = free_port()
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "attnwatch", "--db", str(tmp_path / "h.duckdb"), "dashboard", "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=dict(os.environ),
        )
    try:
        give_up = time.monotonic() + START_TIMEOUT_S
        health = None
        while time.monotonic() < give_up and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                    health = r.read().decode()
                    break
            except OSError:
                time.sleep(0.25)
        assert health == "ok", log.read_text(errors="replace")[-2000:]
        assert "No runtime found" not in log.read_text(errors="replace")  # app.serve's preload logs nothing
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as r:
            assert r.status == 200 and b"<html" in r.read().lower()
        os.kill(proc.pid, signal.SIGTERM)  # the command only, not its process group
        proc.wait(timeout=30)
        give_up = time.monotonic() + 15
        while _listening(port) and time.monotonic() < give_up:
            time.sleep(0.2)
        assert not _listening(port), "Streamlit still serves the port after the command was stopped"
        assert proc.returncode == 128 + signal.SIGTERM
    finally:
        try:  # whatever is left of the test's process group (before the fix: the Streamlit child)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=20)


def test_a_taken_port_is_refused_before_streamlit_starts(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "attnwatch", "--db", str(tmp_path / "h.duckdb"), "dashboard", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            env=dict(os.environ),
        )
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1] == (
            f"attnwatch dashboard: error: port {port} is in use on 127.0.0.1: stop whatever serves it, "
            "or pick another port (attnwatch dashboard --port N, make demo PORT=N)"
        )
        assert "http://" not in done.stderr and time.monotonic() - started < 30
