"""Export the whole history as Parquet and import it back, idempotently.

Export writes one Parquet file per table and `export.json`:
    {"format": "attnwatch.export", "format_version": 1, "schema_version": N,
     "migrations": [{"version", "name", "checksum"}], "exported_at": ISO,
     "tables": {table: {"file": "table.parquet", "rows": n}}}
Import validates everything first (manifest, migration lineage, files, row counts, columns,
run ids that clash with different content), then inserts in one transaction rows whose
natural key (history.store.keys: the migrations' declared keys) is not there yet, so importing the
same export twice adds nothing and an import into an existing history merges. Surrogate ids
(alerts' alert_id, alert_events' event_id) are local to each database: alerts are matched by
dedup_key; into an empty table they keep their ids (a copy is exact), otherwise they get the
next free ids of this database, and rows that point at them are re-pointed.

Both work on a file and on a lake (history.store.location). On a lake the import's transaction claims
the single-column keys of every row it adds (history.store.transactions), so it cannot double a run
that a concurrent ingest is writing: one of the two retries and then finds it there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from attnwatch.history.store.db import open_read, open_write
from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.history.store.keys import primary_key, single_column_keys
from attnwatch.history.store.location import HistoryLocation
from attnwatch.history.store.migrations import applied_migrations, available_migrations
from attnwatch.history.contract.checks import parse_utc, read_json_file
from attnwatch.history.contract.repository import check_sources, stored_repositories
from attnwatch.history.store.transactions import Claims, write_transaction

EXPORT_FORMAT = "attnwatch.export"
EXPORT_FORMAT_VERSION = 1
MANIFEST_NAME = "export.json"
BOOKKEEPING_TABLES = ("schema_migrations",)
# Tables whose primary key is a local sequence: the columns that identify a row instead,
# and columns that hold another such table's local id.
SURROGATE_KEYS = {"alerts": "alert_id", "alert_events": "event_id"}
NATURAL_KEYS = {"alerts": ("dedup_key",)}
ID_REFERENCES = {"alert_events": {"alert_id": "alerts"}}
# Tables without a declared key whose rows belong to one run: imported only for runs this
# history did not hold before the import (a run is immutable once ingested).
RUN_SCOPED_WITHOUT_KEY = ("samples",)
EXPORT_ORDER = {"samples": ("run_id", "case_id", "sample_index")}
# Parents first, so a partial view of the import order still makes sense.
TABLE_ORDER = (
    "commits",
    "runs",
    "results",
    "samples",
    "correctness",
    "builds",
    "ncu_kernels",
    "ncu_metrics",
    "ncu_cases",
    "variant_fingerprints",
    "sass_kernels",
    "sass_mix",
    "run_binaries",
    "alerts",
    "alert_events",
)


@dataclass
class ExchangeReport:
    directory: str
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows exported / inserted
    skipped: dict[str, int] = field(default_factory=dict)  # table -> rows already present (import)

    def lines(self) -> list[str]:
        out = []
        for table, n in self.rows.items():
            extra = f" ({self.skipped[table]} already present)" if table in self.skipped else ""
            out.append(f"{table:18s} {n:>10d}{extra}")
        return out


def export_history(location: HistoryLocation, directory: str | Path) -> ExchangeReport:
    out = Path(directory)
    if out.exists() and any(out.iterdir()):
        raise HistoryError(f"{out}: export directory is not empty; give a new or empty directory")
    report = ExchangeReport(str(out))
    with open_read(location) as con:  # first: a path that is no history writes nothing
        out.mkdir(parents=True, exist_ok=True)
        tables = base_tables(con)
        manifest_tables = {}
        for table in tables:
            target = out / f"{table}.parquet"
            key = EXPORT_ORDER.get(table) or primary_key(table)
            order = ", ".join(f'"{c}"' for c in key) or "ALL"
            con.execute(f"COPY (SELECT * FROM \"{table}\" ORDER BY {order}) TO '{_sql_path(target)}' (FORMAT parquet)")
            rows = pq.ParquetFile(target).metadata.num_rows
            manifest_tables[table] = {"file": target.name, "rows": rows}
            report.rows[table] = rows
        migrations: list[dict[str, Any]] = [
            {"version": v, "name": n, "checksum": c} for v, (n, c) in sorted(applied_migrations(con).items())
        ]
    manifest = {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "schema_version": max((m["version"] for m in migrations), default=0),
        "migrations": migrations,
        "exported_at": datetime.now(timezone.utc).isoformat(),  # with its offset (checks.parse_utc's rule)
        "tables": manifest_tables,
    }
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return report


def import_history(location: HistoryLocation, directory: str | Path, repo: str | None = None) -> ExchangeReport:
    """Merge the export in `directory` into the history; `repo`: the repository setting
    (history.contract.repository), which the export's runs must match as an ingested bundle's must."""
    src = Path(directory)
    manifest = _read_manifest(src)
    report = ExchangeReport(str(src))
    with open_write(location) as con:
        tables = _validate_against(con, src, manifest, repo)

        def body(c, claims: Claims) -> None:
            report.rows.clear()
            report.skipped.clear()
            c.execute("CREATE OR REPLACE TEMP TABLE _import_known_runs AS SELECT run_id FROM runs")
            id_maps: dict[str, str] = {"runs_before": "_import_known_runs"}
            try:
                for table in tables:
                    path = _sql_path(src / manifest["tables"][table]["file"])
                    added = _import_table(c, claims, table, path, id_maps)
                    report.rows[table] = added
                    report.skipped[table] = manifest["tables"][table]["rows"] - added
            finally:
                for temp in id_maps.values():
                    c.execute(f"DROP TABLE IF EXISTS {temp}")

        write_transaction(con, body, location.label)
    return report


def _read_manifest(src: Path) -> dict:
    path = src / MANIFEST_NAME
    if not path.is_file():
        raise BundleError(path, "file", "missing: not an attnwatch export directory")
    manifest, _ = read_json_file(path)  # the strict reader (history.contract.json_limits)
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        raise BundleError(path, "format", f"expected {EXPORT_FORMAT!r}")
    if manifest.get("format_version") != EXPORT_FORMAT_VERSION:
        raise BundleError(
            path, "format_version", f"{manifest.get('format_version')!r}: this attnwatch reads {EXPORT_FORMAT_VERSION}"
        )
    if not isinstance(manifest.get("tables"), dict) or not isinstance(manifest.get("migrations"), list):
        raise BundleError(path, "tables", "missing tables or migrations")
    exported_at = manifest.get("exported_at")
    if not isinstance(exported_at, str):
        raise BundleError(path, "exported_at", f"{exported_at!r}: expected an ISO 8601 date-time with its UTC offset")
    parse_utc(exported_at, path, "exported_at")  # the timestamp rule of every file attnwatch reads
    return manifest


def _validate_against(con, src: Path, manifest: dict, repo: str | None = None) -> list[str]:
    """Every check before the first write; returns the tables to import, parents first."""
    path = src / MANIFEST_NAME
    shipped = {m.version: m for m in available_migrations()}
    for i, m in enumerate(manifest["migrations"]):
        version = m.get("version") if isinstance(m, dict) else None
        ours = shipped.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
        if ours is None:
            raise BundleError(
                path, f"migrations[{i}]", f"{m!r} is unknown to this attnwatch (exported by a newer one?)"
            )
        if ours.checksum != m.get("checksum"):
            raise BundleError(
                path,
                f"migrations[{i}].checksum",
                f"migration {ours.version:03d}_{ours.name} differs from this attnwatch's",
            )
    existing = set(base_tables(con))
    to_import = []
    for table, entry in manifest["tables"].items():
        if table in BOOKKEEPING_TABLES:
            continue
        where = f"tables.{table}"
        if not isinstance(entry, dict):
            raise BundleError(path, where, f"expected an object with the table's file and rows, got {entry!r:.80}")
        if table not in existing:
            raise BundleError(path, where, "no such table in this history's schema")
        file = src / str(entry.get("file", ""))
        if file.parent != src or not file.is_file() or file.is_symlink():
            raise BundleError(file, where, "the table's Parquet file is missing")
        try:
            meta = pq.ParquetFile(file)
        except Exception as exc:  # pyarrow raises several types for a damaged file
            raise BundleError(file, "parquet", f"not a readable Parquet file: {exc}") from None
        if meta.metadata.num_rows != entry.get("rows"):
            raise BundleError(
                file, f"{where}.rows", f"manifest says {entry.get('rows')} rows, file has {meta.metadata.num_rows}"
            )
        columns = set(meta.schema_arrow.names)
        unknown = columns - set(table_columns(con, table))
        if unknown:
            raise BundleError(file, f"{where}.{sorted(unknown)[0]}", "column not in this history's table")
        to_import.append(table)
    for table, references in ID_REFERENCES.items():
        for column, parent in references.items():
            if table in to_import and parent not in to_import:
                raise BundleError(path, f"tables.{parent}", f"missing, but {table}.{column} refers to it")
    if "runs" in to_import:
        runs_file = src / manifest["tables"]["runs"]["file"]
        repos = con.execute(
            f"SELECT DISTINCT repo FROM read_parquet('{_sql_path(runs_file)}') ORDER BY repo"
        ).fetchall()
        check_sources([(r, str(runs_file), "runs.repo") for (r,) in repos], repo, stored_repositories(con))
        clash = con.execute(
            f"SELECT i.run_id FROM read_parquet('{_sql_path(src / manifest['tables']['runs']['file'])}') i "
            "JOIN runs r USING (run_id) WHERE r.content_sha256 <> i.content_sha256 LIMIT 1"
        ).fetchone()
        if clash:
            raise BundleError(
                src / manifest["tables"]["runs"]["file"],
                "run_id",
                f"{clash[0]!r} is already in the history with different content; nothing was imported",
            )
    ranked = {t: i for i, t in enumerate(TABLE_ORDER)}
    return sorted(to_import, key=lambda t: (ranked.get(t, len(ranked)), t))


def _import_table(con, claims: Claims, table: str, parquet: str, id_maps: dict[str, str]) -> int:
    """Stage the rows this history lacks in a temp table, claim their keys, insert; return the count."""
    source = f"read_parquet('{parquet}')"
    staged = f"_import_new_{table}"
    id_maps[f"staged {table}"] = staged
    if table in RUN_SCOPED_WITHOUT_KEY:
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {staged} AS SELECT * FROM {source} "
            f"WHERE run_id NOT IN (SELECT run_id FROM {id_maps['runs_before']})"
        )
    elif table in SURROGATE_KEYS:
        _stage_with_ids(con, table, source, staged, id_maps)
    else:
        key = primary_key(table)
        match = " AND ".join(f't."{c}" IS NOT DISTINCT FROM s."{c}"' for c in key) or "false"
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {staged} AS SELECT * FROM {source} s "
            f'WHERE NOT EXISTS (SELECT 1 FROM "{table}" t WHERE {match})'
        )
    for column in single_column_keys(table):
        for (value,) in con.execute(f'SELECT DISTINCT "{column}" FROM {staged}').fetchall():
            claims.take(column, str(value))
    added = con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM {staged}').fetchone()[0]
    if table in NATURAL_KEYS:
        surrogate = SURROGATE_KEYS[table]
        id_map = f"_import_ids_{table}"
        on = " AND ".join(f's."{c}" = t."{c}"' for c in NATURAL_KEYS[table])
        con.execute(
            f'CREATE OR REPLACE TEMP TABLE {id_map} AS SELECT s."{surrogate}" AS old_id, t."{surrogate}" AS new_id '
            f'FROM {source} s JOIN "{table}" t ON {on}'
        )
        id_maps[table] = id_map
    return int(added)


def _stage_with_ids(con, table: str, source: str, staged: str, id_maps: dict[str, str]) -> None:
    """Rows new to `table`, with references re-pointed and this database's ids: the exported ids
    when the table is empty (a copy stays exact), else the next free ones in exported order."""
    surrogate = SURROGATE_KEYS[table]
    incoming = [d[0] for d in con.execute(f"SELECT * FROM {source} LIMIT 0").description]
    references = ID_REFERENCES.get(table, {})
    select = []
    for column in incoming:
        if column == surrogate:
            continue
        parent = references.get(column)
        select.append(f'{id_maps[parent]}.new_id AS "{column}"' if parent else f's."{column}"')
    joins = "".join(
        f' JOIN {id_maps[parent]} ON {id_maps[parent]}.old_id = s."{column}"' for column, parent in references.items()
    )
    key = NATURAL_KEYS.get(table) or tuple(c for c in incoming if c != surrogate)
    incoming_key = [f"{id_maps[references[c]]}.new_id" if c in references else f's."{c}"' for c in key]
    match = " AND ".join(f't."{c}" IS NOT DISTINCT FROM {e}' for c, e in zip(key, incoming_key))
    empty, top = con.execute(f'SELECT count(*) = 0, coalesce(max("{surrogate}"), 0) FROM "{table}"').fetchone()
    new_id = f's."{surrogate}"' if empty else f'{int(top)} + row_number() OVER (ORDER BY s."{surrogate}")'
    con.execute(
        f'CREATE OR REPLACE TEMP TABLE {staged} AS SELECT {", ".join(select)}, {new_id} AS "{surrogate}" '
        f'FROM {source} s{joins} WHERE NOT EXISTS (SELECT 1 FROM "{table}" t WHERE {match})'
    )


def base_tables(con) -> list[str]:
    """The history's tables (not views), in its own catalog (a lake's connection has others)."""
    return [
        r[0]
        for r in con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND table_type = 'BASE TABLE' ORDER BY table_name"
        ).fetchall()
    ]


def table_columns(con, table: str) -> list[str]:
    return [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = 'main' "
            "AND table_catalog = current_database() AND table_name = ? ORDER BY ordinal_position",
            [table],
        ).fetchall()
    ]


def _sql_path(path: Path) -> str:
    return str(path.resolve()).replace("'", "''")
