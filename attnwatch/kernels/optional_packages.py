"""Optional Python packages that some variants need, as availability needs.

A need named here is met when its module imports. Each entry names the module imported, the
PyPI distribution to install, and what it is for; a missing or broken package becomes a
reason that names the distribution and the import error (`package_reason`), so a skip says
what to install.
Probed once per process per need (an import of a CuTe-DSL package costs seconds), and only
when a variant that needs it is asked about.

Packages installed outside the interpreter's site-packages (`pip install --target DIR`) are
found through ATTNWATCH_EXTRA_SITE: the probe adds its folders first
(kernels.capabilities.extra_site_dirs, which also runs the `.pth` files the CUTLASS DSL wheels
rely on), as the measuring children do, so the probe and the variant's own import agree.
"""

from __future__ import annotations

import functools
import importlib
import re
import sys
from dataclasses import dataclass
from importlib import metadata

from .capabilities import extra_site_dirs, extra_site_folders


@dataclass(frozen=True)
class OptionalPackage:
    module: str  # imported to decide the need
    distribution: str  # what to pip install
    purpose: str


OPTIONAL_PACKAGES: dict[str, OptionalPackage] = {
    "liger": OptionalPackage(
        "liger_kernel.ops.rms_norm",
        "liger-kernel",
        "Liger-Kernel's Triton RMSNorm, a reference of the rmsnorm operator",
    ),
    "quack": OptionalPackage(
        "quack.rmsnorm", "quack-kernels", "quack's CuTe-DSL RMSNorm (with nvidia-cutlass-dsl), a reference of rmsnorm"
    ),
}

# The distribution that meets each package need of kernels.availability, for a reader that must
# not import anything (ci/compare/affected.py: is a variant's package installed on this runner).
NEED_DISTRIBUTIONS: dict[str, str] = {
    "flash_attn_cute": "flash-attn-4",
    **{need: package.distribution for need, package in OPTIONAL_PACKAGES.items()},
}

# The distributions whose versions every run records in its environment (Environment.packages,
# None where not installed) and a compare's fingerprint compares: what the registered variants
# import beyond torch, Triton and CuPy, each with why. A new optional dependency of a variant
# is added here (tests/test_environment.py checks every OPTIONAL_PACKAGES entry is).
RECORDED_DISTRIBUTIONS: dict[str, str] = {
    "flash-attn-4": "fa4_sm90's kernel (the fa4 extra): its forward and tile choice",
    "nvidia-cutlass-dsl": "the CuTe DSL that compiles fa4_sm90's and quack's kernels",
    "quack-kernels": "quack's RMSNorm, and kernels flash-attn-4 imports",
    "liger-kernel": "Liger-Kernel's Triton RMSNorm",
}


def installed_versions() -> dict[str, str | None]:
    """RECORDED_DISTRIBUTIONS -> the installed version (None: not installed), from package
    metadata without importing anything: on sys.path and in the ATTNWATCH_EXTRA_SITE folders a
    measuring child adds (kernels.capabilities.extra_site_dirs), so the run's parent, which does
    not add them, records what its children import."""
    path = sys.path + extra_site_folders()
    versions: dict[str, str | None] = {}
    for name in sorted(RECORDED_DISTRIBUTIONS):
        found = next(iter(metadata.distributions(name=name, path=path)), None)
        versions[name] = found.version if found is not None else None
    return versions


# An absolute path in an import error is reduced to its last part: reasons reach bundles and PRs.
_PATH = re.compile(r"(?<![\w.])/(?:[^\s'\"/]+/)*([^\s'\"/]+)")


@functools.lru_cache(maxsize=None)
def package_problem(need: str) -> str | None:
    """Why the package of `need` is unusable here (the import error, one line), or None when
    its module imports."""
    package = OPTIONAL_PACKAGES[need]
    extra_site_dirs()  # a `pip --target` folder named in ATTNWATCH_EXTRA_SITE
    try:
        importlib.import_module(package.module)
    except Exception as exc:  # ImportError, or a package that fails while importing its own deps
        first_line = _PATH.sub(lambda m: m.group(1), (str(exc).splitlines() or [""])[0])
        return f"{type(exc).__name__}: {first_line}"
    return None


def package_reason(need: str) -> str | None:
    """The availability reason for `need`: the distribution to install and why it failed."""
    problem = package_problem(need)
    return None if problem is None else f"needs the {OPTIONAL_PACKAGES[need].distribution} package: {problem}"
