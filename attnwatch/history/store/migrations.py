"""Numbered SQL migrations, applied in order when a history is opened for writing.

Each file `history/store/migrations/NNN_name.sql` is one migration: version NNN, name `name`.
Applied migrations are recorded in `schema_migrations(version, name, applied_at, checksum)`
where checksum is the SHA-256 of the file's text. Opening refuses a database that
  - has a version newer than any file here (SchemaTooNewError: upgrade attnwatch), or
  - recorded a checksum that no longer matches the file (MigrationError: migrations are
    append-only; a shipped migration is never edited, a new one is added instead).
Each pending migration runs in its own transaction with its bookkeeping row, so a failing
migration leaves the database at the previous version. On a file each is checkpointed into the
file before the next begins, so no schema change rests in DuckDB's write-ahead log, where
DuckDB 1.5.5 cannot replay some (docs/upstream.md). history.store.db's writers already checkpoint at
every commit; the CHECKPOINT here keeps that true for any other connection handed in.
A new file that no other process can see yet (history.store.db makes it under a temporary name
and links it into place only whole, `new_file=True`) takes every migration in one transaction
instead: a failure there discards the whole file, and one commit is checkpointed once rather
than once per migration (`open_write` of a new history 0.82 s -> 0.61 s on the 2-core CI machine,
docs/benchmarks/suite.md). So does a lake with no schema yet: a failure leaves it as empty as it
was, and its first writer pays one commit's catalog round trips instead of one per migration
(3.1-3.6 s -> 0.8-1.2 s on the 2-core CI machine).

A view defined with `SELECT d.*` returns the columns its tables gained by later migrations, but
a history file's catalogue (information_schema, duckdb_views) keeps the columns the view had when
it was created (DuckDB 1.5.5 binds a view's column list once): latest_results listed 72 columns
and returned 79 when issue 25 found it. So on a file, after migrating, every view whose recorded
columns differ from what its query returns is created again from its own stored statement,
unchanged (`refresh_view_columns`); a lake's catalogue already lists what a view returns.

On a DuckLake the same files apply, translated by history.store.lake_ddl (no constraint clauses) with
the checksum still over the shipped file. A transaction claims the version of each migration it
applies (history.store.transactions), so of two writers opening a new lake at once one applies
them and the other, retried, finds them applied.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import duckdb

from attnwatch.history.errors import MigrationError, SchemaTooNewError
from attnwatch.history.store.lake_ddl import lake_sql
from attnwatch.history.store.transactions import ensure_claim_schema, is_lake, write_transaction

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
_FILE_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       VARCHAR NOT NULL,
    applied_at TIMESTAMP NOT NULL,
    checksum   VARCHAR NOT NULL
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def available_migrations(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migration files shipped with this code, by version; refuses gaps and duplicates."""
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE_NAME.match(path.name)
        if not match:
            raise MigrationError(f"{path}: migration file names look like 001_initial.sql")
        version = int(match.group(1))
        if version in found:
            raise MigrationError(f"{path}: version {version} also used by {found[version].name}")
        found[version] = Migration(version, match.group(2), path.read_text(encoding="utf-8"))
    versions = sorted(found)
    if versions != list(range(1, len(versions) + 1)):
        raise MigrationError(f"{directory}: migration versions must run 1..N without gaps, got {versions}")
    return [found[v] for v in versions]


def code_schema_version(directory: Path = MIGRATIONS_DIR) -> int:
    migrations = available_migrations(directory)
    return migrations[-1].version if migrations else 0


def applied_migrations(con) -> dict[int, tuple[str, str]]:
    """version -> (name, checksum) recorded in the database; empty for a new database."""
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
    ).fetchone()[0]
    if not exists:
        return {}
    rows = con.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    return {int(v): (n, c) for v, n, c in rows}


def check_compatible(con, db_label: str, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Raise if the database cannot be used by this code; return the migrations still to apply."""
    migrations = available_migrations(directory)
    applied = applied_migrations(con)
    newest_known = migrations[-1].version if migrations else 0
    if applied and max(applied) > newest_known:
        raise SchemaTooNewError(
            f"{db_label}: the history is at schema version {max(applied)} "
            f"({applied[max(applied)][0]}) but this attnwatch knows only up to {newest_known}; "
            "upgrade attnwatch to read or write it"
        )
    for m in migrations:
        if m.version in applied and applied[m.version][1] != m.checksum:
            raise MigrationError(
                f"{db_label}: schema_migrations.checksum of migration {m.version:03d}_{m.name} "
                "differs from the shipped file; an applied migration was edited "
                "(add a new migration instead)"
            )
    return [m for m in migrations if m.version not in applied]


def _apply(c, m: Migration, lake: bool, db_label: str) -> int:
    """Run migration `m` and record it, inside the caller's transaction; its version."""
    try:
        c.execute(lake_sql(m.sql) if lake else m.sql)
    except duckdb.Error as exc:
        raise MigrationError(f"{db_label}: migration {m.version:03d}_{m.name} failed: {exc}") from exc
    c.execute(
        "INSERT INTO schema_migrations VALUES (?, ?, now() AT TIME ZONE 'UTC', ?)",
        [m.version, m.name, m.checksum],
    )
    return m.version


def migrate(con, db_label: str, directory: Path = MIGRATIONS_DIR, new_file: bool = False) -> list[int]:
    """Apply pending migrations, each in one transaction (all in one on a `new_file` and on a
    lake with no schema yet, module docstring); return the versions applied. On a file, views
    whose recorded columns are stale are then refreshed (module docstring)."""
    lake = is_lake(con)
    schema_is_new = not applied_migrations(con)
    if not schema_is_new and not check_compatible(con, db_label, directory):
        if not lake:
            refresh_view_columns(con, db_label)
        return []  # current: no migration's write transaction (on a lake each costs catalog round trips)

    def bookkeeping(c, _claims) -> None:
        if lake:
            ensure_claim_schema(c)
        c.execute(lake_sql(_BOOKKEEPING) if lake else _BOOKKEEPING)

    if (new_file and not lake) or (lake and schema_is_new):

        def every_migration(c, claims) -> list[int]:
            bookkeeping(c, claims)
            pending = check_compatible(c, db_label, directory)
            for m in pending:
                claims.take("migration", str(m.version))
            return [_apply(c, m, lake, db_label) for m in pending]

        applied = write_transaction(con, every_migration, db_label)
        if not lake:
            refresh_view_columns(con, db_label)
        return applied

    def next_migration(c, claims) -> int | None:
        pending = check_compatible(c, db_label, directory)
        if not pending:
            return None
        claims.take("migration", str(pending[0].version))
        return _apply(c, pending[0], lake, db_label)

    write_transaction(con, bookkeeping, db_label)
    applied_now = []
    while (version := write_transaction(con, next_migration, db_label)) is not None:
        if not lake:
            con.execute("CHECKPOINT")
        applied_now.append(version)
    if not lake:
        refresh_view_columns(con, db_label)
    return applied_now


def stale_views(con) -> list[tuple[str, str]]:
    """(name, CREATE statement) of each view of the history whose recorded column count differs
    from what its query returns now (`DESCRIBE` binds the query; nothing runs)."""
    views = con.execute(
        "SELECT view_name, column_count, sql FROM duckdb_views() WHERE NOT internal "
        "AND database_name = current_database() AND schema_name = 'main' ORDER BY view_oid"
    ).fetchall()
    stale = []
    for name, recorded, sql in views:
        quoted = '"' + name.replace('"', '""') + '"'
        if len(con.execute(f"DESCRIBE SELECT * FROM {quoted}").fetchall()) != recorded:
            stale.append((name, sql))
    return stale


def refresh_view_columns(con, db_label: str) -> list[str]:
    """Create every stale view again from its own statement, in one transaction, checkpointed;
    return their names. A no-op (no write) when none is stale."""
    stale = stale_views(con)
    if not stale:
        return []

    def body(c, _claims) -> None:
        for name, sql in stale:
            if not sql.startswith("CREATE VIEW "):
                raise MigrationError(f"{db_label}: view {name}'s stored statement is not a CREATE VIEW: {sql[:60]!r}")
            c.execute("CREATE OR REPLACE VIEW " + sql.removeprefix("CREATE VIEW "))

    write_transaction(con, body, db_label)
    con.execute("CHECKPOINT")
    return [name for name, _ in stale]


def database_schema_version(con) -> int:
    applied = applied_migrations(con)
    return max(applied) if applied else 0
