"""Variants from outside this repository: the one place that finds and loads them.

Two ways in, for `attnwatch run`, `compare` and `bisect` alike:

* `--variant-module SPEC` (repeatable; `--variant-path DIR` puts DIR on the import path), and
* the entry-point group `attnwatch.variants` of any installed distribution, e.g. in its
  pyproject.toml `[project.entry-points."attnwatch.variants"] mykernels = "mykernels.variants"`.

A SPEC is `package.module`, imported (its import registers its variants with
`attnwatch.kernels.registry.register`, or it holds a `VARIANTS` list, registered here), or
`package.module:name`, where `name` is a Variant, a list of them, or a callable returning
either. The parent loads them so that `--variants` can name them, and hands the same specs to
every measuring process (RunPlan.extra_variant_modules), whose engine loads them again with
`load_specs`: one spelling, one loader.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import import_module
from importlib.metadata import entry_points
from typing import Any

from attnwatch.ci.errors import UserError

ENTRY_POINT_GROUP = "attnwatch.variants"
_loaded: set[str] = set()  # specs loaded in this process (a callable's variants are registered once)


def add_arguments(parser: Any) -> None:
    """--variant-module / --variant-path, the same on every command that measures."""
    parser.add_argument(
        "--variant-module",
        action="append",
        help="extra variants: a module that registers them, or module:callable returning them "
        f"(repeatable; installed packages' '{ENTRY_POINT_GROUP}' entry points are always loaded)",
    )
    parser.add_argument(
        "--variant-path", action="append", help="a directory to import --variant-module from (repeatable)"
    )


@dataclass(frozen=True)
class VariantSources:
    """Where the command line asks for variants from outside: `--variant-module` specs and
    `--variant-path` directories (built by the command from its flags)."""

    modules: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()


def entry_point_specs() -> list[str]:
    """The specs installed distributions declare in the `attnwatch.variants` group."""
    return [ep.value for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)]


def requested_specs(sources: VariantSources) -> list[str]:
    """The command line's specs, then the entry points', each once."""
    return list(dict.fromkeys([*sources.modules, *entry_point_specs()]))


def load_requested(sources: VariantSources) -> list[str]:
    """Load the requested variants in this process (so --variants can name them); returns the
    specs to hand to measuring processes. A spec that does not load is a usage error."""
    for path in sources.paths:
        if path not in sys.path:
            sys.path.insert(0, path)
    specs = requested_specs(sources)
    try:
        load_specs(specs)
    except (ImportError, AttributeError, TypeError, ValueError) as exc:
        raise UserError(f"--variant-module: {exc}") from None
    return specs


def load_specs(specs: list[str]) -> None:
    """Import each spec and register what it names (module docstring); once per process."""
    from attnwatch.ci.kernels_api import kernels_api

    api = kernels_api()
    for spec in specs:
        if spec in _loaded:
            continue
        module_name, _, attr = spec.partition(":")
        try:
            module = import_module(module_name.strip())
        except ImportError as exc:
            raise ImportError(f"{spec}: {exc}") from None
        if attr:
            try:
                found = getattr(module, attr.strip())
            except AttributeError:
                raise AttributeError(f"{spec}: module {module_name} has no {attr!r}") from None
            found = found() if callable(found) and not hasattr(found, "prepare") else found
        else:
            found = getattr(module, "VARIANTS", [])
        for variant in found if isinstance(found, (list, tuple)) else [found]:
            if not hasattr(variant, "prepare") or not hasattr(variant, "name"):
                raise TypeError(f"{spec}: {type(variant).__name__} is not a Variant")
            try:
                registered = api.get(variant.name)
            except KeyError:
                registered = None
            if registered is None:
                api.register(variant)
            elif registered is not variant:
                raise ValueError(f"{spec}: variant {variant.name!r} is registered already")
        _loaded.add(spec)
