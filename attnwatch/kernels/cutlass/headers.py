"""Where the CUTLASS / CuTe headers are, and which CUTLASS version they are.

The CUTLASS 3-kernel variants compile against the header-only CUTLASS C++ library. It is
looked up, in this order:

1. ``$CUTLASS_INCLUDE_DIR`` (a folder holding ``cutlass/`` and ``cute/``), when set;
2. the ``nvidia-cutlass`` wheel installed in this Python (``pip install nvidia-cutlass``;
   the project's ``dev`` extra has it), whose headers live in ``cutlass_library/source/include``;
3. ``.cutlass/include`` at the repository root (ignored by git), filled by
   ``scripts/fetch_cutlass_headers.py`` on a host without the wheel, or copied to a GPU
   runner that has no network.

The wheel is located with ``importlib.util.find_spec`` without importing it (its Python
package pulls in cuda-python, which a dashboard host does not need). A folder counts only
when it holds ``cutlass/version.h`` and ``cute/tensor.hpp``; an explicit
``$CUTLASS_INCLUDE_DIR`` that lacks them is an error rather than a silent fallback.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]  # the checkout root, above attnwatch/kernels/cutlass/
REPO_HEADERS = REPO_ROOT / ".cutlass" / "include"
ENV_VAR = "CUTLASS_INCLUDE_DIR"
WHEEL_PACKAGE = "cutlass_library"
MARKERS = ("cutlass/version.h", "cute/tensor.hpp")


class CutlassHeadersError(RuntimeError):
    """The headers named by the environment are not usable; the message says which file is missing."""


def _usable(folder: Path) -> bool:
    return all((folder / marker).is_file() for marker in MARKERS)


def _wheel_include_dir() -> Path | None:
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "source" / "include"
        if _usable(candidate):
            return candidate
    return None


def cutlass_include_dir() -> Path | None:
    """The include folder to compile against, or None when no CUTLASS headers are found."""
    explicit = os.environ.get(ENV_VAR)
    if explicit:
        folder = Path(explicit)
        missing = [m for m in MARKERS if not (folder / m).is_file()]
        if missing:
            raise CutlassHeadersError(
                f"${ENV_VAR}={explicit}: not a CUTLASS include folder ({', '.join(missing)} missing)"
            )
        return folder
    wheel = _wheel_include_dir()
    if wheel is not None:
        return wheel
    return REPO_HEADERS if _usable(REPO_HEADERS) else None


_VERSION_RE = re.compile(r"#define\s+CUTLASS_(MAJOR|MINOR|PATCH)\s+(\d+)")


def cutlass_version(include_dir: Path) -> str:
    """ "major.minor.patch" read from ``cutlass/version.h``; ValueError naming the file if absent."""
    path = Path(include_dir) / "cutlass" / "version.h"
    parts = dict(_VERSION_RE.findall(path.read_text(errors="replace")))
    if not {"MAJOR", "MINOR", "PATCH"} <= parts.keys():
        raise ValueError(f"{path}: CUTLASS_MAJOR/MINOR/PATCH not found")
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
