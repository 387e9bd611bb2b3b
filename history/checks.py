"""Checking untrusted JSON: capped reads, typed dataclass construction, schema upgrades.

Everything here raises BundleError(path, field, message) so a user sees which file and which
field is wrong. Nothing here writes anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any, Callable

import numpy as np

from history import json_limits
from history.bundle import BUNDLE_SCHEMA_VERSION, MAX_FILE_BYTES
from history.errors import BundleError


def read_json_file(path: Path, max_bytes: int | None = None) -> tuple[Any, bytes]:
    """Parse a JSON file after checking its name, size (before reading) and encoding.

    Returns (parsed, raw bytes); the bytes feed the content hash.
    """
    check_utf8_name(path)
    if path.is_symlink():
        raise BundleError(path, "file", "is a symbolic link; bundles hold plain files only")
    if not path.is_file():
        raise BundleError(path, "file", "missing or not a regular file")
    size = path.stat().st_size
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    if size > max_bytes:
        raise BundleError(path, "size", f"{size} bytes is over the {max_bytes}-byte limit; refused unread")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(path, "encoding", f"not UTF-8 (byte {exc.start}): {exc.reason}") from None
    try:
        return json_limits.loads(text, path), raw
    except json.JSONDecodeError as exc:
        what = "truncated JSON" if exc.pos >= len(text.rstrip()) else "invalid JSON"
        raise BundleError(path, "json", f"{what} at line {exc.lineno} column {exc.colno}: {exc.msg}") from None


def check_utf8_name(path: Path) -> None:
    """Refuse names that are not valid UTF-8 (Python maps such bytes to lone surrogates)."""
    try:
        str(path.name).encode("utf-8")
    except UnicodeEncodeError:
        raise BundleError(repr(str(path))[1:-1], "file name", "is not valid UTF-8") from None


@cache
def _field_specs(cls: type) -> tuple[frozenset, tuple[tuple[str, Any, bool], ...]]:
    """Per dataclass: its field names, and (name, type hint, required) for each field."""
    hints = typing.get_type_hints(cls)
    specs = tuple(
        (f.name, hints[f.name], f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        for f in dataclasses.fields(cls)
    )
    return frozenset(name for name, _, _ in specs), specs


def build_dataclass(cls: type, data: Any, path: Path | str, where: str) -> Any:
    """Construct `cls` from a JSON object, checking every field's presence and type.

    Unknown keys are refused (a typo would otherwise silently drop data); nested dataclass
    fields are built recursively; floats must be finite.
    """
    if not isinstance(data, dict):
        raise BundleError(path, where or cls.__name__, f"expected an object, got {_json_type(data)}")
    names, specs = _field_specs(cls)
    if not names.issuperset(data):
        unknown = sorted(set(data) - names)
        raise BundleError(path, _join(where, unknown[0]), f"unknown field for {cls.__name__}")
    kwargs = {}
    for name, hint, required in specs:
        if name not in data:
            if required:
                raise BundleError(path, _join(where, name), "missing")
            continue
        kwargs[name] = check_type(hint, data[name], path, _join(where, name))
    return cls(**kwargs)


def check_type(hint: Any, value: Any, path: Path | str, where: str) -> Any:
    """Check `value` against a type hint of the bundle dataclasses; return it (converted)."""
    if hint is float:
        if type(value) is float:
            if not math.isfinite(value):
                raise BundleError(path, where, f"{value} is not a finite number")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BundleError(path, where, f"expected a number, got {_json_type(value)}")
        return check_type(float, float(value), path, where)
    if hint is str:
        if not isinstance(value, str):
            raise BundleError(path, where, f"expected a string, got {_json_type(value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BundleError(path, where, f"expected an integer, got {_json_type(value)}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise BundleError(path, where, f"expected true/false, got {_json_type(value)}")
        return value
    if hint is Any:
        return value
    origin, args = _shape(hint)
    if origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        non_none = [a for a in args if a is not type(None)]
        return check_type(non_none[0], value, path, where)
    if origin is list:
        if not isinstance(value, list):
            raise BundleError(path, where, f"expected a list, got {_json_type(value)}")
        if args[0] is float:
            return check_number_list(value, path, where)
        return [check_type(args[0], v, path, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise BundleError(path, where, f"expected an object, got {_json_type(value)}")
        return {k: check_type(args[1], v, path, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, path, where)
    raise TypeError(f"check_type: unsupported hint {hint!r} at {where}")


@cache
def _shape(hint: Any) -> tuple[Any, tuple]:
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        origin = types.UnionType
    return origin, typing.get_args(hint)


def check_number_list(values: list, path: Path | str, where: str) -> list[float]:
    """A list of finite numbers, checked in bulk (samples hold hundreds of thousands)."""
    if all(type(v) is float or type(v) is int for v in values):
        array = np.asarray(values, dtype=np.float64)
        finite = np.isfinite(array)
        if finite.all():
            return array.tolist()
        first = int(np.flatnonzero(~finite)[0])
        raise BundleError(path, f"{where}[{first}]", f"{values[first]} is not a finite number")
    return [check_type(float, v, path, f"{where}[{i}]") for i, v in enumerate(values)]


def first_negative(values: list[float]) -> int | None:
    """Index of the first negative value, or None (vectorised)."""
    negative = np.flatnonzero(np.asarray(values, dtype=np.float64) < 0)
    return int(negative[0]) if negative.size else None


def parse_utc(value: str, path: Path | str, where: str) -> str:
    """An ISO 8601 date-time to naive UTC ISO text (what the TIMESTAMP columns hold)."""
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BundleError(path, where, f"{value[:60]!r} is not an ISO 8601 date-time") from None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment.isoformat()


def require_non_negative(value: float | None, path: Path | str, where: str) -> None:
    if value is not None and value < 0:
        raise BundleError(path, where, f"{value} is negative; latencies and counts cannot be")


# --- Schema upgrades -------------------------------------------------------------------
# (schema name, version) -> function turning a document of that version into version + 1.
# Add one entry per format change; never edit a shipped upgrader.
Upgrader = Callable[[dict], dict]
UPGRADERS: dict[tuple[str, int], Upgrader] = {}


def upgrade(schema: str, document: dict, path: Path | str, where: str = "schema_version") -> dict:
    """Bring a document to BUNDLE_SCHEMA_VERSION through the registered upgraders, one step at a time."""
    version = document.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise BundleError(path, where, f"expected an integer schema version, got {_json_type(version)}")
    if version > BUNDLE_SCHEMA_VERSION:
        raise BundleError(
            path, where, f"{version} is newer than this attnwatch understands ({BUNDLE_SCHEMA_VERSION}); upgrade attnwatch"
        )
    while version < BUNDLE_SCHEMA_VERSION:
        step = UPGRADERS.get((schema, version))
        if step is None:
            raise BundleError(path, where, f"unknown {schema} schema version {version} (no upgrader)")
        document = step(dict(document))
        new_version = document.get("schema_version")
        if new_version != version + 1:
            raise BundleError(path, where, f"upgrader from {schema} v{version} produced version {new_version!r}")
        version = new_version
    return document


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
