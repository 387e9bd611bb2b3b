"""How the dashboard names a gap: against the operator's baseline that the rows were measured
with (results.baseline_variant, migration 012), never a fixed "SDPA"."""

from __future__ import annotations

from typing import Iterable


def gap_label(baselines: Iterable, prefix: str = "gap to") -> str:
    """ "gap to sdpa" when every row with a gap has one baseline, "gap to baseline" when they
    differ (several operators in one table) or none is known."""
    names = sorted({str(b) for b in baselines if isinstance(b, str) and b})
    return f"{prefix} {names[0]}" if len(names) == 1 else f"{prefix} baseline"


def gap_help(baselines: Iterable, measured: str) -> str:
    names = sorted({str(b) for b in baselines if isinstance(b, str) and b})
    against = names[0] if len(names) == 1 else "the operator's baseline (column baseline)"
    return f"median / median({against}), same run, same device ({measured}); < 1 is faster"
