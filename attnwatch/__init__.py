"""attnwatch: CI regression tracking for GPU attention kernels.

Every module lives under this one name, in layers: `attnwatch.cli` (the command line, the top
layer, a folder of this package), then `attnwatch.app` (the dashboard) and `attnwatch.ci`
(measuring, and in `attnwatch.ci.integration` talking to GitHub), then `attnwatch.history`, then
`attnwatch.kernels`. In a checkout the last four they are the repository's top-level folders, and this package
holds a relative symbolic link to each (`attnwatch/ci -> ../ci`), so Python, a type checker and an
editor's go-to-definition all resolve `attnwatch.ci.…` to `ci/…` with no path manipulation. The
wheel places the folders themselves inside this package (setup.py). `attnwatch.scripts` (the
checkout's tools, which the tests import) is linked the same way and is not in the wheel. A module
that finds its data files beside itself resolves its `__file__` first, so that recorded paths name
the real folder (`kernels/…`), not the link.

A compare child that measures another revision's `kernels/` (ci/child_env.py) sets
KERNELS_FROM_PATH_ENV: `attnwatch.kernels` is then the top-level `kernels` package that the
child's PYTHONPATH puts first, one module object under both names (attnwatch._kernels_alias).
"""

__version__ = "0.1.0"

from attnwatch._kernels_alias import KERNELS_FROM_PATH_ENV, install_if_asked

install_if_asked()
__all__ = ["KERNELS_FROM_PATH_ENV", "__version__"]
