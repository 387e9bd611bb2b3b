"""docs/howto/change-the-history-schema.md followed in a copy of the checkout: the page's
migration, saved under the number it says, brings a history this checkout made up to it through
`attnwatch migrate` (which `--check` reports behind first), is in a history created new, and
leaves a history this checkout's attnwatch refuses as newer."""

from __future__ import annotations

import re

import duckdb
import pytest

from attnwatch.history.errors import SchemaTooNewError
from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.store.migrations import available_migrations
from howto_support import HOWTO, code_blocks, copy_checkout, run_in
from attnwatch.history.store.location import parse_location

PAGE = "change-the-history-schema.md"


def _schema(db) -> tuple[int, list[str]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        version = con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0]
        columns = [
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'alerts'"
            ).fetchall()
        ]
    finally:
        con.close()
    return version, columns


def test_the_migration_of_the_howto_applies_to_an_existing_and_a_fresh_history(tmp_path):
    (sql,) = code_blocks(PAGE, "sql")
    current = available_migrations()[-1]
    named = re.findall(r"`(\d{3}_[a-z0-9_]+\.sql)`", (HOWTO / PAGE).read_text(encoding="utf-8"))
    assert f"{current.version:03d}_{current.name}.sql" in named, "the page names the newest shipped migration"
    new_file = next(n for n in named if int(n[:3]) == current.version + 1)
    copy = copy_checkout(tmp_path / "checkout")
    (copy / "history" / "store" / "migrations" / new_file).write_text(sql, encoding="utf-8")

    existing = tmp_path / "existing.duckdb"
    with open_write(parse_location(existing)):  # a history as this checkout leaves it
        pass
    assert _schema(existing)[0] == current.version
    behind = run_in(copy, "-m", "attnwatch", "--db", str(existing), "migrate", "--check")
    assert behind.returncode == 1, behind.stdout + behind.stderr
    done = run_in(copy, "-m", "attnwatch", "--db", str(existing), "migrate")
    assert done.returncode == 0, done.stderr
    assert str(current.version + 1) in done.stdout + done.stderr
    version, columns = _schema(existing)
    assert version == current.version + 1 and "owner" in columns

    fresh = tmp_path / "fresh.duckdb"  # a new history, as a first ingest creates it
    created = run_in(
        copy,
        "-c",
        "import sys; from attnwatch.history.store.db import open_write\n"
        "from attnwatch.history.store.location import parse_location\n"
        "with open_write(parse_location(sys.argv[1])): pass",
        str(fresh),
    )
    assert created.returncode == 0, created.stderr
    version, columns = _schema(fresh)
    assert version == current.version + 1 and "owner" in columns

    with pytest.raises(SchemaTooNewError):
        with open_read(parse_location(existing)):
            pass
