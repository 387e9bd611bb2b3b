"""Where the history lives: $ATTNWATCH_DB, else $XDG_DATA_HOME/attnwatch/history.duckdb.

The default is outside the repository and the installed package, so neither a `git clean`
nor a reinstall loses the history.
"""

from __future__ import annotations

import os
from pathlib import Path


def default_db_path() -> Path:
    explicit = os.environ.get("ATTNWATCH_DB")
    if explicit:
        return Path(explicit).expanduser()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "attnwatch" / "history.duckdb"
