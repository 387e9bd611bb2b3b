"""The environment a check script gives the `attnwatch` commands it starts.

A child must import this checkout's attnwatch first, and still find what the caller's own
PYTHONPATH brought (a GPU machine without network gets DuckDB from a folder of carried wheels
that way): this checkout goes first, the caller's path after it, never instead of it.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def checkout_env(**extra: str) -> dict[str, str]:
    """os.environ with this checkout first on PYTHONPATH (the caller's entries kept), plus `extra`."""
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}
