"""A small fork server: each user query runs in a fresh child process the parent can kill.

The server process is `python -m attnwatch.history.sql.worker` (SERVER_MODULE): it imports DuckDB and
Arrow once and calls `serve(answer)`, which reads requests (length-prefixed pickles, from the
parent only) on stdin, forks one child per request, reports the child's pid, waits for it and
reports its exit status. The child runs `answer(request)`. (The worker module starts the loop
and hands it its handler, so this module imports nothing of the worker's: no import cycle.) A fork of this single-threaded server takes milliseconds
where a new interpreter takes about a second, and the child inherits none of the parent's
threads, connections or caches (the dashboard's Streamlit server has many).
multiprocessing's forkserver was tried first: in Python 3.11 it re-imports the caller's main
script in every child (its '__main__' preload never takes effect), which for the dashboard is
the whole Streamlit command line, about a second per query.

Parent side: `run_child(request, deadline_s)` sends a request to one of at most MAX_SERVERS
servers (started on first use, restarted if one dies) and returns the child's wait status, or
None when the child ran past `deadline_s` and was killed (SIGKILL). The protocol uses the
server's original stdout; the server and its children write anything else to stderr.
"""

from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import struct
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable

SERVER_MODULE = "attnwatch.history.sql.worker"  # its __main__ runs serve(answer)

MAX_SERVERS = 2  # user queries of one process that run at once; more wait for a free server
START_TIMEOUT_S = 60.0  # a server's first answer (it imports DuckDB and Arrow first)
CLOSE_WAIT_S = 2.0  # how long a closed server may take to end by itself before it is killed
_HEADER = struct.Struct("!I")
_pool: queue.Queue = queue.Queue()
_started = 0
_pool_lock = threading.Lock()


class ServerError(RuntimeError):
    """The server itself failed (not the query): it is discarded and a new one started next time."""


def run_child(request: dict, deadline_s: float, wait_s: float) -> int | None:
    """Run `request` in a forked child; its wait status, or None if it was killed at the deadline.

    Waits up to `wait_s` for a free server; raises TimeoutError if none became free.
    """
    server = _take(wait_s)
    if server.process.poll() is not None:  # it died while idle: start another
        server.close()
        server = _take(wait_s)
    try:
        status = server.run(request, deadline_s)
    except BaseException:  # the server's state is unknown: it is not reused
        server.close()
        raise
    _pool.put(server)
    return status


def close_idle() -> None:
    """Close every idle server of this process (each ends and removes what it holds); one that
    a query is using is left to its caller. For a host that ends before its interpreter does."""
    while True:
        try:
            _pool.get_nowait().close()
        except queue.Empty:
            return


def _take(wait_s: float) -> "_Server":
    global _started
    with _pool_lock:
        if _pool.empty() and _started < MAX_SERVERS:
            _started += 1
            try:
                return _Server()
            except BaseException:
                _started -= 1
                raise
    try:
        return _pool.get(timeout=wait_s)
    except queue.Empty:
        raise TimeoutError(f"{MAX_SERVERS} other queries are running here") from None


class _Server:
    """The parent's handle on one server process."""

    def __init__(self) -> None:
        root = str(Path(__file__).resolve().parents[3])  # the folder holding this `attnwatch`, not another install's
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", SERVER_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self.closed = False

    def run(self, request: dict, deadline_s: float) -> int | None:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None  # both are pipes (__init__)
        _write_frame(stdin.fileno(), request)
        try:
            pid = _read_frame(stdout.fileno(), START_TIMEOUT_S)["pid"]
        except TimeoutError:
            raise ServerError("the SQL server process did not start a query in time") from None
        try:
            return _read_frame(stdout.fileno(), deadline_s)["status"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)  # not yet reaped by the server, so the pid is still this child's
            _read_frame(stdout.fileno(), START_TIMEOUT_S)
            return None
        except BaseException:  # KeyboardInterrupt in the parent: the query does not outlive it
            os.kill(pid, signal.SIGKILL)
            raise

    def close(self) -> None:
        global _started
        if self.closed:
            return
        self.closed = True
        with _pool_lock:
            _started -= 1
        # An idle server ends at the end of its input, running its exit hooks (the extension
        # folder it holds for its children, history.store.lake); one that does not is killed.
        assert self.process.stdin is not None
        try:
            self.process.stdin.close()
            self.process.wait(timeout=CLOSE_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def _write_frame(fd: int, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_frame(fd: int, timeout_s: float | None):
    """One message; TimeoutError if none began within `timeout_s`, ServerError on end of stream."""
    if timeout_s is not None and not select.select([fd], [], [], timeout_s)[0]:
        raise TimeoutError
    header = _read_exactly(fd, _HEADER.size)
    return pickle.loads(_read_exactly(fd, _HEADER.unpack(header)[0]))


def _read_exactly(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, n)
        if not chunk:
            raise ServerError("the SQL server process ended")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def serve(answer: Callable[[dict], None], prepare: Callable[[dict], None] | None = None) -> None:
    """The server loop: one child at a time, each running `answer(request)`; ends when the
    parent closes stdin. `prepare(request)`, when given, runs in the server before each fork:
    work every child would repeat, done once and inherited (it must run no user input). It is
    only a head start: if it fails, the child does the same work again and answers with
    whatever fails there, so its own failure is not reported twice."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    protocol_out = os.dup(1)
    os.dup2(2, 1)  # stray output of the server or a child must not reach the protocol pipe
    while True:
        try:
            request = _read_frame(0, None)
        except ServerError:
            return
        if prepare is not None:
            try:
                prepare(request)
            except Exception:  # the child repeats the work and reports its failure
                pass
        pid = os.fork()
        if pid == 0:
            os.close(protocol_out)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the request pipe is the server's
            code = 1
            try:
                answer(request)
                code = 0
            except BaseException:
                traceback.print_exc()  # a bug, not a refused query (those are answers): to stderr
            finally:
                os._exit(code)
        _write_frame(protocol_out, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _write_frame(protocol_out, {"status": status})
