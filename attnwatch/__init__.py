"""attnwatch: CI regression tracking for GPU attention kernels.

Every module lives under this one name, in layers: `attnwatch.cli` (the command line, the top
layer), then `attnwatch.app` (the dashboard) and `attnwatch.ci` (measuring, and in
`attnwatch.ci.integration` talking to GitHub), then `attnwatch.history`, then `attnwatch.kernels`. All five are folders of this package; the repository's top level holds a
relative symbolic link to each of the last four (`kernels -> attnwatch/kernels`), the names the
docs and every record use (attnwatch.layout), so Python, a type checker, an editor and a tool that
does not follow links all find `attnwatch.ci.…` in `attnwatch/ci/…` with no path manipulation, and
the wheel is this folder as it is. `attnwatch.scripts` (the checkout's tools, which the tests
import) is a link to the top-level `scripts/` and is not in the wheel.

A compare child that measures another revision's `kernels/` (ci/child_env.py) sets
KERNELS_FROM_PATH_ENV: `attnwatch.kernels` is then the top-level `kernels` package that the
child's PYTHONPATH puts first, one module object under both names (attnwatch._kernels_alias).
"""

__version__ = "0.1.0"

from attnwatch._kernels_alias import KERNELS_FROM_PATH_ENV, install_if_asked

install_if_asked()
__all__ = ["KERNELS_FROM_PATH_ENV", "__version__"]
