"""Bulk writes into the history: Arrow tables inserted by column name in one statement.

Row-by-row INSERTs cost a round trip each; registering an Arrow table and running
`INSERT INTO t BY NAME SELECT ... FROM view` lets DuckDB load a whole table at once.
Columns a table has but the Arrow table lacks take their defaults (or NULL).
"""

from __future__ import annotations

import itertools

import pyarrow as pa

_view_counter = itertools.count()

# Columns stored as MAP(VARCHAR, DOUBLE): callers give `<name>__keys` and `<name>__values` lists.
MAP_COLUMNS = {"results": ("gap_to_backends",)}


def insert_arrow(con, table: str, data: pa.Table) -> int:
    """Insert every row of `data` into `table`; returns the row count."""
    if data.num_rows == 0:
        return 0
    view = f"_attnwatch_insert_{next(_view_counter)}"
    select = _select_list(table, data.column_names)
    con.register(view, data)
    try:
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT {select} FROM "{view}"')
    finally:
        con.unregister(view)
    return data.num_rows


def _select_list(table: str, columns: list[str]) -> str:
    parts = []
    maps = [m for m in MAP_COLUMNS.get(table, ()) if f"{m}__keys" in columns]
    for name in columns:
        if any(name in (f"{m}__keys", f"{m}__values") for m in maps):
            continue
        parts.append(f'"{name}"')
    for m in maps:
        parts.append(f'map("{m}__keys", "{m}__values") AS "{m}"')
    return ", ".join(parts)


def rows_to_arrow(rows: list[dict], types: dict[str, pa.DataType] | None = None) -> pa.Table:
    """A list of row dicts as an Arrow table; `types` pins columns inference would get wrong."""
    if not rows:
        return pa.table({})
    names = list(dict.fromkeys(name for row in rows for name in row))
    columns = {name: [row.get(name) for row in rows] for name in names}
    arrays = {}
    for name, values in columns.items():
        wanted = (types or {}).get(name)
        arrays[name] = pa.array(values, type=wanted) if wanted is not None else pa.array(values)
    return pa.table(arrays)
