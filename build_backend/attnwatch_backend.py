"""setuptools' PEP 517 backend, with its build tree kept out of the source checkout.

pip builds a local project in place, and setuptools' `build` command then leaves `build/lib` and
`build/bdist.*` in the checkout (pypa/setuptools#3236), its `egg_info` an `attnwatch.egg-info`:
stale copies of every module that grep, linters and test collection find. Each hook here is
setuptools' own, run with `build_base` and `egg_base` pointed at a temporary directory (through
distutils' DIST_EXTRA_CONFIG file) that is removed afterwards.

An editable install (`make install`'s `pip install -e .`) ends with setuptools' "Editable
installation ... be careful with folders in your working directory with the same name as your
package" warning, which pip prints on every `make demo`. It warns of a folder that shadows the
installed package; here the checkout's `attnwatch/` folder is that package's own source
(package_dir maps it to itself, and its __init__ finds the other top-level folders), so the
folder and the install import the same files. That one warning is silenced; every other passes.
Nothing else about the build changes.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from contextlib import contextmanager

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - every other hook is setuptools' own


@contextmanager
def _build_base_outside_the_checkout():
    with tempfile.TemporaryDirectory(prefix="attnwatch-build-") as tmp:
        config = os.path.join(tmp, "build.cfg")
        os.mkdir(os.path.join(tmp, "egg-base"))
        with open(config, "w", encoding="utf-8") as out:
            out.write(
                f"[build]\nbuild_base = {os.path.join(tmp, 'build')}\n"
                f"[egg_info]\negg_base = {os.path.join(tmp, 'egg-base')}\n"
            )
        previous = os.environ.get("DIST_EXTRA_CONFIG")
        os.environ["DIST_EXTRA_CONFIG"] = config
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("DIST_EXTRA_CONFIG", None)
            else:
                os.environ["DIST_EXTRA_CONFIG"] = previous


def _outside(hook):
    def run(*args, **kwargs):
        with _build_base_outside_the_checkout():
            return hook(*args, **kwargs)

    run.__name__ = run.__qualname__ = hook.__name__
    run.__doc__ = hook.__doc__
    return run


# The hooks pip calls for `pip install .` and `pip install -e .`; each runs egg_info or build.
# (build_sdist stays as it is: an sdist carries its egg-info, so that one is made where it ships.)
get_requires_for_build_wheel = _outside(_setuptools.get_requires_for_build_wheel)
get_requires_for_build_editable = _outside(_setuptools.get_requires_for_build_editable)
prepare_metadata_for_build_wheel = _outside(_setuptools.prepare_metadata_for_build_wheel)
prepare_metadata_for_build_editable = _outside(_setuptools.prepare_metadata_for_build_editable)
build_wheel = _outside(_setuptools.build_wheel)


def _without_the_same_name_warning(hook):
    def run(*args, **kwargs):
        from setuptools.warnings import InformationOnly

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Editable installation\.", category=InformationOnly)
            return hook(*args, **kwargs)

    run.__name__ = run.__qualname__ = hook.__name__
    run.__doc__ = hook.__doc__
    return run


build_editable = _without_the_same_name_warning(_outside(_setuptools.build_editable))
