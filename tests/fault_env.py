"""Faults for real `attnwatch` subprocesses: kill -9 at a statement, a full disk, a read-only or
forbidden history, and the checks every fault trial makes afterwards.

Shared by the fault tests and scripts/fault_check.py (the full battery). Each fault is a
`preexec_fn` for subprocess, applied in the child only:
  - file_size_limit(n): RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past n bytes fails with
    EFBIG as a full disk fails with ENOSPC (needs no privilege, unlike a small tmpfs);
  - read_only_mount(dir): a private mount namespace in which `dir` is bind-mounted read-only
    (as root; otherwise through a user namespace where the kernel allows one);
  - no_permission_override(): as root, drops CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the
    child, so a file's mode binds it as it binds any user (a non-root user needs nothing).
Run as a script, this module is the statement killer: it runs the CLI with every statement of
the history's write connection counted (a migration's statements one by one, BEGIN and COMMIT
included) and SIGKILLs itself just before statement K:

    python tests/fault_env.py K attnwatch-arguments...    (K=0: count only; the count goes to stderr)

With `--legacy-wal` among the arguments it writes as attnwatch did before history.store.db's
DURABLE_WRITES (commits in the write-ahead log, no CHECKPOINT statements, a new file made in
place): the files `attnwatch history recover` is for. With `--term-in PREFIX` it sends itself
SIGTERM while DuckDB runs the first write statement that starts with PREFIX (`terminated_in`),
instead of that statement: a cancelled CI step landing inside a statement, where DuckDB's client
runs the CLI's handler and raises its own error.
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
STATEMENTS_MARK = "fault_env statements: "
# Rows summed by the statement SIGTERM lands in: about 2 s on an idle 2-core machine, far longer
# than the 0.3 s before the signal, short enough that waiting for its end costs little.
LONG_STATEMENT_ROWS = 400_000_000


def child_env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH")) if p)}


def cli(db: Path | str, *args: str, preexec=None, timeout: float = 300) -> subprocess.CompletedProcess:
    """`attnwatch --db DB ARGS...` in a child process, with an optional fault."""
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", str(db), *args],
        env=child_env(),
        preexec_fn=preexec,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def killed_at(k: int, db: Path | str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI, killed with SIGKILL just before write statement `k` (0: never; its stderr says how many)."""
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(k), "--db", str(db), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def terminated_in(prefix: str, db: Path | str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI, sent SIGTERM while DuckDB runs its first write statement starting with `prefix`."""
    return subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "0", "--term-in", prefix, "--db", str(db), *args],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def statement_count(result: subprocess.CompletedProcess) -> int:
    return int(result.stderr.rsplit(STATEMENTS_MARK, 1)[1].split()[0])


def file_size_limit(nbytes: int):
    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))

    return limit


_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 32, 4096, 16384, 1 << 18
_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def _libc_call(name: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def read_only_mount(directory: Path):
    """In the child only: `directory` read-only (the parent and everyone else still write it)."""
    d = str(directory).encode()
    uid, gid = os.getuid(), os.getgid()

    def mount() -> None:
        if uid == 0:
            _libc_call("unshare", _CLONE_NEWNS)
        else:
            _libc_call("unshare", _CLONE_NEWUSER | _CLONE_NEWNS)
            Path("/proc/self/setgroups").write_text("deny")
            Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
            Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
        _libc_call("mount", b"none", b"/", None, _MS_REC | _MS_PRIVATE, None)
        _libc_call("mount", d, d, None, _MS_BIND, None)
        _libc_call("mount", b"none", d, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)

    return mount


def read_only_unavailable(scratch: Path) -> str | None:
    """Why read_only_mount cannot work on this machine, or None when it does."""
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(
            ["sh", "-c", f"touch '{scratch}/probe'"],
            preexec_fn=read_only_mount(scratch),
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (subprocess.SubprocessError, OSError) as exc:
        return f"no private read-only mount here ({exc})"
    if done.returncode == 0:
        return "a read-only bind mount did not stop writes here"
    return None


def no_permission_override():
    def drop() -> None:
        if os.getuid() == 0:
            for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
                _libc_call("prctl", _PR_CAPBSET_DROP, cap, 0, 0, 0)

    return drop


# --- what every trial checks afterwards ------------------------------------------------------


@dataclass
class Held:
    """What a history holds after a fault, read as a plain DuckDB open would (no attnwatch help)."""

    opens: bool
    error: str = ""
    schema: int = 0
    runs: dict | None = None  # run_id -> result rows


def inspect(db: Path) -> Held:
    """Open the file with DuckDB alone, read-only (what a user's own tools see)."""
    import duckdb

    if not db.exists():
        return Held(True, schema=0, runs={})
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error as exc:
        return Held(False, error=str(exc).splitlines()[0])
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        schema = (
            con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
            if "schema_migrations" in tables
            else 0
        )
        runs = (
            dict(
                con.execute(
                    "SELECT u.run_id, count(r.run_id) FROM runs u LEFT JOIN results r USING (run_id) GROUP BY u.run_id"
                ).fetchall()
            )
            if "runs" in tables
            else {}
        )
        return Held(True, schema=schema or 0, runs=runs)
    finally:
        con.close()


def content(db: Path) -> dict[str, tuple]:
    """Every table's row count and an order-free hash of its rows: equal before and after means unchanged."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' ORDER BY 1"
            ).fetchall()
        ]
        return {t: con.execute(f'SELECT count(*), sum(hash(t)::HUGEINT) FROM "{t}" t').fetchone() for t in tables}
    finally:
        con.close()


def other_paths(text: str, *named: Path | str) -> list[str]:
    """Absolute paths in `text` other than those the user named (and paths within those)."""
    import re

    for path in sorted(map(str, named), key=len, reverse=True):
        text = text.replace(path, "NAMED")
    return re.findall(r"(?<![\w.])/[\w.-][^\s:'\"]*", text)


def reported_inserted(stdout: str) -> set[str]:
    """Run ids the ingest said it inserted (the CLI prints `inserted RUN_ID (...)` per run)."""
    return {line.split()[1] for line in stdout.splitlines() if line.startswith("inserted ")}


def one_line_error(result: subprocess.CompletedProcess) -> str | None:
    """None when the command failed as faults must (non-zero, one line, no traceback, no PID or
    binary path); else what is wrong."""
    err = result.stderr.strip()
    if result.returncode == 0:
        return "exit status 0"
    if "Traceback" in err or len(err.splitlines()) != 1:
        return f"not one line: {err[-600:]!r}"
    if "PID" in err or sys.executable in err or "/bin/python" in err:
        return f"names a PID or binary: {err!r}"
    return None


# --- the statement killer (run as a script) ----------------------------------------------------


class _Counting:
    """A write connection whose statements are counted (a multi-statement text one by one)."""

    def __init__(self, con, kill_at: int, counter: list[int], legacy: bool, term_in: str | None = None) -> None:
        self._con, self._kill_at, self._counter, self._legacy = con, kill_at, counter, legacy
        self._term_in = term_in

    def execute(self, query, parameters=None):
        statements = (
            [query] if parameters is not None or not isinstance(query, str) else self._con.extract_statements(query)
        )
        for statement in statements:
            if self._legacy and str(getattr(statement, "query", statement)).strip().upper() == "CHECKPOINT":
                continue
            self._counter[0] += 1
            if self._counter[0] == self._kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if self._term_in and str(getattr(statement, "query", statement)).lstrip().startswith(self._term_in):
                self._term_in = None
                _terminate_inside(self._con)
            if parameters is None:
                self._con.execute(statement)
            else:
                self._con.execute(statement, parameters)
        return self._con

    def __getattr__(self, name):
        return getattr(self._con, name)


def _terminate_inside(con) -> None:
    """SIGTERM, delivered while DuckDB runs a long statement on `con`.

    A signal sent from this thread would be handled before the next statement starts; so another
    thread sends it once this one has been inside the statement for a moment. The statement is
    long but finite (seconds, not forever): DuckDB 1.5's client raises "Query interrupted" at
    once, but when a worker thread is inside one of the statement's tasks, its clean-up runs the
    statement's remaining tasks to the end before the next statement (the rollback) may start
    (docs/upstream.md, "An interrupted statement runs to its end"). An endless statement would
    hang there; a real one only delays the rollback by its own length.
    """
    import threading
    import time

    main = threading.get_ident()
    running = sys._getframe()

    def send() -> None:
        while sys._current_frames().get(main) is not running or running.f_lineno != inside:
            time.sleep(0.01)
        time.sleep(0.3)  # inside execute: DuckDB polls for signals while it runs
        os.kill(os.getpid(), signal.SIGTERM)

    inside = sys._getframe().f_lineno + 2
    threading.Thread(target=send, daemon=True).start()
    con.execute(f"SELECT sum(i) FROM range({LONG_STATEMENT_ROWS}) t(i)").fetchall()
    raise AssertionError("the long statement ended before the SIGTERM reached it")


def _main(argv: list[str]) -> int:
    import attnwatch.history.store.db as history_db
    from attnwatch.cli.main import main
    from attnwatch.history.store import sealed

    kill_at, counter = int(argv[0]), [0]
    legacy = "--legacy-wal" in argv
    argv = [a for a in argv if a != "--legacy-wal"]
    term_in = None
    if "--term-in" in argv:
        at = argv.index("--term-in")
        term_in = argv[at + 1]
        del argv[at : at + 2]
    if legacy:  # as before: no checkpoint at commit, a new file created in place
        history_db.DURABLE_WRITES = {}
        history_db._create_whole = lambda loc, deadline_s: None

    class _Shim:  # history.store.db's connections, the only ones that write a history file
        def __getattr__(self, name):
            return getattr(sealed, name)

        @staticmethod
        def connect(database, *args, **kwargs):
            con = sealed.connect(database, *args, **kwargs)
            return (
                con
                if kwargs.get("read_only") or database == ":memory:"
                else _Counting(con, kill_at, counter, legacy, term_in)
            )

    history_db.sealed = _Shim()
    try:
        return main(argv[1:])
    finally:
        print(f"{STATEMENTS_MARK}{counter[0]}", file=sys.stderr)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO_ROOT))
    sys.exit(_main(sys.argv[1:]))
