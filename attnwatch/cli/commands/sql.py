"""`attnwatch sql`: query the history with read-only, locked-down SQL (history.sql.query).

    attnwatch sql "SELECT variant, median(median_us) FROM case_series GROUP BY variant"
    attnwatch sql -f report.sql --format csv --output report.csv
    echo "SELECT count(*) FROM runs" | attnwatch sql -

Prints an aligned table (at most --show rows; the rest is counted, not printed), or writes
csv / json / parquet with --format and --output, and then says on stderr how many rows went to
which file. A result over --max-rows rows or --max-bytes
is cut (and says so on stderr); a query over its time, memory or spill limit is refused with one
line (history.sql.query).

Stored text may hold control characters (a kernel's error text, a value someone planted), and
a terminal obeys them: ESC starts an escape sequence, NUL and CR hide what follows. So whatever
goes to stdout has them escaped as `\\xNN` / `\\uNNNN` (history.terminal_text): the table, and
CSV, whose newlines and tabs inside quoted values stay as CSV has them. Always, not only when
stdout is a terminal: a pipe often ends in one (`| less -R`, `| head`), and a redirect cannot be
told from it. CSV written with --output keeps the values' exact bytes: a file is data for another
program, which asked for what is stored. JSON escapes control characters itself (DEL, which it
need not, is written as \\u007f: the same JSON value).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from attnwatch.ci.errors import UserError
from attnwatch.history.sql.sandbox import SqlLimits, size_bytes
from attnwatch.history.terminal_text import printable

# history.sql.sandbox has no third-party imports; history.sql.query (duckdb, pandas) is imported only
# when the command runs, because GPU runners have no duckdb and the CLI must still load there.
DEFAULT_MAX_ROWS = SqlLimits().max_rows
DEFAULT_MAX_BYTES = SqlLimits().max_bytes
DEFAULT_TIMEOUT_S = SqlLimits().timeout_s


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "sql",
        help="query the history (read-only SQL)",
        description="Run one read-only SQL statement against the history. External access, "
        "configuration changes and writes are refused by DuckDB itself; time, memory and rows are capped.",
    )
    p.add_argument("query", nargs="?", help='SQL text, or "-" to read it from stdin')
    p.add_argument("-f", "--file", type=Path, help="read the SQL from this file")
    p.add_argument("--format", choices=("table", "csv", "json", "parquet"), default="table")
    p.add_argument("--output", "-o", type=Path, help="write the result here (required for parquet)")
    p.add_argument(
        "--max-rows", type=int, default=DEFAULT_MAX_ROWS, help=f"rows fetched at most (default {DEFAULT_MAX_ROWS})"
    )
    p.add_argument(
        "--max-bytes",
        type=_size,
        default=DEFAULT_MAX_BYTES,
        help=f"result size fetched at most, e.g. 16MiB (default {DEFAULT_MAX_BYTES // 2**20} MiB)",
    )
    p.add_argument("--show", type=int, default=50, help="rows printed in table format (default 50)")
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds before the query is stopped (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.set_defaults(func=_run)


def _size(text: str) -> int:
    try:
        value = size_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return value


def _read_sql(args) -> str:
    if args.file is not None and args.query is not None:
        raise UserError("give the SQL as an argument or with -f, not both")
    if args.file is not None:
        try:
            return args.file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UserError(f"{args.file}: cannot read the SQL: {exc}") from None
    if args.query == "-":
        return sys.stdin.read()
    if args.query is None:
        raise UserError('no SQL given (attnwatch sql "SELECT ...", -f FILE, or - for stdin)')
    return args.query


def _run(args) -> int:
    from attnwatch.history.sql.query import run_user_query

    if args.format == "parquet" and args.output is None:
        raise UserError("--format parquet needs --output FILE")
    result = run_user_query(
        args.db, _read_sql(args), max_rows=args.max_rows, timeout_s=args.timeout, max_bytes=args.max_bytes, public=False
    )  # the user named the history: its full path
    frame = result.frame
    try:
        if args.format == "table":
            text = format_table(frame, args.show)
            if args.output:
                args.output.write_text(text + "\n", encoding="utf-8")
            else:
                print(text)
        elif args.format == "parquet":
            from attnwatch.history.sql.query import to_parquet

            args.output.write_bytes(to_parquet(result.table))
        else:
            _write(frame, args.format, args.output)
    except OSError as exc:
        if args.output is None:  # stdout (a closed pipe is the CLI's to handle)
            raise
        raise UserError(f"{args.output}: cannot write the result: {exc.strerror or exc}") from None
    if args.output is not None:  # a file written in silence reads as nothing done; stdout stays empty
        rows = len(frame)
        print(
            f"wrote {rows} row{'s' if rows != 1 else ''} ({args.format}) to {printable(str(args.output))}",
            file=sys.stderr,
        )
    if result.renamed:
        print(
            "note: columns renamed to be unique: "
            + printable(", ".join(f"{new} (a second {old})" for new, old in result.renamed.items())),
            file=sys.stderr,
        )
    cut = frame.attrs.get("cut")
    if cut == "rows":
        print(f"note: result cut at --max-rows {args.max_rows}", file=sys.stderr)
    elif cut == "bytes":
        print(
            f"note: result cut at --max-bytes {args.max_bytes / 2**20:g} MiB ({len(frame)} rows kept)", file=sys.stderr
        )
    return 0


def _write(frame, fmt: str, output: Path | None) -> None:
    """Write csv / json; a value the format cannot hold is one UserError line."""
    try:
        _write_unchecked(frame, fmt, output)
    except (ValueError, TypeError, OverflowError, NotImplementedError) as exc:  # what pyarrow and pandas raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot write the result as {fmt}: {first} (cast that column to VARCHAR)") from None


def _write_unchecked(frame, fmt: str, output: Path | None) -> None:
    if fmt == "csv":
        text = frame.to_csv(index=False)
    else:
        text = frame.to_json(orient="records", date_format="iso", indent=1).replace("\x7f", "\\u007f")
    if output:
        output.write_text(text, encoding="utf-8")
    else:  # the terminal's copy: control characters escaped (module docstring)
        text = printable(text, keep_lines=True)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def format_table(frame, show: int) -> str:
    """An aligned text table: numbers right-aligned, control characters escaped, rows capped."""
    import pandas as pd

    if frame.shape[1] == 0:
        return "(no result)"
    shown = frame.head(max(show, 0))
    headers = [printable(str(c)) for c in frame.columns]
    cells = [[_cell(v) for v in row] for row in shown.itertuples(index=False, name=None)]
    numeric = [
        pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) for c in frame.columns
    ]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    more = len(frame) - len(shown)
    out.append(f"({len(frame)} row{'s' if len(frame) != 1 else ''}" + (f", {more} not shown)" if more > 0 else ")"))
    return "\n".join(out)


def _cell(value) -> str:
    import pandas as pd

    if value is None or (isinstance(value, float) and value != value) or value is pd.NA or value is pd.NaT:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}"
    return printable(str(value))
