"""The shipped migrations as a DuckLake accepts them: the same tables without constraint clauses.

DuckLake refuses PRIMARY KEY, UNIQUE and CHECK constraints, indexes and sequences
("not supported in DuckLake", checked with DuckDB 1.5.5). A migration file is written once for
the history file, where those clauses make ingest idempotent and keep alerts unique; on a lake
the same file is applied after `lake_sql` has removed, in CREATE TABLE statements,
  - PRIMARY KEY / UNIQUE / CHECK on a column, and table-level PRIMARY KEY (...), UNIQUE (...),
    CHECK (...) and CONSTRAINT ... elements (a primary key's columns keep the NOT NULL it implied),
  - DEFAULT nextval('...'), and whole CREATE SEQUENCE statements.
Columns, types, NOT NULL, literal defaults, views and ALTER TABLE pass through unchanged, so a
lake has the same columns as a file (tests/test_history_lake.py compares them). What the removed
clauses guaranteed is kept by code on the lake: natural-key claims (history.store.transactions), ids
assigned by the writer, values checked before they are written. schema_migrations records the
checksum of the shipped file, not of this text, so a lake and a file agree on what was applied.
CREATE INDEX and FOREIGN KEY have no translation: a migration using them fails on a lake with
DuckLake's own message, and the test applying every migration to a lake says so.
"""

from __future__ import annotations

import re

_NEXTVAL_DEFAULT = re.compile(r"\bDEFAULT\s+nextval\s*\(\s*'[^']*'\s*\)", re.IGNORECASE)
_COLUMN_KEY = re.compile(r"\bPRIMARY\s+KEY\b|\bUNIQUE\b", re.IGNORECASE)
_TABLE_CONSTRAINT = re.compile(r"^\s*(PRIMARY\s+KEY|UNIQUE|CHECK|CONSTRAINT)\b", re.IGNORECASE)
_CREATE_TABLE = re.compile(r"^\s*CREATE\s+(OR\s+REPLACE\s+)?TABLE\b", re.IGNORECASE)
_CREATE_SEQUENCE = re.compile(r"^\s*CREATE\s+SEQUENCE\b", re.IGNORECASE)


def lake_sql(sql: str) -> str:
    """`sql` (one migration file) with the clauses a DuckLake rejects removed (module docstring)."""
    statements = []
    for statement in _split(_strip_comments(sql), ";"):
        if not statement.strip() or _CREATE_SEQUENCE.match(statement):
            continue
        statements.append(_create_table(statement) if _CREATE_TABLE.match(statement) else statement.strip())
    return ";\n".join(statements) + (";" if statements else "")


def _create_table(statement: str) -> str:
    open_at = statement.index("(")
    close_at = _matching(statement, open_at)
    parts = [p for p in _split(statement[open_at + 1 : close_at], ",") if p.strip()]
    key_columns = set()  # a PRIMARY KEY's columns are NOT NULL: that much of it survives
    for part in parts:
        table_key = re.match(r"\s*PRIMARY\s+KEY\s*\((.*)\)\s*$", part, re.IGNORECASE | re.DOTALL)
        if table_key:
            key_columns |= {c.strip().strip('"').lower() for c in table_key.group(1).split(",")}
    elements = []
    for element in parts:
        if _TABLE_CONSTRAINT.match(element):
            continue
        element = _remove_checks(element)
        element = _NEXTVAL_DEFAULT.sub("", element)
        name = element.split()[0].strip('"').lower()
        if (re.search(r"\bPRIMARY\s+KEY\b", element, re.IGNORECASE) or name in key_columns) and not re.search(
            r"\bNOT\s+NULL\b", element, re.IGNORECASE
        ):
            element += " NOT NULL"
        element = _COLUMN_KEY.sub("", element)
        elements.append(" ".join(element.split()))
    body = ",\n    ".join(elements)
    return f"{statement[:open_at].strip()} (\n    {body}\n){statement[close_at + 1 :].rstrip()}"


def _remove_checks(element: str) -> str:
    while True:
        match = re.search(r"\bCHECK\s*\(", element, re.IGNORECASE)
        if not match:
            return element
        end = _matching(element, match.end() - 1)
        element = element[: match.start()] + element[end + 1 :]


def _unquoted(text: str, start: int = 0):
    """(index, character, parenthesis depth after it) of each character outside quotes, from
    `start`: the one scanner behind _matching and _split."""
    depth, quote = 0, None
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            quote = None if ch == quote else quote
            continue
        if ch in "'\"":
            quote = ch
            continue
        depth += (ch == "(") - (ch == ")")
        yield i, ch, depth


def _matching(text: str, open_at: int) -> int:
    """Index of the parenthesis closing the one at `open_at` (quotes respected)."""
    for i, ch, depth in _unquoted(text, open_at):
        if ch == ")" and depth == 0:
            return i
    raise ValueError(f"unbalanced parentheses in: {text[open_at : open_at + 80]!r}")


def _split(text: str, separator: str) -> list[str]:
    """Split at `separator` outside quotes and parentheses."""
    parts, start = [], 0
    for i, ch, depth in _unquoted(text):
        if ch == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _strip_comments(sql: str) -> str:
    """Drop `-- ...` line comments outside quotes."""
    out, quote, i = [], None, 0
    while i < len(sql):
        ch = sql[i]
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            continue
        out.append(ch)
        i += 1
    return "".join(out)
