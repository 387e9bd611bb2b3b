"""Parsing untrusted JSON text without running out of stack: nesting depth is capped.

Python's json module parses recursively: a document nested deeper than the interpreter's
recursion limit (an array 200,000 deep is 400 KB) raises RecursionError, a traceback naming no
file; one just under it parses, and then breaks the recursive checks that read it. Every JSON
document the project reads from outside (run bundles, pytest-benchmark files, compare.json)
comes through `loads`, which names the file and refuses anything nested deeper than MAX_DEPTH.
The project's own formats nest at most 6 deep; pytest-benchmark's at most 5.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from attnwatch.history.errors import BundleError

MAX_DEPTH = 64


def loads(text: str, path: str | Path, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """json.loads(text), or BundleError(path, "json", ...) when it nests deeper than MAX_DEPTH.

    json.JSONDecodeError (and what `parse_constant` raises) pass through for the caller to word.
    """
    try:
        data = json.loads(text, parse_constant=parse_constant)
    except RecursionError:
        raise BundleError(path, "json", f"nested too deeply to read (more than {MAX_DEPTH} levels allowed)") from None
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise BundleError(path, "json", f"nested {depth} levels deep; at most {MAX_DEPTH} are allowed")
    return data


def nesting_depth(value: Any) -> int:
    """How many arrays and objects deep `value` goes (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in children)
    return deepest
