"""Reading one of the repository's TOML data files (thresholds, case rules, baselines) with a
one-line error that names the file."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal, overload


@overload
def read_toml(file: Path, what: str, error: type[Exception], missing_ok: Literal[False] = False) -> dict: ...
@overload
def read_toml(file: Path, what: str, error: type[Exception], missing_ok: bool) -> dict | None: ...
def read_toml(file: Path, what: str, error: type[Exception], missing_ok: bool = False) -> dict | None:
    """The parsed file; None when it is missing and `missing_ok`; else `error` naming the file."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise error(f"{file}: {what} file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{file}: not valid TOML: {exc}") from None
