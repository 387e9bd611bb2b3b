"""Is a figure taken under a power or thermal cap? From the NVML clocks-event reasons stored per
result (CaseTiming.throttle_reasons, results.throttle_reasons), by `caps.toml` (data, a reason
per entry). One definition for the dashboard (app) and the PR comment (ci.integration.comment).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Iterable

from attnwatch.history.errors import HistoryError
from attnwatch.toml_reader import read_toml

CAPS_FILE = Path(__file__).resolve().parent / "caps.toml"


class CapsError(HistoryError):
    """caps.toml is malformed or an entry lacks its reason."""


@lru_cache(maxsize=2)
def cap_table(path: Path = CAPS_FILE) -> tuple[tuple[str, frozenset[str]], ...]:
    """(mark, reasons) per entry, in file order."""
    data = read_toml(path, "caps", CapsError) or {}
    out = []
    for i, entry in enumerate(data.get("cap") or []):
        if not isinstance(entry, dict) or not entry.get("mark") or not entry.get("reasons"):
            raise CapsError(f"{path}: cap[{i}]: needs mark and reasons")
        if not str(entry.get("reason") or "").strip():
            raise CapsError(f"{path}: cap[{i}].reason: every entry needs its reason")
        out.append((str(entry["mark"]), frozenset(map(str, entry["reasons"]))))
    return tuple(out)


def cap_mark(reasons: Iterable[str] | None) -> str | None:
    """The mark of the first cap whose reasons were reported ("power cap", "thermal", ...), or
    None when no capping reason was (idle, application clocks and sync boost do not count).
    `reasons` as stored (a list, or a column's array); anything else (None, a missing value)
    reports none."""
    if reasons is None or isinstance(reasons, (str, bytes)):
        return None
    try:
        seen = {str(r) for r in reasons}
    except TypeError:  # a missing value of a DataFrame column (NaN)
        return None
    for mark, names in cap_table():
        if seen & names:
            return mark
    return None
