"""User SQL on a lake: what DuckDB's own lock-down does not cover there, refused before it runs.

A lake connection has the PostgreSQL and DuckLake extensions loaded, and with them doors that
`enable_external_access = false` does not close (checked with DuckDB 1.5.5):
  - `postgres_query('__ducklake_metadata_history', ...)` runs SQL on the catalog server with the
    catalog's role (a superuser can read server files with it), `postgres_scan`/`postgres_attach`
    open connections to any server with this process's libpq credentials, and the `ducklake_*`
    maintenance functions change the lake;
  - the catalog database itself: DuckLake attaches it under a name of its own
    (`__ducklake_metadata_history`), which `duckdb_databases()` does not list but every name
    form reaches (`SELECT * FROM __ducklake_metadata_history.ducklake_data_file`, quoted, any
    case, two- or three-part, DESCRIBE, SUMMARIZE, SHOW TABLES FROM ...), with the data path
    and every file's name in its rows;
  - the lake's own catalog functions `history.options()` and `history.settings()`, which show
    the data path.

So on a lake user SQL must pass three checks, in this order (the first two on the syntax tree
`json_serialize_sql` gives, before anything is bound; the third on DuckDB's own binding):
  1. one SELECT (DESCRIBE, SHOW and SUMMARIZE are SELECTs) that calls no function the lake's
     extensions add (found by comparing a plain DuckDB with one that loaded them) except the
     read-only ones in ALLOWED_EXTENSION_FUNCTIONS, no function that runs SQL given as text
     (query, query_table, json_execute_serialized_sql), no table function that writes
     (checkpoint: on a lake it flushes inlined data, which the read-only attach refuses too)
     and none that lists the catalog database (LISTS_CATALOG: pragma_database_size).
     These are refused before binding because binding some of them (postgres_query) already
     talks to a server.
  2. names resolved against what the connection itself lists, not against spellings: every
     qualifier in the statement (the catalog or schema part of a table, a table function, a
     function or a type; also the qualifier of a dotted name given as text to a table
     function, as in pragma_table_info('cat.tbl')) must be a database that `duckdb_databases()`
     lists or a schema that `duckdb_schemas()` lists, and a name given as text may not be the
     database attached but unlisted (METADATA_CATALOG, DuckLake's name for it). The parser has
     already unquoted and split the names, and DuckDB compares them case-insensitively, as
     this check does. A database attached but unlisted, the DuckLake catalog first of all,
     cannot be named, whichever part of a two- or three-part name it takes and whether it is
     quoted or not; unqualified names resolve through the search path, which the locked
     configuration keeps on the lake.
     A table function's argument is read as DuckDB will evaluate it, so it must be a literal
     (the parser has resolved its quotes and escapes) or a plain name (a column reference: what
     a table macro such as histogram takes as its table); its text is checked as a name given
     as text, and may not contain the hidden database's name at all. Any other argument (an
     expression, a function such as concat or lower, a cast, getvariable, a subquery, a
     prepared parameter) is refused, except for the functions of
     history/sql/computed_arguments.toml, which read their arguments as values, never as a
     name. A name computed by an expression exists only once DuckDB evaluates it, after this
     check, and a lookup of a table's columns (pragma_table_info, pragma_show) leaves no trace
     in the plan that check 3 reads.
  3. what the statement binds to: `EXPLAIN (FORMAT json)` makes DuckDB's binder resolve every
     name, view and function and plan the query without running it; the plan may contain no
     operator of the lake's extensions but the lake's own table scan (ducklake_scan) and the
     allowed read-only functions. Reading the catalog's rows by any route is a postgres_scan in
     that plan, and `history.options()` a ducklake_options, so both are refused whatever the
     statement called them.
The catalog role the dashboard uses should be a read-only one as well (docs/reference/history.md, "A team history: DuckLake on PostgreSQL").
history.sql.worker runs check 3 inside the query's time limit.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from attnwatch.history.store import lake, sealed
from attnwatch.history.errors import QueryError
from attnwatch.history.sql.guard import named_reasons

TEXT_AS_SQL = frozenset({"query", "query_table", "json_execute_serialized_sql"})
WRITES = frozenset({"checkpoint", "force_checkpoint"})  # table functions that write (DuckLake flushes inlined data)
# Table functions of plain DuckDB that list the catalog database although duckdb_databases() does not:
# pragma_database_size() gives its name and size (tests/test_history_sql_lake_gate.py sweeps them all).
LISTS_CATALOG = frozenset({"pragma_database_size"})
ALLOWED_EXTENSION_FUNCTIONS = frozenset(
    {
        "ducklake_snapshots",
        "ducklake_table_info",
        "ducklake_current_snapshot",
        "ducklake_last_committed_snapshot",
        "murmur3_32",
    }
)
# Plan operators of the extensions a lake query may contain: its own tables' scan, and the above.
ALLOWED_OPERATORS = ALLOWED_EXTENSION_FUNCTIONS | {"ducklake_scan"}
QUALIFIER_KEYS = ("catalog_name", "schema_name", "catalog", "schema")
OWN_TABLES_ONLY = "SQL on a lake history reads the history's own tables only"
COMPUTED_ARGUMENTS_FILE = Path(__file__).resolve().parent / "computed_arguments.toml"
METADATA_CATALOG = f"__ducklake_metadata_{lake.ALIAS}"  # the name DuckLake attaches the catalog database under

# A name given as text: parts that are plain words or "double-quoted", one to three of them.
_PART = r'(?:"(?:[^"]|"")*"|[A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*)'
_DOTTED_NAME = re.compile(rf"\s*({_PART})(?:\s*\.\s*({_PART}))?(?:\s*\.\s*({_PART}))?\s*")


@lru_cache(maxsize=1)
def extension_functions() -> frozenset[str]:
    """Functions a lake connection has that a plain DuckDB has not."""
    names = "SELECT DISTINCT lower(function_name) FROM duckdb_functions()"
    plain, loaded = sealed.connect(), sealed.connect()
    try:
        before = {r[0] for r in plain.execute(names).fetchall()}
        for extension, package in lake.EXTENSIONS.items():
            loaded.execute(f"LOAD '{str(lake.extension_path(extension, package))}'")
        return frozenset({r[0] for r in loaded.execute(names).fetchall()} - before)
    finally:
        plain.close()
        loaded.close()


def refuse_unsafe_lake_sql(con, sql: str) -> None:
    """Raise QueryError unless `sql` passes the three checks of the module docstring."""
    tree = _syntax_tree(con, sql)
    refuse_blocked_functions(tree)
    refuse_unlisted_qualifiers(tree, *reachable_names(con))
    refuse_blocked_operators(con, sql)


def _syntax_tree(con, sql: str) -> dict:
    tree = json.loads(con.execute("SELECT json_serialize_sql(?::VARCHAR)", [sql]).fetchone()[0])
    if tree.get("error"):
        message = tree.get("error_message", "")
        if "Only SELECT" in message:
            raise QueryError(
                "a lake history answers SELECT statements only (DESCRIBE, SHOW and SUMMARIZE "
                "included); this statement is not one"
            )
        raise QueryError(message or "the statement could not be parsed")
    return tree


def refuse_blocked_functions(tree: dict) -> None:
    """Check 1: no extension function outside the allowed ones, no SQL given as text, nothing that
    writes or lists the catalog database."""
    blocked = (extension_functions() - ALLOWED_EXTENSION_FUNCTIONS) | TEXT_AS_SQL | WRITES | LISTS_CATALOG
    for node in _nodes(tree):
        name = node.get("function_name")
        if isinstance(name, str) and name.lower() in blocked:
            raise QueryError(f"{name}: this function is not available to SQL on a lake history")


def reachable_names(con) -> tuple[frozenset[str], frozenset[str]]:
    """(the databases and schemas this connection lists: the qualifiers user SQL may use; the
    databases attached but not listed: the lake's catalog database), lower-case."""
    listed = con.execute(
        "SELECT database_name FROM duckdb_databases() UNION SELECT schema_name FROM duckdb_schemas()"
    ).fetchall()
    reachable = frozenset(str(name).lower() for (name,) in listed)
    return reachable, frozenset({METADATA_CATALOG.lower()}) - reachable


def hidden_databases(con) -> frozenset[str]:
    """The databases attached but not listed, as `pragma_database_size()` names them (it asks the
    catalog server for sizes: ~90 ms, so the gate uses METADATA_CATALOG and a test checks that
    this finds nothing else)."""
    sized = con.execute("SELECT database_name FROM pragma_database_size()").fetchall()
    listed = con.execute("SELECT database_name FROM duckdb_databases()").fetchall()
    return frozenset(str(n).lower() for (n,) in sized) - frozenset(str(n).lower() for (n,) in listed)


def refuse_unlisted_qualifiers(tree: dict, reachable: frozenset[str], hidden: frozenset[str] = frozenset()) -> None:
    """Check 2: every qualifier names a listed database or schema (module docstring); a name
    given to a table function, as text or as a plain name, neither has a qualifier outside them
    nor is or contains a hidden database's name (`checkpoint('db')`, `pragma_metadata_info('db')`
    take a database's name); any other argument is refused unless the function reads values."""
    for node in _nodes(tree):
        for key in QUALIFIER_KEYS:
            value = node.get(key)
            if isinstance(value, str) and value and value.lower() not in reachable:
                raise QueryError(f"{value}: {OWN_TABLES_ONLY}")
        if node.get("type") == "TABLE_FUNCTION" and isinstance(node.get("function"), dict):
            for parts in _names_given(node["function"]):
                for i, part in enumerate(parts):
                    if (i < len(parts) - 1 and part.lower() not in reachable) or any(h in part.lower() for h in hidden):
                        raise QueryError(f"{part}: {OWN_TABLES_ONLY}")


def computed_argument_functions() -> frozenset[str]:
    """The table functions that may take computed arguments (history/sql/computed_arguments.toml)."""
    return frozenset(named_reasons(COMPUTED_ARGUMENTS_FILE, "computed"))


def _names_given(function: dict) -> list[list[str]]:
    """The names a table function is given, each as its parts: a text literal's dotted parts and
    its whole text as one part (which is searched for a hidden database's name however DuckDB
    splits it), a column reference's; QueryError for an argument whose value only DuckDB's
    evaluation would tell (module docstring, check 2)."""
    name = str(function.get("function_name", "")).lower()
    if name in computed_argument_functions():
        return []
    out = []
    for child in function.get("children") or []:
        kind = child.get("class") if isinstance(child, dict) else None
        if kind == "CONSTANT":
            value = child.get("value") if isinstance(child.get("value"), dict) else {}
            if isinstance(value.get("value"), str) and not value.get("is_null"):
                out += [dotted_parts(value["value"]), [value["value"]]]
        elif kind == "COLUMN_REF" and isinstance(child.get("column_names"), list):
            out.append([str(part) for part in child["column_names"]])
        else:
            what = _ARGUMENT_KINDS.get(str(kind), "an expression")
            raise QueryError(
                f"{name}: on a lake history a table function's arguments are literals or plain names, "
                f"not {what}, so that the name it reads can be checked before it runs"
            )
    return out


_ARGUMENT_KINDS = {
    "FUNCTION": "a function or operator",
    "CAST": "a cast",
    "SUBQUERY": "a subquery",
    "PARAMETER": "a prepared parameter",
    "CASE": "a CASE expression",
}


def dotted_parts(text: str) -> list[str]:
    """The parts of a name given as text, one to three of them, unquoted ('cat.tbl' -> ['cat', 'tbl']);
    [] for text that is not such a name (a file name with a slash, a sentence)."""
    match = _DOTTED_NAME.fullmatch(text)
    if match is None:
        return []
    return [p[1:-1].replace('""', '"') if p.startswith('"') else p for p in match.groups() if p is not None]


def refuse_blocked_operators(con, sql: str) -> None:
    """Check 3: bind and plan the statement (nothing runs); refuse an extension operator outside
    ALLOWED_OPERATORS."""
    blocked = extension_functions() - ALLOWED_OPERATORS
    for _, plan in con.execute(f"EXPLAIN (FORMAT json) {sql}").fetchall():
        for node in _nodes(json.loads(plan)):
            extra = node.get("extra_info") if isinstance(node.get("extra_info"), dict) else {}
            for name in (node.get("name"), extra.get("Function")):
                if isinstance(name, str) and name.lower() in blocked:
                    what = "the lake's catalog database" if name.lower().startswith("postgres") else name.lower()
                    raise QueryError(f"the statement reads {what}: {OWN_TABLES_ONLY}")


def _nodes(tree):
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
