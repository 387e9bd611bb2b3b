"""The user-SQL fork server's head start (history.sql.server.serve's `prepare`): it runs in the
server before each child is forked, so what it leaves in the process every later child inherits,
and when it fails the child still answers, with nothing written to the caller's terminal.
A real server process driven through its own protocol."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from attnwatch.history.sql.server import _read_frame, _write_frame

REPO = Path(__file__).resolve().parent.parent
SERVER = textwrap.dedent("""\
    from attnwatch.history.sql.server import serve
    HELD = []
    def prepare(request):
        HELD.append(request["n"])
        if request["fail"]:
            raise RuntimeError("the head start failed")
    def answer(request):
        with open(request["log"], "a") as fh:
            fh.write(f"{request['n']}: inherited {HELD}\\n")
    serve(answer, prepare)
""")


def test_each_child_inherits_what_prepare_left_and_a_failed_prepare_costs_no_answer(tmp_path):
    log = tmp_path / "answers.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert server.stdin is not None and server.stdout is not None
    try:
        for n, fail in ((1, False), (2, True), (3, False)):
            _write_frame(server.stdin.fileno(), {"n": n, "fail": fail, "log": str(log)})
            assert "pid" in _read_frame(server.stdout.fileno(), 60)
            assert _read_frame(server.stdout.fileno(), 60) == {"status": 0}
    finally:
        server.stdin.close()
        server.wait(timeout=60)
    assert log.read_text().splitlines() == ["1: inherited [1]", "2: inherited [1, 2]", "3: inherited [1, 2, 3]"]
    assert server.stderr is not None and server.stderr.read() == b""
