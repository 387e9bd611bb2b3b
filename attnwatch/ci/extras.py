"""The pins of attnwatch's optional extras (pyproject.toml), and the pip command that installs
them on a GPU runner, online or from a wheel directory with no index at all.

Online, the extra installs as pip resolves it (`pip install 'attnwatch[fa4]'`). Offline, a
runner that cannot reach an index (or must not: a pull request's runner) installs exactly the
extra's pins, each with `--no-deps`, from a folder of wheels (`pip --no-index --find-links DIR`):
the CuTe DSL wheels also ask for the CUDA 12 libraries, which a CUDA 13 runner does not want
(docs/design.md, "Kernel variants"), and a pin already satisfied on the machine (einops,
protobuf) needs no wheel. The pins are read from the installed attnwatch's own metadata, so the
folder is checked against the version that runs.
"""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

from attnwatch.ci.errors import UserError

DISTRIBUTION = "attnwatch"
_EXTRA_MARKER = re.compile(r"""^(?P<requirement>[^;]+);\s*extra\s*==\s*["'](?P<extra>[A-Za-z0-9._-]+)["']\s*$""")


def extra_pins(extras: list[str], requires: list[str] | None = None) -> list[str]:
    """The requirements of each named extra, in the order pyproject.toml lists them; an extra
    attnwatch does not declare is a UserError naming the ones it does."""
    if requires is None:
        try:
            requires = metadata.requires(DISTRIBUTION) or []
        except metadata.PackageNotFoundError as exc:
            raise UserError("attnwatch is not installed in this environment (pip install it first)") from exc
    declared: dict[str, list[str]] = {}
    for line in requires:
        match = _EXTRA_MARKER.match(line.strip())
        if match:
            declared.setdefault(match["extra"], []).append(match["requirement"].strip())
    unknown = [e for e in extras if e not in declared]
    if unknown:
        raise UserError(f"unknown extra {', '.join(unknown)}; attnwatch declares {', '.join(sorted(declared))}")
    return list(dict.fromkeys(pin for e in extras for pin in declared[e]))


def pip_command(extras: list[str], wheels: str | None, requires: list[str] | None = None) -> list[str]:
    """The pip command that installs `extras`: from the index, or only from the wheel folder
    `wheels` (each pin with --no-deps; a missing folder is a UserError)."""
    if not extras:
        raise UserError("name at least one extra (e.g. fa4)")
    pins = extra_pins(extras, requires)
    command = [sys.executable, "-m", "pip", "install", "--quiet"]
    if not wheels:
        return [*command, *pins]
    if not Path(wheels).is_dir():
        raise UserError("--wheels: the wheel folder does not exist")
    return [*command, "--no-index", "--find-links", wheels, "--no-deps", *pins]
