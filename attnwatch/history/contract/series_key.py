"""How runs group into series: one series per case x GPU model x pool (docs/design.md, "GPU
identity and series").

A pool is a set of GPUs of one model that measure alike, so that their runs may form one
series. A runner declares its pool in ATTNWATCH_POOL (recorded in the bundle as
`environment.pool`); a runner that declares none is a pool of its own host, so two hosts are
never mixed in one series unless someone said they may be, while the GPUs of one host (same
chassis, cooling, power limits, driver) share one. Bundles written before pools existed carry
no pool and get the same default from the host name they recorded, so an existing one-host
history keeps its series unbroken.

A series' points are ordered by commit time (the run's start where the commit's time is unknown),
then run start, then run id: the views of migration 010 (`series_runs`, `result_details`,
`case_series`, `series_alerts`) carry the key (`series_gpu`, `series_pool`) and the time
(`series_at`), and SERIES_ORDER names the order for queries that sort runs themselves, so
detection, every dashboard page and the links into it agree on which point came after which.
"""

from __future__ import annotations

import re

# A declared pool: a short name people choose (letters, digits and . _ : @ + / -), shown in
# the dashboard and used in alert keys. Host names fit it as well.
POOL_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+/-]{0,99}$")
UNKNOWN_POOL = "unknown-host"
# The order of a series' points, as columns of the views above (migration 010 spells the same
# order in `case_series.series_index`): ties in commit time go by start, then by run id.
SERIES_ORDER = ("series_at", "started_at", "run_id")


def series_order(alias: str = "", *, descending: bool = False) -> str:
    """SERIES_ORDER as an ORDER BY list, its columns read from `alias` (a view of migration 010)."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{column}{' DESC' if descending else ''}" for column in SERIES_ORDER)


def series_position(alias: str = "") -> str:
    """A run's place in its series as one comparable row value: `{series_position('b')} <
    {series_position('h')}` says run b comes before run h."""
    return f"({series_order(alias)})"


def series_gpu(gpu_name: str | None, device_kind: str | None) -> str:
    """A run's GPU in its series key: the model, else the device kind ('cpu', 'host'), as the
    views' `series_gpu`."""
    return gpu_name or device_kind or ""


def series_pool(declared: str | None, hostname: str | None, runner: str | None = None) -> str:
    """The pool a run belongs to: the declared one, else its host name, else its runner name."""
    for value in (declared, hostname, runner):
        if value and value.strip():
            return value.strip()
    return UNKNOWN_POOL


def pool_problem(value: str) -> str | None:
    """Why `value` cannot be a declared pool name, or None when it can."""
    if POOL_PATTERN.match(value):
        return None
    return f"{value[:80]!r}: a pool name is 1-100 of A-Z a-z 0-9 . _ : @ + / -, starting with a letter or digit"
