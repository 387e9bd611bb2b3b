"""The sandbox a user's SQL runs in: its limits, DuckDB's settings, a private spill directory.

One query, one connection, set up in two steps that either backend's opener can call (a file
through history.store.db.open_read, or any other connection that ends with `lock_down`):

  1. `connect_config(limits, temp_dir)`, given to duckdb.connect: memory_limit, threads,
     extension auto-install/auto-load off, Python replacement scans off (a query could
     otherwise read a DataFrame that happens to be in scope), and temp_directory, a fresh
     private directory per query (`private_temp_dir`, mode 0700 under the system temp
     directory) instead of DuckDB's default `<history>.tmp` beside the history. That
     directory also makes every query's configuration unique, so each query gets a DuckDB
     instance of its own: a sandbox never shares, and locks, the instance of the dashboard's
     ordinary readers, and never lands on another query's instance whose configuration is
     already locked (the per-connection settings below could then not be made).
  2. `lock_down(con, limits)`, before any user text runs, in this order:
       - max_temp_directory_size: the spill limit. DuckDB 1.5.5 ignores it in the connect-time
         configuration (measured: with 16 MB given there a sort spilled 1 GB); SET, it holds.
       - streaming_buffer_size = 1 KB: DuckDB's default (~1 MB) is counted without the
         strings' bytes, so a result of long strings was buffered whole before the first batch
         was read (2.3 GB for 10,000 rows of 200 KB); 1 KB keeps about two vectors in flight.
       - enable_progress_bar off: it prints to stdout, into `attnwatch sql`'s output.
       - enable_external_access off: after temp_directory, which DuckDB refuses to set once it
         is off; after a lake's ATTACH, which needs it.
       - lock_configuration on, last: the query can change none of the above.
"""

from __future__ import annotations

import re
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from attnwatch.history.temp_dirs import owned_temp_dir

MIB = 2**20


@dataclass(frozen=True)
class SqlLimits:
    """What one user query may use. Every field is enforced by DuckDB or by history.sql.stream."""

    max_rows: int = 100_000  # rows fetched; more are cut and flagged
    max_bytes: int = 64 * MIB  # Arrow bytes fetched (history.sql.stream); more are cut and flagged
    timeout_s: float = 30.0  # wall time before connection.interrupt()
    memory_limit: str = "2GB"  # DuckDB's buffer manager (not the strings of a vector in flight)
    threads: int = 2
    temp_limit: str = "256MiB"  # spill to the private temp directory, per query
    process_memory: str = "4GiB"  # address space of the process running the query (history.sql.worker)
    lock_wait_s: float | None = None  # wait for a file history's lock; None: history.store.locks.read_wait_s()

    def __post_init__(self) -> None:
        if (
            self.max_rows < 1
            or self.max_bytes < 1
            or self.timeout_s <= 0
            or self.threads < 1
            or (self.lock_wait_s is not None and self.lock_wait_s < 0)
        ):
            raise ValueError(f"limits must be positive: {self}")
        for text in (self.memory_limit, self.temp_limit, self.process_memory):
            size_bytes(text)


@contextmanager
def private_temp_dir() -> Iterator[Path]:
    """A new directory only this process's user can enter, removed with what is in it on exit."""
    path = owned_temp_dir("attnwatch-sql-")  # a query child killed at its time limit: swept next time
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def connect_config(limits: SqlLimits, temp_dir: Path) -> dict:
    """DuckDB settings for duckdb.connect (step 1 in the module docstring); no lock yet."""
    return {
        "temp_directory": str(temp_dir),
        "memory_limit": limits.memory_limit,
        "threads": limits.threads,
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "python_enable_replacements": False,
    }


def lock_down(con, limits: SqlLimits) -> None:
    """Step 2 in the module docstring: the settings DuckDB takes only after connecting, then the lock."""
    for statement in (
        f"SET max_temp_directory_size = '{limits.temp_limit}'",
        "SET streaming_buffer_size = '1KB'",
        "SET enable_progress_bar = false",
        "SET enable_external_access = false",
        "SET lock_configuration = true",
    ):
        con.execute(statement)


_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def size_bytes(text: str) -> int:
    """A size in DuckDB's spelling ('2GB' = 2e9, '256MiB' = 256 * 2**20) in bytes; ValueError if not one."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"not a size: {text!r} (a number and B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)")
    return int(float(match.group(1)) * _UNITS[unit])
