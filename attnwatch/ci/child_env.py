"""The environment of a measuring child process, so that it imports the right `kernels`.

`compare` measures two revisions: a child measuring the base must import `kernels` from the
base's checkout while `ci` and `history` stay this checkout's. A temp dir holding a `kernels`
symlink to the chosen checkout goes first on the child's PYTHONPATH, the folder holding this
`attnwatch` after it, and KERNELS_FROM_PATH_ENV makes `attnwatch.kernels` that `kernels`
(attnwatch._kernels_alias). Children run with the work dir as cwd (never a checkout: `python -m` puts the cwd first on
sys.path, which would shadow the chosen kernels with this checkout's).

Its compilers' caches go under the one cache root (kernels.compile_cache.tool_cache_env: Triton's
and CuPy's, per trust level), so a workflow that saves and restores that root keeps every cache.
"""

from __future__ import annotations

import os
from pathlib import Path

import attnwatch
from attnwatch import KERNELS_FROM_PATH_ENV
from attnwatch.ci.errors import UserError
from attnwatch.kernels.compile_cache import tool_cache_env

# The folder that holds the `attnwatch` package: a checkout's root, or site-packages.
IMPORT_ROOT = Path(attnwatch.__file__).resolve().parent.parent


def child_env(
    work: Path,
    checkout: Path | None,
    extra_sys_path: list[str] | tuple[str, ...] = (),
    extra_env: dict[str, str] | None = None,
) -> dict[str, str]:
    """os.environ plus PYTHONPATH = [kernels shim of `checkout`], extra paths, this checkout, and
    the compilers' cache folders under the cache root."""
    env = dict(os.environ)
    try:
        env.update(tool_cache_env(env))
    except ValueError as exc:  # an ATTNWATCH_TRUST no cache folder is named for
        raise UserError(str(exc)) from None
    path = list(extra_sys_path)
    if checkout is not None:
        shim = Path(work) / "kernels-shim"
        shim.mkdir(parents=True, exist_ok=True)
        link = shim / "kernels"
        target = Path(checkout) / "kernels"
        if link.is_symlink() and Path(os.readlink(link)) != target:
            link.unlink()  # left for another checkout by an earlier child of this folder (often removed since)
        if not link.is_symlink():
            link.symlink_to(target, target_is_directory=True)
        path.insert(0, str(shim))
        env[KERNELS_FROM_PATH_ENV] = "1"
    else:
        env.pop(KERNELS_FROM_PATH_ENV, None)
    path.append(str(IMPORT_ROOT))
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra_env or {})
    return env
