"""The SQL gate on a real lake (PostgreSQL catalog from the session's server): the DuckLake catalog
database is refused under every name form, each checked first to be a real door (DuckDB answers it
when the gate is not asked), while what users ask of the lake still passes.

Most forms are checked on one sandboxed connection, opened as history.sql.worker opens it, so the
test attaches the lake once; two go through the whole user-SQL path (child process and all)."""

from __future__ import annotations

import os
import subprocess
import sys

import duckdb
import pytest

from attnwatch.app.data.sql_console import examples
from bundle_factory import make_bundle
from fault_env import child_env
from sql_probe import catalogue_statements
from attnwatch.history.errors import QueryError
from attnwatch.history.ingest.write import ingest_paths
from attnwatch.history.sql.query import run_user_sql
from attnwatch.history.sql.gate import (
    METADATA_CATALOG,
    dotted_parts,
    hidden_databases,
    refuse_blocked_operators,
    refuse_unsafe_lake_sql,
)
from attnwatch.history.sql.guard import refuse_denied_names
from attnwatch.history.sql.sandbox import SqlLimits, private_temp_dir
from attnwatch.history.store.location import parse_location
from attnwatch.history.sql.worker import sandboxed

CATALOG = "__ducklake_metadata_history"

# Each reaches the catalog database when not gated: its rows (the data path, every file's name)
# or its tables' columns.
CATALOG_FORMS = [
    f"SELECT * FROM {CATALOG}.ducklake_metadata",  # two-part: catalog.table
    f'SELECT * FROM "{CATALOG}"."ducklake_data_file"',
    f"SELECT * FROM {CATALOG.upper()}.DUCKLAKE_DATA_FILE",
    "SELECT * FROM __DuckLake_Metadata_History.Ducklake_Data_File",
    f'SELECT path FROM "{CATALOG}".ducklake_data_file',
    f"SELECT * FROM {CATALOG}.public.ducklake_data_file",  # three-part
    f'SELECT * FROM "{CATALOG}"."public"."ducklake_metadata"',
    f"FROM {CATALOG}.ducklake_data_file",  # FROM-first
    f"DESCRIBE {CATALOG}.ducklake_data_file",
    f"DESCRIBE SELECT * FROM {CATALOG}.ducklake_data_file",
    f"SUMMARIZE {CATALOG}.ducklake_data_file",
    f"SUMMARIZE SELECT path FROM {CATALOG}.ducklake_data_file",
    f"SHOW {CATALOG}.ducklake_data_file",
    f"SELECT * FROM runs, (SELECT path FROM {CATALOG}.ducklake_data_file) f",  # in a subquery
    f"WITH f AS (SELECT * FROM {CATALOG}.ducklake_data_file) SELECT * FROM f",  # in a CTE
    f"SELECT (SELECT max(value) FROM {CATALOG}.ducklake_metadata)",  # a scalar subquery
    f"SELECT * FROM runs WHERE EXISTS (SELECT 1 FROM {CATALOG}.ducklake_data_file)",
    f"SELECT * FROM pragma_table_info('{CATALOG}.ducklake_data_file')",  # a name given as text
    f"""SELECT * FROM pragma_table_info('"{CATALOG}".public.ducklake_data_file')""",
    f"SELECT * FROM pragma_show('{CATALOG}.ducklake_data_file')",
    f"SELECT * FROM {CATALOG}.information_schema.tables",
]
# Statements that are no SELECT and reach the catalog database: a lake answers SELECTs only.
NOT_SELECT_FORMS = [
    f"PRAGMA table_info('{CATALOG}.ducklake_data_file')",
    f"CALL pragma_table_info('{CATALOG}.ducklake_data_file')",
    "PRAGMA database_size",
]
# Statements given the catalog database's name that show nothing of it here: refused all the same.
CATALOG_BY_NAME = [
    f"SHOW TABLES FROM {CATALOG}",
    f'SHOW TABLES FROM "{CATALOG}".public',
    f"SELECT * FROM checkpoint('{CATALOG}')",
    f"SELECT * FROM pragma_metadata_info('{CATALOG}')",
    f"SELECT * FROM ducklake_snapshots('{CATALOG.upper()}')",
    f"SELECT * FROM duckdb_table_sample('{CATALOG}.ducklake_data_file')",
]
# The lake's own catalog functions that show the data path, under any name.
DATA_PATH_FUNCTIONS = [
    "SELECT * FROM history.options()",
    "SELECT * FROM history.settings()",
    'SELECT data_path FROM "HISTORY".settings()',
]
# Listings of the catalogue: they pass, and list nothing of the catalog database.
LISTINGS = [
    "SELECT * FROM information_schema.tables",
    "SELECT * FROM information_schema.columns",
    "SELECT * FROM information_schema.schemata",
    "SELECT * FROM duckdb_tables()",
    "SELECT * FROM duckdb_columns()",
    "SELECT * FROM duckdb_views()",
    "SELECT * FROM duckdb_schemas()",
    "SHOW ALL TABLES",
    "SHOW TABLES",
]


@pytest.fixture(scope="module")
def lake(postgres_server, tmp_path_factory):
    """One lake with one run for the whole module (the tests only read it): (location, data path)."""
    work = tmp_path_factory.mktemp("gate_lake")
    name = postgres_server.create_database(f"gate_{os.getpid()}")
    location = f"ducklake:postgres:{postgres_server.dsn(name)}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ATTNWATCH_LAKE_DATA", str(work / "lake-data"))
        ingest_paths(parse_location(location), [make_bundle(work / "b", n_samples=5)])
    return location, str(work / "lake-data")


@pytest.fixture(scope="module")
def lake_con(lake):
    with private_temp_dir() as temp_dir, sandboxed(parse_location(lake[0]), SqlLimits(), temp_dir) as con:
        yield con


def test_the_catalog_database_is_refused_under_every_name_form(lake_con):
    for sql in CATALOG_FORMS:
        assert lake_con.execute(sql).fetchall(), f"not a door: {sql}"
        with pytest.raises(QueryError, match="own tables only") as info:
            refuse_unsafe_lake_sql(lake_con, sql)
        assert CATALOG in str(info.value).lower(), (sql, str(info.value))


def test_the_catalog_database_given_by_its_bare_name_is_refused(lake_con):
    assert hidden_databases(lake_con) == {METADATA_CATALOG} == {CATALOG}  # the one database the lists hide
    for sql in CATALOG_BY_NAME:
        with pytest.raises(QueryError, match="own tables only|not available"):
            refuse_unsafe_lake_sql(lake_con, sql)


def test_statements_that_are_no_select_are_refused(lake_con):
    for sql in NOT_SELECT_FORMS:
        assert CATALOG in str(lake_con.execute(sql).fetchall()) or "ducklake_data_file" in sql, f"not a door: {sql}"
        with pytest.raises(QueryError, match="SELECT statements only"):
            refuse_unsafe_lake_sql(lake_con, sql)


def test_no_catalogue_function_or_view_shows_the_catalog_database(lake, lake_con):
    """Every argument-free table function, pragma and system view the lake connection has (its
    extensions' too), as the worker checks it: refused, or its rows hold nothing of the catalog
    database (its name, the data path, the catalog's connection string)."""
    catalog_db = parse_location(lake[0]).catalog.split()[0]  # dbname=...
    shown = []
    for sql in catalogue_statements(lake_con):
        if sql.split()[-1].rstrip("()").lower() in (
            "checkpoint",
            "force_checkpoint",
            "enable_profiling",
            "enable_logging",
            "truncate_duckdb_logs",
        ):
            continue  # change state: refused by name (WRITES, denied.toml), or on the read-only, locked connection
        try:
            refuse_denied_names(sql)
            refuse_unsafe_lake_sql(lake_con, sql)
        except (QueryError, duckdb.Error):
            continue
        try:
            rows = str(lake_con.execute(sql).fetchall())
        except duckdb.Error as exc:
            rows = str(exc)
        leaked = [s for s in (CATALOG, lake[1], catalog_db) if s in rows.lower() or s in rows]
        if leaked:
            shown.append((sql, leaked))
    assert shown == [], shown


def test_the_binding_check_alone_refuses_reading_the_catalog(lake_con):
    """Check 3 does not read names: a read of the catalog's rows is a PostgreSQL scan in the plan."""
    for sql in CATALOG_FORMS[:8] + [f"SUMMARIZE {CATALOG}.ducklake_data_file"]:
        with pytest.raises(QueryError, match="reads the lake's catalog database"):
            refuse_blocked_operators(lake_con, sql)


def test_functions_that_show_the_data_path_are_refused(lake, lake_con):
    data_path = lake[1]
    for sql in DATA_PATH_FUNCTIONS:
        assert data_path in str(lake_con.execute(sql).fetchall()), f"not a door: {sql}"
        with pytest.raises(QueryError, match="own tables only"):
            refuse_unsafe_lake_sql(lake_con, sql)


def test_catalogue_listings_pass_and_show_nothing_of_the_catalog_database(lake, lake_con):
    for sql in LISTINGS:
        refuse_unsafe_lake_sql(lake_con, sql)
        rows = str(lake_con.execute(sql).fetchall())
        assert "ducklake_data_file" not in rows and "__ducklake" not in rows.lower(), sql
        assert lake[1] not in rows, sql


def test_what_users_ask_of_a_lake_still_passes(lake_con):
    asked = [e.sql for e in examples()] + [
        "SELECT count(*) FROM runs",
        "FROM results LIMIT 3",
        "DESCRIBE runs",
        "SUMMARIZE results",
        "SHOW TABLES",
        "SELECT * FROM history.main.runs",
        "SELECT * FROM main.runs",
        "SELECT * FROM pragma_table_info('main.runs')",
        "SELECT snapshot_id FROM ducklake_snapshots('history')",
        "SELECT * FROM ducklake_table_info('history')",
        "SELECT * FROM pg_catalog.pg_tables",
        "SELECT CAST('{}' AS JSON), [1, 2], {'a': 1}, map([1], [2])",
        "WITH t AS (SELECT * FROM runs) SELECT t.run_id FROM t",
    ]
    for sql in asked:
        refuse_unsafe_lake_sql(lake_con, sql)
        lake_con.execute(sql).fetchall()


def test_the_whole_user_sql_path_refuses_the_two_part_name(lake):
    lake_db = lake[0]
    for sql in (f"SELECT * FROM {CATALOG}.ducklake_metadata", f"DESCRIBE {CATALOG}.ducklake_data_file"):
        with pytest.raises(QueryError, match="own tables only"):
            run_user_sql(parse_location(lake_db), sql)


def test_names_given_as_text_are_read_as_the_parser_reads_them():
    assert dotted_parts("cat.tbl") == ["cat", "tbl"] and dotted_parts("runs") == ["runs"]
    assert dotted_parts(' "Cat"."sch" . tbl ') == ["Cat", "sch", "tbl"]
    assert dotted_parts('"a.b".c') == ["a.b", "c"]
    assert dotted_parts("/etc/passwd") == [] and dotted_parts("a b.c") == [] and dotted_parts("a.b.c.d") == []


# A catalog table's name reached through an expression, which DuckDB evaluates only after the gate:
# each form as the argument of a table function that reads a table's name.
CATALOG_TABLE = f"{CATALOG}.ducklake_data_file"
COMPUTED_NAMES = {
    "concatenation": "'__ducklake_metadata_' || 'history.ducklake_data_file'",
    "concat": "concat('__ducklake_metadata_', 'history.ducklake_data_file')",
    "lower": f"lower('{CATALOG_TABLE.upper()}')",
    "replace": "replace('X.ducklake_data_file', 'X', '__ducklake_metadata_history')",
    "format": "format('{}.ducklake_data_file', '__ducklake_metadata_history')",
    "printf": "printf('%s.ducklake_data_file', '__ducklake_metadata_history')",
    "cast": f"CAST('{CATALOG_TABLE}' AS VARCHAR)",
    "cast from bytes": r"CAST('\x5F\x5Fducklake_metadata_history.ducklake_data_file'::BLOB AS VARCHAR)",
    "variable": "getvariable('catalog_table')",
    "prepared parameter": "$1",
    "subquery": f"(SELECT '{CATALOG_TABLE}')",  # DuckDB refuses it itself; the gate must too
}
NAME_READERS = ("pragma_table_info", "pragma_show")


@pytest.fixture(scope="module")
def reader_lake(lake, postgres_server):
    """The module's lake as README's dashboard role (SELECT on the catalog's tables, nothing else)."""
    dbname = parse_location(lake[0]).catalog.split()[0].split("=")[1]
    return f"ducklake:postgres:{postgres_server.read_only_role(dbname, f'gate_reader_{dbname}')}"


@pytest.fixture(scope="module")
def reader_con(reader_lake):
    with private_temp_dir() as temp_dir, sandboxed(parse_location(reader_lake), SqlLimits(), temp_dir) as con:
        con.execute(f"SET VARIABLE catalog_table = '{CATALOG_TABLE}'")
        yield con


@pytest.mark.parametrize("form", sorted(COMPUTED_NAMES))
def test_a_catalog_name_computed_by_an_expression_is_refused(reader_con, form):
    for function in NAME_READERS:
        sql = f"SELECT * FROM {function}({COMPUTED_NAMES[form]})"
        params = [CATALOG_TABLE] if form == "prepared parameter" else None
        if form != "subquery":  # a real door: the read-only role sees the catalog table's columns
            assert "data_file_id" in str(reader_con.execute(sql, params).fetchall()), f"not a door: {sql}"
        with pytest.raises(QueryError) as info:
            refuse_unsafe_lake_sql(reader_con, sql)
        assert str(info.value).startswith(f"{function}: ") and "\n" not in str(info.value), str(info.value)


def test_a_name_given_to_a_table_macro_is_checked_as_a_name(reader_con):
    """histogram() takes its table as a plain name, which DuckDB's binder error would answer with
    the catalog table's columns."""
    for sql in (
        f"SELECT * FROM histogram({CATALOG_TABLE}, nonexistent)",
        f"SELECT * FROM histogram('{CATALOG_TABLE} ', nonexistent)",
    ):
        with pytest.raises(QueryError, match="own tables only"):
            refuse_unsafe_lake_sql(reader_con, sql)
    for sql in (
        "SELECT * FROM histogram(results, median_us)",
        "SELECT * FROM pragma_table_info('runs')",
        "SELECT * FROM range(2 * 3)",
        "SELECT r.run_id, u FROM runs r, unnest([r.run_id, r.repo]) t(u)",
    ):
        refuse_unsafe_lake_sql(reader_con, sql)
        reader_con.execute(sql).fetchall()


def test_only_the_listed_table_functions_take_computed_arguments(lake_con):
    """Every table function the lake connection has refuses a computed argument, unless
    history/sql/computed_arguments.toml lists it (each entry a real table function)."""
    from attnwatch.history.sql.gate import computed_argument_functions  # new with the rule

    functions = {
        r[0].lower()
        for r in lake_con.execute(
            "SELECT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')"
        ).fetchall()
    }
    listed = computed_argument_functions()
    assert listed and listed <= functions, listed - functions
    for function in sorted(functions - listed):
        with pytest.raises(QueryError, match=f"^{function}: "):
            refuse_unsafe_lake_sql(lake_con, f"SELECT * FROM {function}('run' || 's')")


def test_the_whole_user_sql_path_refuses_a_computed_name_in_one_line(reader_lake):
    sql = f"SELECT * FROM pragma_table_info({COMPUTED_NAMES['concatenation']})"
    with pytest.raises(QueryError, match="^pragma_table_info: .*literals or plain names"):
        run_user_sql(parse_location(reader_lake), sql)
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "--db", reader_lake, "sql", sql],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "data_file_id" not in done.stdout, (done.stdout, done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1 and "pragma_table_info" in done.stderr, done.stderr


def test_lake_connections_load_no_extension_of_their_own_accord(lake, lake_con):
    """The dashboard's readers, a writer and the SQL sandbox: only the lake's own extensions, loaded
    from their wheels; what would load another one says it is not loaded."""
    from attnwatch.history.store.db import open_read, open_write
    from attnwatch.history.store.sealed import SEALED_SETTINGS  # new with history.store.sealed

    settings = "SELECT " + ", ".join(f"current_setting('{s}')" for s in SEALED_SETTINGS)
    with open_read(parse_location(lake[0])) as reader, open_write(parse_location(lake[0])) as writer:
        for con in (reader, writer, lake_con):
            assert con.execute(settings).fetchone() == (False,) * len(SEALED_SETTINGS)
            with pytest.raises(duckdb.CatalogException, match="sqlite_scan.*not in the catalog"):
                con.execute("SELECT * FROM sqlite_scan('team.sqlite', 'runs')")
