"""attnwatch: CI regression tracking for GPU attention kernels.

Installed, every module lives under this one name: `attnwatch.app`, `attnwatch.ci`,
`attnwatch.history`, `attnwatch.kernels` (the wheel places them inside this package). In a
checkout they are the repository's top-level folders, and this package's search path is extended
to the repository root so that the same `attnwatch.…` imports find them there.

A compare child that measures another revision's `kernels/` (ci/child_env.py) sets
KERNELS_FROM_PATH_ENV: `attnwatch.kernels` is then the top-level `kernels` package that the
child's PYTHONPATH puts first, one module object under both names (attnwatch._kernels_alias).
"""

import os as _os

__version__ = "0.1.0"

_HERE = _os.path.dirname(_os.path.abspath(__file__))
_CHECKOUT = _os.path.dirname(_HERE)
if not _os.path.isdir(_os.path.join(_HERE, "history")) and \
        _os.path.isfile(_os.path.join(_CHECKOUT, "history", "__init__.py")):
    __path__.append(_CHECKOUT)  # noqa: F821 - a package's __path__

from attnwatch._kernels_alias import KERNELS_FROM_PATH_ENV, install_if_asked  # noqa: E402

install_if_asked()
__all__ = ["KERNELS_FROM_PATH_ENV", "__version__"]
