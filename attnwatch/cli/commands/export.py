"""`attnwatch export DIR` and `attnwatch import DIR`: the whole history as Parquet and back.

Both commands live here because `import` cannot be a module name. Export writes one Parquet
file per table and export.json (schema version, migrations, row counts); import validates an
export first and then merges it idempotently (history.store.exchange).
"""

from __future__ import annotations

from pathlib import Path


def register(subparsers) -> None:
    e = subparsers.add_parser(
        "export",
        help="write the whole history as Parquet (one file per table + export.json)",
        description="Export every table of the history to DIR (new or empty) as Parquet, with a manifest.",
    )
    e.add_argument("directory", type=Path, metavar="DIR")
    e.set_defaults(func=_export)
    i = subparsers.add_parser(
        "import",
        help="merge an export into the history (idempotent)",
        description="Validate the export in DIR, then add every row whose natural key the history lacks, "
        "in one transaction. Importing the same export twice adds nothing.",
    )
    i.add_argument("directory", type=Path, metavar="DIR")
    i.set_defaults(func=_import)


def _export(args) -> int:
    # Imported here: duckdb is not installed on GPU runners, where the CLI must still load.
    from attnwatch.history.store.exchange import export_history

    report = export_history(args.db, args.directory)
    for line in report.lines():
        print(line)
    print(f"exported {sum(report.rows.values())} rows to {args.directory}")
    return 0


def _import(args) -> int:
    from attnwatch.history.store.exchange import import_history
    from attnwatch.history.contract.repository import repo_setting

    report = import_history(args.db, args.directory, repo_setting(args.repo))
    for line in report.lines():
        print(line)
    print(f"imported {sum(report.rows.values())} new rows into {args.db}")
    return 0
