"""The one strict JSON reader: every JSON document attnwatch reads from outside comes through `loads`.

Python's json module accepts what JSON (RFC 8259) leaves undefined or has not, and each of those
turns into a silent wrong answer or a traceback further on. `loads` refuses them with one
BundleError naming the file and the key path (`timings[3].n`):
  - a key given twice in one object: json keeps the last, so a manifest with two run_ids would
    be stored under the second;
  - arrays and objects nested deeper than limits.toml's `max_depth`: the parser recurses, so a
    deep enough document ends in a RecursionError naming no file, and one just under that breaks
    the recursive checks that read it;
  - an integer outside the signed `integer_bits`-bit range (the history's BIGINT columns);
    Python itself refuses to convert one of more than 4300 digits, with a ValueError naming no
    file;
  - a number a 64-bit float cannot hold: one that overflows to infinity (1e400), or one with a
    non-zero digit that underflows to 0.0 (1e-400);
  - NaN, Infinity and -Infinity, which are not JSON, unless the format allows them
    (`allow_constants`: pytest-benchmark writes them; its files are checked field by field).
The limits, each with its reason, are in limits.toml beside this module.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path
from typing import Any

from attnwatch.history.errors import BundleError, HistoryError
from attnwatch.toml_reader import read_toml

LIMITS_PATH = Path(__file__).resolve().with_name("limits.toml")
_PLAIN_KEY = re.compile(r"^[A-Za-z0-9_/:@+-]{1,80}$")  # a key shown as it is in a key path


@cache
def contract_limits() -> dict[str, Any]:
    """limits.toml, parsed once (its sections: `json`, `latency`)."""
    data = read_toml(LIMITS_PATH, "contract limits", HistoryError)
    try:
        depth, bits, floor = data["json"]["max_depth"], data["json"]["integer_bits"], data["latency"]["min_us"]
    except (KeyError, TypeError):
        raise HistoryError(f"{LIMITS_PATH}: needs [json] max_depth, integer_bits and [latency] min_us") from None
    if not (
        isinstance(depth, int)
        and depth > 0
        and isinstance(bits, int)
        and bits > 1
        and isinstance(floor, (int, float))
        and floor > 0
    ):
        raise HistoryError(f"{LIMITS_PATH}: max_depth and integer_bits must be positive integers, min_us positive")
    return data


def max_depth() -> int:
    return contract_limits()["json"]["max_depth"]


class _Refused:
    """A value the parser met and refused, left where it stood so that its key path can be named."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


class _TwiceKeyed(dict):
    """An object one of whose keys was given twice (the first such key in `key`)."""

    __slots__ = ("key",)
    key: str


def loads(text: str, path: str | Path, allow_constants: bool = False) -> Any:
    """`text` parsed as strict JSON (module docstring), or BundleError(path, key path, why).

    json.JSONDecodeError passes through for the caller to word (truncated or invalid JSON).
    """
    bits = contract_limits()["json"]["integer_bits"]
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    digits = len(str(high))
    refused: list[bool] = []  # set once anything is refused: only then is the tree searched for it

    def refuse(why: str) -> _Refused:
        refused.append(True)
        return _Refused(why)

    def pairs(items: list[tuple[str, Any]]) -> dict:
        obj = dict(items)
        if len(obj) == len(items):
            return obj
        seen: set[str] = set()
        for twice, _ in items:
            if twice in seen:
                break
            seen.add(twice)
        marked = _TwiceKeyed(obj)
        marked.key = twice
        refused.append(True)
        return marked

    def integer(s: str) -> int | _Refused:
        if len(s.lstrip("-")) > digits:
            return refuse(
                f"an integer of {len(s.lstrip('-'))} digits; integers are {bits}-bit, at most {digits} digits"
            )
        value = int(s)
        if not low <= value <= high:
            return refuse(f"{s} is outside the {bits}-bit integer range the history stores")
        return value

    def number(s: str) -> float | _Refused:
        value = float(s)
        if math.isinf(value):
            return refuse(f"{s[:40]} is too large for a 64-bit float (it would read as infinity)")
        if value == 0.0 and any(c in "123456789" for c in re.split("[eE]", s)[0]):
            return refuse(f"{s[:40]} is too small for a 64-bit float (it would read as 0)")
        return value

    def constant(name: str) -> float | _Refused:
        if allow_constants:
            return float(name)
        return refuse(f"{name} is not a finite number (JSON has no NaN or Infinity)")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_float=number, parse_constant=constant)
    except RecursionError:
        raise BundleError(path, "json", f"nested too deeply to read (more than {max_depth()} levels allowed)") from None
    depth, where, why = _inspect(data, bool(refused))
    if depth > max_depth():
        raise BundleError(path, "json", f"nested {depth} levels deep; at most {max_depth()} are allowed")
    if where is not None:
        raise BundleError(path, where or "json", why)
    return data


def nesting_depth(value: Any) -> int:
    """How many arrays and objects deep `value` goes (a scalar is 0), walked without recursion."""
    return _inspect(value, False)[0]


def _inspect(value: Any, search: bool) -> tuple[int, str | None, str]:
    """(nesting depth, key path of the first refused value in document order or None, why).

    Walked without recursion; `search` is False when nothing was refused, and then only the
    arrays and objects are visited, not the scalars they hold."""
    deepest = 0
    stack: list[tuple[Any, int, tuple | None]] = [(value, 1, None)]
    while stack:
        item, depth, link = stack.pop()
        if search and isinstance(item, _Refused):
            return deepest, _key_path(link), item.why
        if isinstance(item, dict):
            if search and isinstance(item, _TwiceKeyed):
                return (
                    deepest,
                    _key_path((link, item.key)),
                    "this key is given twice in one object (refused: JSON does not say which one counts)",
                )
            children = reversed(item.items())
        elif isinstance(item, list):
            children = reversed(list(enumerate(item)))
        else:
            continue
        deepest = max(deepest, depth)
        stack.extend(
            (child, depth + 1, (link, key))
            for key, child in children
            if isinstance(child, (dict, list)) or (search and isinstance(child, _Refused))
        )
    return deepest, None, ""


def _key_path(link: tuple | None) -> str:
    """`a.b[3].c` from the chain of (parent link, key) pairs; a key that is not plain is quoted
    (as JSON writes it: control and non-ASCII characters escaped) and cut to 80 characters."""
    parts: list[str] = []
    while link is not None:
        link, key = link
        if isinstance(key, int):
            parts.append(f"[{key}]")
        else:
            parts.append("." + (key if _PLAIN_KEY.match(key) else json.dumps(key[:80])))
    return "".join(reversed(parts)).removeprefix(".")
