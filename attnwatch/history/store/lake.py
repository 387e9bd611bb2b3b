"""Connections to a DuckLake history: PostgreSQL catalog, Parquet data files in a directory or bucket.

The DuckLake and PostgreSQL extensions come from PyPI wheels (`duckdb-extension-ducklake`,
`duckdb-extension-postgres`) built for one DuckDB release, so nothing is downloaded at run time
(history.store.sealed: auto-install and auto-load stay off). The PostgreSQL extension registers
itself as `postgres_scanner`, and DuckDB insists that a file's name matches the extension inside
it, so the wheel's `postgres.duckdb_extension` is loaded through a link of that name in a private
temporary directory.

Every connection is an in-memory DuckDB with the lake attached as `history` and made the default
(`USE history`), so the same SQL runs on a file and on a lake. Settings that would stop the
attach itself (`enable_external_access = false`, `lock_configuration = true`) are applied after
it, in that order, with the lake's data path as the one allowed directory (DuckLake reads its
Parquet files through DuckDB's file system, which external access off would close too).

Connections share one attached instance per process, mode and settings, and get a cursor each
(an attach costs ~0.2 s plus ~0.6 s of extension loading on a 2-core box): the dashboard's
queries, its users' sandboxed SQL (read-only, locked) and its writes each reuse theirs.
"""

from __future__ import annotations

import atexit
import ctypes
import importlib.util
import os
import shutil
import threading
from pathlib import Path

import duckdb

from attnwatch.history.errors import HistoryNotFoundError
from attnwatch.history.store import sealed
from attnwatch.history.store.lake_faults import LakeUnavailableError, is_transient, reason
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.temp_dirs import owned_temp_dir

ALIAS = "history"
# Extension name (what DuckDB expects the file to be called) -> the wheel's Python package.
EXTENSIONS = {"postgres_scanner": "duckdb_extension_postgres", "ducklake": "duckdb_extension_ducklake"}
S3_EXTENSION = ("httpfs", "duckdb_extension_httpfs")
EXT_DIR_PREFIX = "attnwatch-ext-"
DEFERRED_SETTINGS = ("enable_external_access", "lock_configuration")  # applied after the attach, in order

_shared: dict[str, duckdb.DuckDBPyConnection] = {}  # (location, settings) -> instance
_shared_lock = threading.Lock()


def _wheel_file(extension: str, package: str) -> Path:
    spec = importlib.util.find_spec(package)
    wheel = f"{package.replace('_', '-')}=={duckdb.__version__}"
    if spec is None or not spec.submodule_search_locations:
        raise LakeUnavailableError(f"a lake history needs the DuckDB extension {extension!r}: pip install {wheel}")
    root = Path(list(spec.submodule_search_locations)[0]) / "extensions" / f"v{duckdb.__version__}"
    found = sorted(root.glob("*.duckdb_extension")) if root.is_dir() else []
    if not found:
        raise LakeUnavailableError(
            f"{root}: no {extension} extension built for DuckDB {duckdb.__version__} "
            f"(the wheel and DuckDB must be the same release): pip install {wheel}"
        )
    return found[0]


_ext_dir: list[Path] = []  # this process's link directory, made on first use
_ext_dir_lock = threading.Lock()


def _extension_dir() -> Path:
    """A private directory of links named as DuckDB wants each extension file named: one per
    process, removed at exit, swept by the next process when this one was killed
    (history/temp_dirs.py). Made again should a sweep of another PID namespace have taken it."""
    with _ext_dir_lock:
        if not _ext_dir or not _ext_dir[0].is_dir():
            if not _ext_dir:
                atexit.register(_remove_extension_dir, os.getpid())
            _ext_dir[:] = [owned_temp_dir(EXT_DIR_PREFIX)]
        return _ext_dir[0]


def _remove_extension_dir(owner: int) -> None:
    if _ext_dir and os.getpid() == owner:  # not from a forked child that inherited the hook
        shutil.rmtree(_ext_dir[0], ignore_errors=True)


def extension_path(extension: str, package: str) -> Path:
    link = _extension_dir() / f"{extension}.duckdb_extension"
    if not os.path.lexists(link):
        try:
            os.symlink(_wheel_file(extension, package), link)
        except FileExistsError:  # another thread of this process made it first
            pass
    return link


def _sql_text(value: str) -> str:
    return value.replace("'", "''")


def connect(location: HistoryLocation, read_only: bool, config: dict | None = None) -> duckdb.DuckDBPyConnection:
    """A new connection with the lake attached as `history` (created when writing and absent)."""
    settings = dict(config or {})
    deferred = [(k, settings.pop(k)) for k in DEFERRED_SETTINGS if k in settings]
    con = sealed.connect(":memory:", config=settings)
    try:
        for extension, package in EXTENSIONS.items():
            con.execute(f"LOAD '{_sql_text(str(extension_path(extension, package)))}'")
        # No data inlining (every insert a Parquet file, which maintain then merges): with DuckLake
        # 1.5.5 the reader of inlined rows failed with an INTERNAL error that invalidates the
        # instance after a catalog restart, and after another process's flush of them.
        con.execute("SET ducklake_default_data_inlining_row_limit = 0")
        options = ["READ_ONLY"] if read_only else []
        if location.data_path and not read_only:
            options.append(f"DATA_PATH '{_sql_text(location.data_path)}'")
        if location.is_s3 or importlib.util.find_spec(S3_EXTENSION[1]) is not None:
            # DuckLake opens an s3:// data path during the attach, and a reader that names the
            # catalog alone learns the path only from it: S3 access must be ready beforehand.
            _enable_s3(con)
        _attach(con, location, options)
        con.execute(f"USE {ALIAS}")
        stored = con.execute(f"SELECT value FROM {ALIAS}.options() WHERE option_name = 'data_path'").fetchone()
        data_path = str(stored[0]) if stored else (location.data_path or "")
        if data_path:
            # Whoever turns external access off later (here, deferred, or history.sql.sandbox's
            # lock_down), DuckDB then opens only allowed paths: the lake's own files stay readable.
            con.execute(f"SET allowed_directories = ['{_sql_text(data_path)}']")
        for key, value in deferred:
            con.execute(f"SET {key} = {'true' if value is True else 'false' if value is False else repr(value)}")
    except BaseException:
        con.close()
        raise
    return con


def _attach(con, location: HistoryLocation, options: list[str]) -> None:
    where = _sql_text(f"ducklake:postgres:{location.catalog}")
    try:
        con.execute(f"ATTACH '{where}' AS {ALIAS}" + (f" ({', '.join(options)})" if options else ""))
    except duckdb.Error as exc:
        text = " ".join(str(exc).split())
        if "creating a new DuckLake is explicitly disabled" in text:
            raise HistoryNotFoundError(
                f"{location.label}: no lake history in that catalog yet (ingest a bundle with "
                f"ATTNWATCH_LAKE_DATA set to create it)"
            ) from None
        if "does not match existing data path" in text:
            raise LakeUnavailableError(
                f"{location.label}: ATTNWATCH_LAKE_DATA={location.data_path} differs from "
                f"the data path this lake was created with ({text.split('catalog ')[-1]}); "
                "unset it or give the recorded one"
            ) from None
        if "Unable to connect to Postgres" in text or isinstance(exc, duckdb.IOException):
            why = text.split("failed:", 1)[-1].strip() if "failed:" in text else reason(exc)
            why = why if len(why) <= 200 else why[:199] + "…"
            raise LakeUnavailableError(
                f"{location.label}: cannot reach the lake's PostgreSQL catalog: {why}",
                transient=is_transient(text),
                why=why,
            ) from None
        if "requires the extension httpfs" in text:
            raise LakeUnavailableError(
                f"{location.label}: this lake's data files are in an S3 bucket: "
                f"pip install duckdb-extension-httpfs=={duckdb.__version__}"
            ) from None
        if not location.data_path and "DATA_PATH" in text:
            raise LakeUnavailableError(
                f"{location.label}: creating a lake needs a data path: set ATTNWATCH_LAKE_DATA "
                "to a directory or s3://bucket/prefix"
            ) from None
        raise LakeUnavailableError(f"{location.label}: {reason(exc)}", transient=is_transient(text)) from None


def _enable_s3(con) -> None:
    """httpfs from its wheel, and an S3 secret from the standard AWS variables (redacted in
    duckdb_secrets(); AWS_ENDPOINT_URL selects an S3-compatible server such as MinIO).

    Done before the attach whenever the wheel is installed (a reader cannot tell a bucket lake
    from a directory one until attached), so a child process that runs user SQL reads the
    bucket with the AWS variables its caller passed it."""
    con.execute(f"LOAD '{_sql_text(str(extension_path(*S3_EXTENSION)))}'")
    parts = ["TYPE s3"]
    for key, env in (
        ("KEY_ID", "AWS_ACCESS_KEY_ID"),
        ("SECRET", "AWS_SECRET_ACCESS_KEY"),
        ("SESSION_TOKEN", "AWS_SESSION_TOKEN"),
        ("REGION", "AWS_REGION"),
    ):
        if os.environ.get(env):
            parts.append(f"{key} '{_sql_text(os.environ[env])}'")
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "")
    if endpoint:
        host = endpoint.split("://", 1)[-1].rstrip("/")
        parts += [
            f"ENDPOINT '{_sql_text(host)}'",
            "URL_STYLE 'path'",
            f"USE_SSL {'false' if endpoint.startswith('http://') else 'true'}",
        ]
    con.execute(f"CREATE OR REPLACE SECRET attnwatch_lake_s3 ({', '.join(parts)})")


def _key(location: HistoryLocation, read_only: bool, config: dict | None) -> str:
    return f"{location.label}\0{read_only}\0{sorted((config or {}).items())!r}"


def shared_connection(
    location: HistoryLocation, read_only: bool, config: dict | None = None
) -> duckdb.DuckDBPyConnection:
    """A cursor (a connection of its own, with its own transactions) on this process's instance
    of the lake for these settings, attached on first use."""
    key = _key(location, read_only, config)
    with _shared_lock:
        con = _shared.get(key)
        if con is None:
            con = _shared[key] = connect(location, read_only=read_only, config=config)
        cursor = con.cursor()
    cursor.execute(f"USE {ALIAS}")
    return cursor


def forget_shared(location: HistoryLocation, read_only: bool, config: dict | None = None) -> None:
    """Drop the cached instance (after an error that may have left it unusable)."""
    with _shared_lock:
        con = _shared.pop(_key(location, read_only, config), None)
    if con is not None:
        release(con)


def forget_location(location: HistoryLocation) -> None:
    """Drop every cached instance of this lake (after its catalog connection broke)."""
    prefix = f"{location.label}\0"
    with _shared_lock:
        gone = [_shared.pop(k) for k in [k for k in _shared if k.startswith(prefix)]]
    for con in gone:
        release(con)


def invalidated(con) -> bool:
    """Whether DuckDB invalidated this connection's instance: after an internal or fatal error
    every later statement fails with a FatalException, even `SELECT 1`."""
    try:
        con.execute("SELECT 1")
    except duckdb.FatalException:
        return True
    except duckdb.Error:
        return False
    return False


def release(con) -> None:
    """Close a lake connection or cursor, unless DuckDB invalidated its instance: that one is kept.

    DuckLake 1.5.5 can fail internally on a catalog read after PostgreSQL restarted, which
    invalidates the instance (history.store.lake_faults). Closing or freeing a cursor of it whose
    DuckLake transaction is still open then rolls the catalog back from inside a C++ destructor;
    the invalidated instance refuses that statement, and the exception, thrown where none may
    leave, ends the process through std::terminate (the abort of duckdb/ducklake#104). So such a
    connection is given one reference that is never dropped, not even at interpreter exit, and is
    never closed or freed; the caller's retry attaches a new instance. The cost is the memory of
    one abandoned instance per invalidation."""
    if invalidated(con):
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(con))
        return
    try:
        con.close()
    except duckdb.Error:
        pass


def current_snapshot(con) -> int:
    """The id of the lake's latest committed snapshot: it changes with every commit."""
    return int(con.execute(f"SELECT id FROM ducklake_current_snapshot('{ALIAS}')").fetchone()[0])
