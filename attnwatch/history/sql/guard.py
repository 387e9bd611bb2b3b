"""What DuckDB's own lock-down leaves open to user SQL, closed before and after it runs.

Read-only, no external access and a locked configuration (history.sql.sandbox) stop writes and
file access, but not reading: the settings functions and a few catalog functions show paths of
the server (the spill and home directories, the history's location, the extension directory),
and DuckDB's error messages name such paths too. So:
  - `refuse_denied_names(sql)` refuses a statement that names anything in history/sql/denied.toml (one
    reason per entry). Names are read from DuckDB's own tokenizer (`duckdb.tokenize`, the
    scanner its parser uses), so quoting, case, comments and schema prefixes change nothing;
    a function cannot be called without naming it, and the functions that run SQL given as
    text (`query`, ...) are on the list themselves. It works on any statement type, so it
    serves every backend.
  - `refusal(exc, limits)` turns any DuckDB or Arrow error into the one line the CLI and the
    dashboard show: the first line of the message, absolute paths replaced by `<path>`, and
    the limit named when a memory or spill limit stopped the query.
  - `public_text(text, location)` is what every error of the SQL path goes through before a
    user sees it (history.sql.query, app/data/sql_console.py): one line, the history named by its
    file name alone, no other absolute path, no process id (DuckDB's lock error names the
    holder's Python binary and PID).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import duckdb

from attnwatch.history.errors import QueryError
from attnwatch.history.sql.sandbox import SqlLimits
from attnwatch.toml_reader import read_toml

DENIED_FILE = Path(__file__).resolve().parent / "denied.toml"

_IDENTIFIER = re.compile(r'"((?:[^"]|"")*)"|([A-Za-z_\u0080-\U0010ffff][\w$\u0080-\U0010ffff]*)')
_WORD = re.compile(r"[A-Za-z_][\w$]*")
# An absolute path: a slash at the start or after a quote, space, bracket or '=', then path characters.
_ABSOLUTE_PATH = re.compile(r"(?:(?<=^)|(?<=[\s\"'(\[=:]))(?:~|[A-Za-z]:)?/[^\s\"'\])]*")
_PID = re.compile(r"\s*\(PID \d+\)|\s*\bPID:? \d+", re.IGNORECASE)


@dataclass(frozen=True)
class DeniedName:
    """A name in one of the SQL path's lists (history/sql/*.toml), with the reason it is there."""

    name: str
    reason: str


@lru_cache(maxsize=4)
def named_reasons(path: Path, table: str) -> dict[str, DeniedName]:
    """The `[[table]]` entries of a TOML list as {lower-case name: entry}; each needs a name and a reason."""
    entries = read_toml(path, "SQL name list", ValueError)[table]
    out = {}
    for i, entry in enumerate(entries):
        name, reason = entry.get("name"), entry.get("reason")
        if not (isinstance(name, str) and name and isinstance(reason, str) and reason):
            raise ValueError(f"{path}: {table}[{i}]: needs a name and a reason")
        out[name.lower()] = DeniedName(name.lower(), reason)
    return out


def denied_names(path: Path = DENIED_FILE) -> dict[str, DeniedName]:
    """history/sql/denied.toml as {lower-case name: entry}."""
    return named_reasons(path, "denied")


def named_identifiers(sql: str) -> list[str]:
    """Every identifier and keyword in `sql`, lower-case and unquoted, as DuckDB's scanner sees them.

    A token whose text does not start with a clean identifier (the scanner gives up on some
    invalid input and returns the rest as one token) contributes every word in it, so nothing
    the parser might still read as a name is skipped.
    """
    tokens = duckdb.tokenize(sql)
    names = []
    for i, (start, kind) in enumerate(tokens):
        if kind not in (duckdb.token_type.identifier, duckdb.token_type.keyword):
            continue
        end = tokens[i + 1][0] if i + 1 < len(tokens) else len(sql)
        match = _IDENTIFIER.match(sql, start, end)
        if match is None:
            names += [w.lower() for w in _WORD.findall(sql[start:end])]
        elif match.group(1) is not None:
            names.append(match.group(1).replace('""', '"').lower())
        else:
            names.append(match.group(2).lower())
            if match.end() < end and not sql[match.end() : end].strip().startswith(("--", "/*")):
                names += [w.lower() for w in _WORD.findall(sql[match.end() : end])]
    return names


def refuse_denied_names(sql: str) -> None:
    """Raise QueryError naming the first denied name `sql` mentions, with the reason."""
    denied = denied_names()
    for name in named_identifiers(sql):
        entry = denied.get(name)
        if entry is not None:
            raise QueryError(f"{entry.name} is not available to user SQL ({entry.reason})")


def scrub_paths(text: str) -> str:
    """`text` with every absolute path replaced by `<path>`."""
    return _ABSOLUTE_PATH.sub("<path>", text)


def public_text(text: str, location) -> str:
    """`text` as a user of the SQL page or `attnwatch sql` may see it: its first line, the history
    file named by its file name alone, no other absolute path (the Python binary's, a spill
    file's), no process id (DuckDB's lock error names the holder's binary and PID)."""
    first = (str(text).strip().splitlines() or [""])[0]
    where = str(location)
    if where and not where.startswith("ducklake:"):
        path = Path(where).expanduser()
        # os.path.realpath, not Path.resolve: a symbolic link loop raises RuntimeError there (Python 3.11, 3.12)
        for spelling in sorted({where, str(path), os.path.realpath(path)}, key=len, reverse=True):
            first = first.replace(spelling, path.name)
    return _PID.sub("", scrub_paths(first))


def refusal(exc: BaseException, limits: SqlLimits, location=None) -> str:
    """The one line shown for a DuckDB, Arrow or memory error: no traceback, no server path (the
    history at `location` named by its file name)."""
    text = str(exc).strip()
    first = public_text(text or type(exc).__name__, location or "")
    if "max_temp_directory_size" in text:
        return (
            f"the query needs more than the {limits.temp_limit} of temporary disk space user SQL may use "
            f"({first}); filter or aggregate before sorting or joining"
        )
    if isinstance(exc, MemoryError) or "bad allocation" in text:  # the process's address-space limit
        return (
            f"the query needs more than the {limits.process_memory} of memory its process may use "
            f"({first}); select fewer rows or narrower values"
        )
    if "Out of Memory" in text:  # DuckDB's own memory_limit
        return (
            f"the query needs more than the {limits.memory_limit} of memory user SQL may use "
            f"({first}); filter or aggregate more, or select fewer columns"
        )
    return first
