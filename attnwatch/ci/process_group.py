"""Run a long-lived child (the dashboard's Streamlit server) so that stopping us stops it.

`attnwatch dashboard` serves through a `streamlit run` child. A SIGTERM to the parent alone (a
service manager, a CI step's cancel, `kill PID`) used to end the parent and leave Streamlit
serving the port. Here the child gets its own process group; SIGTERM, SIGINT and SIGHUP to the
parent are forwarded to that whole group, which is killed if it has not stopped within
STOP_GRACE_S; whatever is left in the group when the child exits is killed too; and on Linux
the child is also told (prctl PR_SET_PDEATHSIG) to get SIGTERM should the parent die without
the chance to forward anything (SIGKILL).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_S = 10.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def _death_signal_hook():
    """A preexec function asking Linux to SIGTERM the child when its parent dies; None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # loaded before the fork: the hook only calls it
    except OSError:
        return None
    return lambda: libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def run_in_group(cmd: list[str], env: dict[str, str]) -> int:
    """Run `cmd` to its end; 128 + the signal number when a forwarded signal stopped it."""
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, preexec_fn=_death_signal_hook())
    stop: dict[str, float] = {}

    def forward(signum, _frame) -> None:
        stop.setdefault("at", time.monotonic())
        stop["signum"] = signum
        _signal_group(proc.pid, signum)

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        while True:
            try:
                returncode = proc.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                if "at" in stop and time.monotonic() - stop["at"] > STOP_GRACE_S:
                    _signal_group(proc.pid, signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if proc.poll() is None:  # we are leaving on an exception: take the server with us
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        _signal_group(proc.pid, signal.SIGKILL)  # anything the child started and left behind
    return 128 + int(stop["signum"]) if "signum" in stop else returncode
