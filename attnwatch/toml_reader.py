"""Reading one of the repository's TOML data files (thresholds, rules, limits, tables) with a
one-line error that names the file: the only module that calls `tomllib`.

A leaf of the package itself (`attnwatch/toml_reader.py`): it imports nothing of the project, so
every layer may import it, `kernels` included (docs/design.md, "Layers and the direction of
imports"). A compare child loads another revision's `kernels/` beside this revision's `attnwatch`
package, so `read_toml`'s signature stays as it is.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Literal, overload


@overload
def read_toml(file: Path | str, what: str, error: type[Exception], missing_ok: Literal[False] = False) -> dict: ...
@overload
def read_toml(file: Path | str, what: str, error: type[Exception], missing_ok: bool) -> dict | None: ...
def read_toml(file: Path | str, what: str, error: type[Exception], missing_ok: bool = False) -> dict | None:
    """The parsed file; None when it is missing and `missing_ok`; else `error` naming the file:
    missing, unreadable, or not valid TOML (UTF-8, as TOML requires)."""
    file = Path(file)
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if missing_ok:
            return None
        raise error(f"{file}: {what} file not found") from None
    except OSError as exc:
        raise error(f"{file}: cannot read the {what} file: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{file}: not valid TOML: {exc}") from None
