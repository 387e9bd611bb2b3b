"""The one wording of a kernel-configuration change, for alerts, the PR comment and the dashboard.

A kernel whose autotuner picks a different launch configuration (kernel_config, e.g. triton_fa2's
"m64_n128_w4_s3") can step with no code change behind it. Where a step coincides with such a
change, the finding says so in these words, beside (not instead of) the commit it names.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable


def changed(before: str | None, after: str | None) -> bool:
    """Both configurations known, and different (unknown on either side says nothing)."""
    return before is not None and after is not None and before != after


def change_text(before: str, after: str) -> str:
    return f"autotuner chose {after} instead of {before}"


def usual(configs: Iterable[str | None]) -> str | None:
    """The configuration most runs of a segment used (ties: the latest); None if none recorded."""
    known = [c for c in configs if c is not None]
    if not known:
        return None
    counts = Counter(known)
    top = max(counts.values())
    return next(c for c in reversed(known) if counts[c] == top)


def segment_change(before: Iterable[str | None], after: Iterable[str | None]) -> tuple[str, str] | None:
    """(usual before, usual after) when a step's two segments ran different configurations."""
    b, a = usual(before), usual(after)
    return (b, a) if b is not None and a is not None and changed(b, a) else None
