"""`attnwatch.kernels` as the top-level `kernels` of another revision, in a compare child.

Compare measures a base revision with this revision's `ci` and the base's `kernels/` (the folder
itself in a revision before `attnwatch/kernels` held it, the top-level link to it after). The
child's PYTHONPATH puts a folder holding a `kernels` link to it first (ci/child_env.py) and sets
KERNELS_FROM_PATH_ENV. Every `attnwatch.kernels…` import is then answered with the module of the
same name under `kernels…`: one object under both names, so a base whose `kernels/` imports itself
absolutely (`from kernels.cases import …`, every revision before the package was relative) and one
that imports relatively work alike.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

KERNELS_FROM_PATH_ENV = "ATTNWATCH_KERNELS_FROM_PATH"
_PREFIX = "attnwatch.kernels"


class _KernelsAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != _PREFIX and not fullname.startswith(_PREFIX + "."):
            return None
        name = fullname[len("attnwatch.") :]
        if name not in sys.modules and importlib.util.find_spec(name) is None:
            # Not in that revision: the import fails here, under the name it was asked by. Returning
            # None would let a later finder (an editable install's) answer with this checkout's module.
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        real = importlib.import_module(name)
        return importlib.util.spec_from_loader(fullname, self, is_package=hasattr(real, "__path__"))

    def create_module(self, spec):
        return sys.modules[spec.name[len("attnwatch.") :]]

    def exec_module(self, module):
        return None  # already executed under its top-level name


def install_if_asked() -> None:
    if os.environ.get(KERNELS_FROM_PATH_ENV) == "1" and not any(isinstance(f, _KernelsAlias) for f in sys.meta_path):
        sys.meta_path.insert(0, _KernelsAlias())
