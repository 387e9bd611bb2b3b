"""User SQL in a child process whose memory and CPU time the kernel bounds.

DuckDB's memory_limit covers its buffer manager, not everything a query allocates: the strings
of a vector in flight are outside it, and a vector is 2,048 rows. For
`SELECT repeat('x',10000000) FROM range(5000)` DuckDB 1.5.5 copies the constant into every row
of a vector, 20 GB at once, whatever memory_limit says (measured: 8.9 GB when an address-space
limit stopped it, 11 GB before). Only the operating system bounds that, so each query runs in a
child forked by history.sql.server, with
  - RLIMIT_AS = limits.process_memory: an allocation past it fails, DuckDB reports it as "Out
    of Memory" and the query is refused; the parent (the dashboard, the CLI) is untouched;
  - RLIMIT_CPU = timeout x threads + 10 s, a hard stop behind the interrupt timer; no core files;
  - RLIMIT_FSIZE = the spill limit (or the answer's size, if larger) per file: DuckDB allows
    user SQL to write into its temp directory (it adds it to allowed_directories), whose random
    name user SQL cannot learn (history.sql.guard); this bounds such a file all the same;
  - a kill from the parent at timeout + the lock wait + GRACE_S; a child that dies (a signal,
    a crash inside DuckDB) is one refusal line too;
  - its stderr (and stdout) in a file of the query's private temp directory (STDERR_FILE), never
    the terminal: a crash inside DuckDB writes C++'s "terminate called after throwing ..."
    there (`CALL enable_logging(storage='file', ...)` did, with a server path in it), and the
    refusal line carries its gist, paths scrubbed and control characters escaped.

The child does the whole query: open read-only (history.store.db.open_read, any backend, waiting for
a file's lock up to limits.lock_wait_s) in the sandbox (history.sql.sandbox), refuse denied
names (history.sql.guard), on a lake pass the gate (history.sql.gate) and stream the capped
result (history.sql.stream) under the time limit, and write it as an Arrow IPC file into the
query's private temp directory, with a small header beside it (a lock held too long is
reported as history.store.faults words it, naming the process holding it, with a reason that
does not, for the dashboard). The parent reads it
only if it is within the byte cap.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa

from attnwatch.history import errors as history_errors
from attnwatch.history.sql import server as sql_server
from attnwatch.history.store.db import open_read
from attnwatch.history.store.locks import read_wait_s
from attnwatch.history.errors import HistoryError, QueryError
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.sql.gate import extension_functions, refuse_unsafe_lake_sql
from attnwatch.history.sql.guard import public_text, refusal, refuse_denied_names
from attnwatch.history.sql.sandbox import SqlLimits, connect_config, lock_down, size_bytes
from attnwatch.history.sql.stream import Capped, fetch_capped
from attnwatch.history.terminal_text import one_line

GRACE_S = 5.0
IPC_OVERHEAD = 2**20  # schema and framing beyond max_bytes of data
HEADER_FILE = "answer.json"
TABLE_FILE = "answer.arrow"
STDERR_FILE = "stderr.txt"
MAX_STDERR_READ = 64 * 1024  # the end of the child's stderr read for its gist


@dataclass(frozen=True)
class Answer:
    """What came back: the capped result as Arrow, which cap cut it (None, 'rows', 'bytes'), wall
    time, and the result bytes the cap counted (history.sql.stream)."""

    table: pa.Table
    cut: str | None
    elapsed_s: float
    nbytes: int


def _working_directory(fallback: Path) -> str:
    """The caller's working directory, for the query's process: a pooled server was started in
    whatever directory its first caller had, which may since be gone (DuckDB then fails with
    "Could not get working directory"); `fallback` when the caller's own is gone."""
    try:
        return os.getcwd()
    except OSError:
        return str(fallback)


def run_in_worker(location: HistoryLocation, sql: str, limits: SqlLimits, temp_dir: Path) -> Answer:
    """Run one statement in a child (module docstring); raise QueryError or another HistoryError."""
    request = {
        "location": location.fields(),
        "sql": sql,
        "limits": asdict(limits),
        "temp_dir": str(temp_dir),
        "environ": dict(os.environ),
        "cwd": _working_directory(temp_dir),
    }
    deadline = limits.timeout_s + _lock_wait(limits) + GRACE_S
    try:
        status = sql_server.run_child(request, deadline, wait_s=limits.timeout_s)
    except TimeoutError as exc:
        raise QueryError(f"{exc}; try again when they have finished") from None
    except (sql_server.ServerError, OSError) as exc:
        raise QueryError(f"the process that runs queries failed: {exc}") from None
    if status is None:
        raise QueryError(f"the query ran past the {limits.timeout_s:g} s time limit and was stopped")
    header_path = temp_dir / HEADER_FILE
    if not header_path.is_file():
        said = _child_said(temp_dir / STDERR_FILE, location)
        raise QueryError(_death(status) + (f": {said}" if said else ""))
    header = json.loads(header_path.read_text(encoding="utf-8"))
    if header["kind"] != "ok":
        raise _error(header)
    table_path = temp_dir / TABLE_FILE
    if table_path.stat().st_size > limits.max_bytes + IPC_OVERHEAD:  # the child keeps to the cap; this checks it
        raise QueryError(f"the result is larger than the {limits.max_bytes} bytes a result may hold")
    with pa.OSFile(str(table_path)) as source:
        table = pa.ipc.open_file(source).read_all()
    return Answer(table, header["cut"], header["elapsed_s"], header["bytes"])


def _lock_wait(limits: SqlLimits) -> float:
    return read_wait_s() if limits.lock_wait_s is None else limits.lock_wait_s


def _error(header: dict) -> Exception:
    """The child's error as the same history.errors class (HistoryNotFoundError stays one)."""
    cls = getattr(history_errors, header.get("error", ""), None)
    if not (isinstance(cls, type) and issubclass(cls, HistoryError)):
        cls = QueryError
    if issubclass(cls, history_errors.FaultError):  # its reason: what the dashboard shows
        return cls(header["message"], header.get("reason"))
    return cls(header["message"])


def _death(status: int) -> str:
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        why = {
            "SIGXCPU": "it used more CPU time than its time limit allows",
            "SIGXFSZ": "it wrote a file larger than its spill limit",
            "SIGKILL": "it was killed, usually for memory",
        }.get(name, "it crashed")
        return f"the query stopped the process running it ({name}: {why})"
    return f"the process running the query ended without an answer (exit status {os.WEXITSTATUS(status)})"


def _child_said(path: Path, location: HistoryLocation) -> str:
    """The gist of what a child that died wrote on its stderr, fit for the refusal line: C++'s
    `what():` (DuckDB's JSON error unpacked), else its last line; paths and PIDs scrubbed
    (history.sql.guard.public_text), control characters escaped, cut short."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(os.fstat(fh.fileno()).st_size - MAX_STDERR_READ, 0))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    what = [line.split("what():", 1)[1].strip() for line in lines if "what():" in line]
    gist = what[-1] if what else lines[-1] if lines else ""
    try:
        error = json.loads(gist)
        gist = f"{error['exception_type']} Error: {error['exception_message']}"
    except (ValueError, TypeError, KeyError):
        pass
    return one_line(public_text(gist, location), 300)


def answer(request: dict) -> None:
    """In the child: limit this process, run the query, write the answer files."""
    temp_dir = Path(request["temp_dir"])
    said = os.open(temp_dir / STDERR_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.dup2(said, 2)  # the terminal gets nothing raw from this process (module docstring)
    os.dup2(said, 1)
    os.close(said)
    limits = SqlLimits(**request["limits"])
    memory = size_bytes(limits.process_memory)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(limits.timeout_s * limits.threads + 10)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 5))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    largest_file = max(size_bytes(limits.temp_limit), limits.max_bytes + IPC_OVERHEAD)  # a spill file, the answer
    resource.setrlimit(resource.RLIMIT_FSIZE, (largest_file, largest_file))
    os.environ.clear()  # the caller's environment now, not the one the server started with
    os.environ.update(request["environ"])
    try:
        os.chdir(request["cwd"])  # the caller's, as the environment (_working_directory)
        capped, elapsed = _query(HistoryLocation.from_fields(request["location"]), request["sql"], limits, temp_dir)
        with pa.OSFile(str(temp_dir / TABLE_FILE), "wb") as sink, pa.ipc.new_file(sink, capped.table.schema) as writer:
            writer.write_table(capped.table)
        header = {"kind": "ok", "cut": capped.cut, "elapsed_s": elapsed, "bytes": capped.nbytes}
    except HistoryError as exc:  # a lock's names the process holding it (history.store.faults), its reason not
        header = {
            "kind": "error",
            "error": type(exc).__name__,
            "message": str(exc),
            "reason": getattr(exc, "reason", None),
        }
    except (duckdb.Error, pa.ArrowException, OSError, MemoryError) as exc:
        header = {"kind": "error", "error": "QueryError", "message": refusal(exc, limits)}
    (temp_dir / HEADER_FILE).write_text(json.dumps(header), encoding="utf-8")


@contextmanager
def sandboxed(location: HistoryLocation, limits: SqlLimits, temp_dir: Path) -> Iterator[duckdb.DuckDBPyConnection]:
    """The connection a user query runs on: read-only, in the sandbox, configuration locked."""
    with open_read(location, deadline_s=_lock_wait(limits), config=connect_config(limits, temp_dir)) as con:
        lock_down(con, limits)
        yield con


def _query(location: HistoryLocation, sql: str, limits: SqlLimits, temp_dir: Path) -> tuple[Capped, float]:
    try:
        with sandboxed(location, limits, temp_dir) as con:
            try:
                statements = con.extract_statements(sql)
            except duckdb.Error as exc:
                raise QueryError(refusal(exc, limits)) from None
            if len(statements) != 1:
                raise QueryError(f"one statement per query, got {len(statements)}")
            refuse_denied_names(sql)
            gate = (lambda: refuse_unsafe_lake_sql(con, sql)) if location.is_lake else None
            return _timed(con, sql, limits, gate)
    except duckdb.Error as exc:  # opening: a file that is not a history, a damaged one
        raise QueryError(f"{location}: {refusal(exc, limits, location)}") from None


def _timed(con, sql: str, limits: SqlLimits, gate: Callable[[], None] | None = None) -> tuple[Capped, float]:
    """Check (`gate`: binding a lake statement reads the catalog), run and stream, all under the
    time limit (connection.interrupt() from a timer thread)."""
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        con.interrupt()

    timer = threading.Timer(limits.timeout_s, stop)
    started = time.perf_counter()
    timer.start()
    try:
        if gate is not None:
            gate()
        capped = fetch_capped(con.sql(sql), limits.max_rows, limits.max_bytes)
        return capped, time.perf_counter() - started
    except (duckdb.Error, pa.ArrowException, OSError, MemoryError) as exc:
        # An error inside DuckDB's Arrow stream reaches Python as OSError (pyarrow's IOError).
        if stopped.is_set():
            raise QueryError(f"the query ran past the {limits.timeout_s:g} s time limit and was stopped") from None
        if str(exc).startswith("INTERRUPT Error"):
            # Not our timer: an error in another of the query's threads stopped it, and DuckDB 1.5.5
            # sometimes reports only that (1 run in 30 with 2 threads, measured).
            raise QueryError(
                "the query failed in one of its threads and DuckDB reported only 'Interrupted'; "
                "run it again to see the error"
            ) from None
        raise QueryError(refusal(exc, limits)) from None
    finally:
        timer.cancel()


def prepare(request: dict) -> None:
    """In the server, before it forks a lake query's child: the lake's DuckDB extensions loaded
    into the process and the gate's list of their functions (history.sql.gate
    .extension_functions, cached), both inherited by every later child, which otherwise loaded
    them from disk twice: a lake query 1.33 s -> 1.0 s on the 2-core CI machine. No user SQL runs
    here. In the caller's directory, as the child (the server's own may have been removed since
    it started)."""
    if HistoryLocation.from_fields(request["location"]).is_lake:
        os.chdir(request["cwd"])
        extension_functions()


if __name__ == "__main__":
    sql_server.serve(answer, prepare)
