"""The Makefile a newcomer meets first: `make demo PORT=…`, a taken port, and how the venv is made.

Real `make` on this checkout: dry runs (`make -n`) for what a target would run, and one real
`make demo` that must stop at the port check, before any set-up.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
from attnwatch.history.store.location import parse_location

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs GNU make")


def _make(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`make` in its own process group, killed whole on a timeout (a real `make demo` installs)."""
    cmd = ["make", "--no-print-directory", "-C", str(ROOT), "PYTHON=python3", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _lines_with(text: str, needle: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines() if needle in line]


def test_make_demo_serves_on_the_port_it_is_given(tmp_path):
    done = _make("-n", "demo", "PORT=8502", f"VENV={tmp_path / 'venv'}")
    assert done.returncode == 0, done.stderr
    assert _lines_with(done.stdout, "-m attnwatch.ci.port") == ["python3 -m attnwatch.ci.port 8502"]
    assert [line.split("-m attnwatch ", 1)[1] for line in _lines_with(done.stdout, "attnwatch dashboard")] == [
        "dashboard --port 8502"
    ]
    default = _make("-n", "demo", f"VENV={tmp_path / 'venv'}")
    # No PORT: no second default here; `attnwatch dashboard` and ci/port.py hold the one default.
    assert [line.split("-m attnwatch ", 1)[1] for line in _lines_with(default.stdout, "attnwatch dashboard")] == [
        "dashboard"
    ]


def test_make_demo_on_a_taken_port_fails_in_one_line_before_any_set_up(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = _make("demo", f"PORT={port}", f"VENV={tmp_path / 'venv'}")
    assert done.returncode != 0
    assert _lines_with(done.stderr, "attnwatch:") == [
        f"attnwatch: port {port} is in use on 127.0.0.1: stop whatever serves it, or pick another port "
        "(attnwatch dashboard --port N, make demo PORT=N)"
    ]
    assert not (tmp_path / "venv").exists(), "make demo set things up before finding the port taken"


def test_the_venv_is_isolated_from_the_host_unless_system_torch_is_asked_for(tmp_path):
    venv = tmp_path / "venv"
    isolated = _make("-n", "install", f"VENV={venv}")
    assert _lines_with(isolated.stdout, " -m venv ") == [f"test -x {venv}/bin/python || python3 -m venv {venv}"]
    for value in ("0", ""):
        assert "--system-site-packages" not in _make("-n", "install", f"VENV={venv}", f"SYSTEM_TORCH={value}").stdout
    system = _make("-n", "install", f"VENV={venv}", "SYSTEM_TORCH=1")
    assert _lines_with(system.stdout, " -m venv ") == [
        f"test -x {venv}/bin/python || python3 -m venv --system-site-packages {venv}"
    ]


def test_make_demo_labels_its_cpu_table_as_the_run_summary_does(tmp_path):
    """`make demo` ended on a table whose column said `median_us` for a CPU run's times, while the
    run's summary above it said they were CPU wall clock (issue 44). The demo's query, as make would
    run it, against a real history: its header carries the summary's label."""
    import shlex
    import sys

    from bundle_factory import make_bundle
    from attnwatch.ci.summary import CPU_MEDIAN_LABEL
    from attnwatch.history.ingest.write import ingest_paths

    done = _make("-n", "demo", f"VENV={tmp_path / 'venv'}")
    assert done.returncode == 0, done.stderr
    (query,) = [line for line in done.stdout.splitlines() if " sql " in line and "r.median_us" in line]
    argv = shlex.split(query)
    db = tmp_path / "history.duckdb"
    ingest_paths(parse_location(db), [make_bundle(tmp_path / "bundle", run_id="one", variants=("sdpa",))])
    env = dict(os.environ, ATTNWATCH_DB=str(db), PYTHONPATH=str(ROOT))
    ran = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert ran.returncode == 0, ran.stderr
    header = ran.stdout.splitlines()[0]
    assert CPU_MEDIAN_LABEL in header and "CPU wall clock" in CPU_MEDIAN_LABEL, header
