"""The wheel's layout: the folder `attnwatch` as it is, every module under that one name.

`attnwatch/app`, `ci`, `history` and `kernels` are folders of the package (the repository's
top-level names are links to them), so a kernel repository with its own `kernels` package
neither shadows nor is shadowed by them. Folders without an `__init__.py` (SQL migrations, CUDA
sources, assets) are listed too, so their data files ship. `attnwatch/scripts` links the
checkout's tools for the tests and is left out. Everything else about the project is in
pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

packages = find_namespace_packages(
    include=["attnwatch", "attnwatch.*"], exclude=["attnwatch.scripts", "attnwatch.scripts.*", "*__pycache__*"]
)

setup(packages=packages)
