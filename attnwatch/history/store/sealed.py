"""Every DuckDB connection attnwatch opens comes from `connect` here, with extension loading sealed.

DuckDB on its own fetches and loads code when a statement or a database path asks for it: a
SQLite file, an `md:` or `http://` path, `read_csv('https://...')` or `sqlite_scan` make it
download and load the matching extension (auto-install and auto-load of "known" extensions). A
mis-pointed or planted history would then run code from the network. So every connection here
has both off, community and unsigned extensions refused, and loads only the extensions it names
itself, from the installed wheels (history.store.lake: DuckLake, PostgreSQL, httpfs). A
statement that needs another extension fails with DuckDB's "not loaded" error instead.

`locked=True` also locks the configuration once connected, so no statement on the connection can
turn the above back on; connections that change settings after connecting (a lake's attach, the
SQL sandbox's limits) lock at the end of their own set-up instead (history.sql.sandbox.lock_down).
"""

from __future__ import annotations

import duckdb

SEALED_SETTINGS = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
}


# Not a seal but one output contract: DuckDB draws a progress bar on stdout when a statement runs
# past 2 s, into the output of `alerts list`, `export` or a script reading a command's stdout (a
# lake's catalog read after a restart printed one). A per-connection option, so it is SET once
# connected, before the configuration is locked; a further connection to a database instance
# that another connection of this process has already locked cannot change it (the dashboard's
# reads: their output is a page, not stdout).
QUIET_STATEMENTS = ("SET enable_progress_bar = false",)


def connect(
    database: str = ":memory:", *, read_only: bool = False, config: dict | None = None, locked: bool = False
) -> duckdb.DuckDBPyConnection:
    """duckdb.connect with SEALED_SETTINGS (a `config` may add settings, not undo these) and
    QUIET_STATEMENTS run; `locked` then locks the configuration."""
    settings = dict(config or {})
    for key, value in SEALED_SETTINGS.items():
        if settings.setdefault(key, value) != value:
            raise ValueError(f"{key}={settings[key]!r}: a DuckDB connection of attnwatch keeps {key}={value}")
    con = duckdb.connect(database, read_only=read_only, config=settings)
    try:
        already_locked = con.execute("SELECT current_setting('lock_configuration')").fetchone()
        if not (already_locked and already_locked[0]):
            for statement in QUIET_STATEMENTS:
                con.execute(statement)
            if locked:
                con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con
