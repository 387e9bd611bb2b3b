"""The harness's way into a revision's `kernels`: its declared harness API, by version.

A measuring process (a compare worker, the `attnwatch run` child, the ncu target) may run
another checkout's `kernels` (ci/child_env.py puts it first on the path), so the code here that
runs inside it reaches kernels only through `kernels_api()`: the revision's
kernels/harness_api.py (docs/design.md, "The harness API"), or for a revision without that
module (version 0: every commit before it) the same names found module by module. Code that
runs only beside its own checkout's kernels (selecting cases, listing variants) imports them
directly.

Before measuring a checkout, compare calls `check_measurable`: the version is read from the
file without importing it, and a version this harness does not know, or one older than it still
measures, is refused in one line naming the side's commit and both versions.
"""

from __future__ import annotations

import ast
import functools
import sys
from importlib import import_module
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

from attnwatch.ci.errors import UserError

# The name a measuring process imports a revision's kernels under: this checkout's own, or, in a
# compare child, another revision's top-level `kernels` under this name (attnwatch._kernels_alias).
KERNELS_PACKAGE = "attnwatch.kernels"
API_FILE = "kernels/harness_api.py"
VERSION_NAME = "HARNESS_API_VERSION"
# What each version this harness measures is; a version outside is refused (`check_measurable`).
VERSIONS = {
    0: "no kernels/harness_api.py: the names found module by module, as in every commit before it",
    1: "kernels/harness_api.py re-exports the surface and declares HARNESS_API_VERSION",
    2: "operators: get_operator, SHAPES of every operator, Case and case_id with a mode (before: attention only)",
}
OLDEST_SUPPORTED = min(VERSIONS)
NEWEST_KNOWN = max(VERSIONS)
# What the harness calls (kernels/harness_api.py documents each); every version provides them all.
NAMES = (
    "availability",
    "capabilities",
    "Case",
    "case_id",
    "check_case",
    "forget_tuned_choices",
    "get",
    "register",
    "Shape",
)
# What version 2 added: only a case of an operator other than attention reaches them (ci.plan).
OPERATOR_NAMES = ("get_operator", "SHAPES")


class HarnessApiError(ValueError):
    """A revision's harness API cannot be used by this harness (the message says why)."""


def declared_version(checkout: Path) -> int:
    """The harness API version `checkout`'s kernels declare, read from the file (never imported:
    the parent process keeps its own kernels). No file: version 0."""
    path = Path(checkout) / API_FILE
    if not path.is_file():
        return 0
    try:
        tree = ast.parse(path.read_bytes(), filename=API_FILE)
    except (SyntaxError, ValueError) as exc:
        raise HarnessApiError(f"{API_FILE}: not valid Python ({exc.__class__.__name__}: {exc})"[:300]) from None
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if any(isinstance(t, ast.Name) and t.id == VERSION_NAME for t in targets):
            value = node.value
            if isinstance(value, ast.Constant) and type(value.value) is int and value.value >= 0:
                return value.value
            raise HarnessApiError(f"{API_FILE}: {VERSION_NAME}: expected a non-negative int literal")
    raise HarnessApiError(f"{API_FILE}: {VERSION_NAME}: missing (a module-level int literal)")


def check_measurable(checkout: Path, side: str, commit: str) -> int:
    """The version of `checkout`'s harness API; UserError (one line, naming the side's commit
    and both versions) when this harness cannot measure it."""
    try:
        version = declared_version(checkout)
    except HarnessApiError as exc:
        raise UserError(f"cannot measure the {side} {commit}: {exc}") from None
    if version > NEWEST_KNOWN:
        raise UserError(
            f"cannot measure the {side} {commit}: its kernels declare harness API version {version}, "
            f"newer than this attnwatch's {NEWEST_KNOWN}; measure it with an attnwatch that knows it"
        )
    if version < OLDEST_SUPPORTED:
        raise UserError(
            f"cannot measure the {side} {commit}: its kernels declare harness API version {version}, "
            f"older than {OLDEST_SUPPORTED}, the oldest this attnwatch (version {NEWEST_KNOWN}) measures"
        )
    return version


@functools.cache
def kernels_api() -> Any:
    """This process's kernels through its harness API: an object with every name of `NAMES`
    and `HARNESS_API_VERSION`. HarnessApiError for a version this harness cannot use."""
    try:
        module = import_module(f"{KERNELS_PACKAGE}.harness_api")
    except ModuleNotFoundError as exc:
        if exc.name != f"{KERNELS_PACKAGE}.harness_api":
            raise
        return _version_0()
    version = getattr(module, VERSION_NAME, None)
    if type(version) is not int or version not in VERSIONS:
        raise HarnessApiError(
            f"{API_FILE}: {VERSION_NAME} {version!r}: this harness uses versions {OLDEST_SUPPORTED}..{NEWEST_KNOWN}"
        )
    missing = [name for name in NAMES + (OPERATOR_NAMES if version >= 2 else ()) if not hasattr(module, name)]
    if missing:
        raise HarnessApiError(f"{API_FILE} (version {version}) lacks {', '.join(missing)}")
    return module


def kernels_dir() -> Path:
    """Where this process's kernels package is (recorded per side: which checkout was measured)."""
    module = import_module(KERNELS_PACKAGE)
    if module.__file__ is None:  # a namespace package: a kernels folder without __init__.py
        raise HarnessApiError(f"{KERNELS_PACKAGE}: imported from a folder without __init__.py, not a kernels package")
    return Path(module.__file__).resolve().parent


def _version_0() -> SimpleNamespace:
    """Version 0: the surface as the modules of every revision before kernels/harness_api.py had it."""
    mod = lambda name: import_module(f"{KERNELS_PACKAGE}.{name}")  # noqa: E731
    availability, cases, correctness, registry, shapes = (
        mod(n) for n in ("availability", "cases", "correctness", "registry", "shapes")
    )
    return SimpleNamespace(
        **{VERSION_NAME: 0},
        availability=availability.availability,
        capabilities=availability.capabilities,
        Case=cases.Case,
        case_id=cases.case_id,
        check_case=correctness.check_case,
        forget_tuned_choices=_forget_tuned_choices_0,
        get=registry.get,
        register=registry.register,
        Shape=shapes.Shape,
    )


def _forget_tuned_choices_0() -> None:
    """Version 0 has no such call: ask the Triton tuner itself when this process imported it (a
    revision whose tuner lacks `forget_choices` keeps its choices)."""
    # An older revision's kernels import their tuner absolutely, as `kernels.triton.tuner`.
    tuner: ModuleType | None = sys.modules.get(f"{KERNELS_PACKAGE}.triton.tuner") or sys.modules.get(
        f"{KERNELS_PACKAGE.rpartition('.')[2]}.triton.tuner"
    )
    forget = getattr(tuner, "forget_choices", None)
    if forget is not None:
        forget()
