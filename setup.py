"""The wheel's layout: every module under the one name `attnwatch`.

The repository keeps `app/ ci/ history/ kernels/` at its top; installed they become
`attnwatch.app`, `attnwatch.ci`, `attnwatch.history`, `attnwatch.kernels`, so a kernel repository
with its own `kernels` package neither shadows nor is shadowed by them. Folders without an
`__init__.py` (SQL migrations, CUDA sources, assets) are listed too, so their data files ship.
Everything else about the project is in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

TOP_LEVEL = ("app", "ci", "history", "kernels")

package_dir = {"attnwatch": "attnwatch"}
packages = ["attnwatch"] + [f"attnwatch.{sub}" for sub in find_namespace_packages("attnwatch", include=["cli*"])]
for top in TOP_LEVEL:
    package_dir[f"attnwatch.{top}"] = top
    packages.append(f"attnwatch.{top}")
    packages += [f"attnwatch.{top}.{sub}" for sub in find_namespace_packages(top, exclude=["*__pycache__*"])]

setup(packages=packages, package_dir=package_dir)
