"""Waiting out a lake's catalog that is briefly unreachable (a PostgreSQL restart).

`retrying(location, work)` runs `work()` (which opens its own connection) and, on a lake,
retries it while it raises a transient LakeUnavailableError (history.store.lake_faults): capped
exponential backoff with full jitter ("Exponential Backoff And Jitter", AWS Architecture Blog,
2015) until a deadline, the process's cached lake instances dropped before each try. Work whose
commit may have happened before the connection broke is safe to retry only because every write
re-reads its natural key inside its transaction (history.store.transactions): a retried ingest finds
its run stored and skips it.
"""

from __future__ import annotations

import os
import random
import time
from typing import Callable, TypeVar

from attnwatch.history.store import lake
from attnwatch.history.errors import HistoryError
from attnwatch.history.store.lake_faults import LakeUnavailableError
from attnwatch.history.store.location import HistoryLocation

RETRY_ENV = "ATTNWATCH_LAKE_RETRY_S"  # how long to wait out an unreachable catalog
RETRY_DEADLINE_S = 120.0
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 5.0
T = TypeVar("T")


def deadline_s() -> float:
    """How long `retrying` waits out an unreachable catalog: $ATTNWATCH_LAKE_RETRY_S or 120 s."""
    raw = os.environ.get(RETRY_ENV, "").strip()
    try:
        value = float(raw) if raw else RETRY_DEADLINE_S
    except ValueError:
        raise HistoryError(f"{RETRY_ENV}={raw!r}: expected a number of seconds") from None
    return max(0.0, value)


def retrying(
    loc: HistoryLocation,
    work: Callable[[], T],
    deadline: float | None = None,
    on_retry: Callable[[LakeUnavailableError], None] | None = None,
) -> T:
    """`work()`, retried on a lake while the catalog is unreachable (module docstring); a file's
    work runs once. After the deadline: LakeUnavailableError, one line, nothing more written."""
    if not loc.is_lake:
        return work()
    limit = deadline_s() if deadline is None else deadline
    give_up_at = time.monotonic() + limit
    attempt = 0
    while True:
        try:
            return work()
        except LakeUnavailableError as exc:
            if not exc.transient:
                raise
            lake.forget_location(loc)
            remaining = give_up_at - time.monotonic()
            if remaining <= 0:
                raise LakeUnavailableError(
                    f"{loc.label}: the lake's PostgreSQL catalog stayed unreachable for more than {limit:g} s "
                    f"({exc.why}); retry when it is back",
                    why=exc.why,
                ) from None
            if on_retry is not None:
                on_retry(exc)
            time.sleep(min(remaining, random.uniform(0, min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2**attempt))))
            attempt += 1
