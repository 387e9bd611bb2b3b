"""Structure-aware mutations of the files attnwatch reads, as hypothesis strategies (tests/test_fuzz_cli.py).

A mutation starts from a valid document and changes one thing: a field's value swapped for one
of another JSON type, a huge or non-finite number, a negative or zero one, text holding control,
invisible or unpaired-surrogate characters, an array nested past the depth cap, a key removed,
added or given twice, or the bytes themselves (cut short, an invalid UTF-8 byte). Values are
spliced into the document's JSON text, so what Python's json module cannot write (NaN where
`allow_nan` is off, a 5,000-digit integer, a key given twice, 100,000 levels of nesting) reaches
the reader as a file would hold it.

`Mutation.must_refuse` says whether every correct reader refuses the result (its exit status
must not be 0): bytes that are not JSON or not UTF-8, nesting past the cap, and in the project's
own strictly typed formats (`strict`: every field typed, unknown fields refused) a value of
another JSON type, a non-finite number, or a latency that is not positive. Everything else may be
accepted; whatever is accepted must still never reach a terminal raw.

Mutations listed in tests/fuzz_pending.toml are not drawn: each entry says what the readers do
not refuse yet, and why it is left out for now.
"""

from __future__ import annotations

import json
import re
import tomllib
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from attnwatch.history.contract.timings import LATENCY_FIELDS, PER_CALL_FIELDS

PENDING_FILE = Path(__file__).resolve().parent / "fuzz_pending.toml"
SENTINEL = "__attnwatch_fuzz_value__"
DEPTH_CAP = 64  # history.contract.json_limits.MAX_DEPTH

# Text a hostile or careless producer puts in a string: terminal escapes (colour, clear screen,
# OSC 52 clipboard write), NUL, CR, C1 controls, bidirectional overrides, zero-width and
# look-alike letters, an unpaired surrogate, path tricks, nothing, and a lot.
HOSTILE_TEXT = (
    "\x1b[31mred\x1b[0m",
    "\x1b[2J\x1b[H",
    "\x1b]52;c;ZXZpbA==\x07",
    "nul\x00byte",
    "over\rwrite",
    "c1\x85\x9bcsi",
    "rlo\u202egnp.exe",
    "zero\u200bwidth",
    "\uff53dpa",
    "\ud800",
    "../../etc/passwd",
    "",
    " ",
    "x" * 5000,
    'back\\slash "quote"',
    "line\nbreak\ttab",
    "\U0001f680 rocket",
)
BEYOND_64_BITS = ("100000000000000000000000000000", "18446744073709551616", "-9223372036854775809", "1" + "0" * 400)
HUGE_FLOATS = ("1e308", "1.7976931348623157e308", "-1e308", "9223372036854775807.0")
NON_FINITE = ("NaN", "Infinity", "-Infinity", "1e999")
OTHER_TYPES = ('"text"', "7", "-1", "1.5", "true", "null", "[]", "{}", '[1, "a"]', '{"x": 1}')
KINDS = (
    "other type",
    "integer beyond 64 bits",
    "huge float",
    "5000-digit integer",
    "non-finite number",
    "negative number",
    "zero latency",
    "subnormal latency",
    "hostile text",
    "deep nesting",
    "nesting past the recursion limit",
    "key removed",
    "key added",
    "duplicate key",
    "truncated",
    "invalid UTF-8",
    "naive timestamp",
)
# A timestamp with its UTC offset, as every format writes one; the mutation drops the offset.
_AWARE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


class Mutation:
    """One mutated file: what was done (`kind`, a tests/fuzz_pending.toml key), where (the file
    and field), its bytes, and whether every correct reader refuses it."""

    def __init__(self, kind: str, where: str, data: bytes, must_refuse: bool) -> None:
        self.kind, self.where, self.data, self.must_refuse = kind, where, data, must_refuse

    def __repr__(self) -> str:  # hypothesis prints a failing case's draws: the bytes would drown them
        return f"Mutation({self.kind!r}, {self.where!r}, must_refuse={self.must_refuse}, {len(self.data)} bytes)"


@cache
def pending(fmt: str) -> dict[str, str]:
    """{mutation kind: why it is not drawn yet} for the input format `fmt` (tests/fuzz_pending.toml)."""
    with PENDING_FILE.open("rb") as fh:
        entries = tomllib.load(fh).get("pending", [])
    return {e["kind"]: e["reason"] for e in entries if fmt in e.get("formats", [fmt])}


def paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every value's path in a JSON document (keys and list indices), the document itself first."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:3]):  # the first few items stand for the rest
            out += paths(value, (*prefix, i))
    return out


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _category(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "int" if isinstance(value, int) else "float"
    return {str: "str", list: "list", dict: "dict"}[type(value)]


def _raw_category(raw: str) -> str:
    return _category(json.loads(raw))


def _other_type_refused(orig: Any, raw: str) -> bool:
    """In a strictly typed format: does swapping `orig` for `raw` break the field's type?"""
    old, new = _category(orig), _raw_category(raw)
    if "null" in (old, new) or old == new:
        return False  # null: the field may be optional; a value of the same type may be fine
    if old == "float" and new == "int":
        return False  # an integer is a number
    return True


def _splice(doc: Any, path: tuple, raw: str, duplicate_of: str | None = None) -> bytes:
    """The document's JSON text with the value at `path` replaced by the raw JSON text `raw`
    (with `duplicate_of`: the key given twice, `raw` first and the original value second)."""
    copy = json.loads(json.dumps(doc))
    if not path:
        return raw.encode("utf-8", "surrogatepass")
    parent = _get(copy, path[:-1])
    original = parent[path[-1]]
    parent[path[-1]] = SENTINEL
    text = json.dumps(copy, indent=1, allow_nan=True)
    spliced = raw if duplicate_of is None else f"{raw}, {json.dumps(duplicate_of)}: {json.dumps(original)}"
    return text.replace(json.dumps(SENTINEL), spliced, 1).encode("utf-8", "surrogatepass")


# A spread may be 0: the timing fields the contract does not floor as per-call latencies.
SPREADS = tuple(sorted(set(LATENCY_FIELDS) - set(PER_CALL_FIELDS)))


def _is_latency(path: tuple, value: Any) -> bool:
    return (
        bool(path)
        and isinstance(path[-1], str)
        and path[-1].endswith("_us")
        and path[-1] not in SPREADS
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value > 0
    )


@st.composite
def mutations(draw, doc: Any, name: str, fmt: str, strict: bool) -> Mutation:
    """One mutation of the JSON document `doc` of file `name`, an input of format `fmt` (module docstring)."""
    left_out = set(pending(fmt))
    raw_doc = json.dumps(doc, indent=1).encode()
    kinds = [k for k in KINDS if k not in left_out]
    kind = draw(st.sampled_from(kinds))
    if kind == "truncated":
        end = len(raw_doc.rstrip()) - 1
        cut = draw(st.integers(0, end - 1))
        return Mutation(kind, f"{name} cut at byte {cut}", raw_doc[:cut], True)
    if kind == "invalid UTF-8":
        at = draw(st.integers(1, len(raw_doc) - 2))
        return Mutation(kind, f"{name} byte {at}", raw_doc[:at] + b"\xff" + raw_doc[at:], True)
    every = paths(doc)
    if kind in ("key removed", "key added", "duplicate key"):
        parents = [p for p in every if isinstance(_get(doc, p), dict) and (_get(doc, p) or kind == "key added")]
        path = draw(st.sampled_from(parents))
        obj = dict(_get(doc, path))
        if kind == "key added":
            obj["attnwatch_fuzz_extra"] = draw(st.sampled_from(("x", 1, None, [])))
            return Mutation(kind, f"{name}: {_name(path)}", _splice(doc, path, json.dumps(obj)), False)
        key = draw(st.sampled_from(sorted(obj)))
        if kind == "key removed":
            del obj[key]
            return Mutation(kind, f"{name}: {_name((*path, key))}", _splice(doc, path, json.dumps(obj)), False)
        raw = draw(st.sampled_from(OTHER_TYPES))
        return Mutation(kind, f"{name}: {_name((*path, key))}", _splice(doc, (*path, key), raw, duplicate_of=key), True)
    if kind in ("deep nesting", "nesting past the recursion limit"):
        path = draw(st.sampled_from(every))
        depth = draw(st.sampled_from((DEPTH_CAP + 1, 200) if kind == "deep nesting" else (5000, 100_000)))
        return Mutation(
            kind, f"{name}: {_name(path)} nested {depth} deep", _splice(doc, path, "[" * depth + "]" * depth), True
        )
    numbers = [p for p in every if p and _category(_get(doc, p)) in ("int", "float")]
    strings = [p for p in every if p and isinstance(_get(doc, p), str)]
    latencies = [p for p in numbers if _is_latency(p, _get(doc, p))]
    if (
        kind in ("integer beyond 64 bits", "huge float", "5000-digit integer", "non-finite number", "negative number")
        and numbers
    ):
        path = draw(st.sampled_from(numbers))
        value = _get(doc, path)
        if kind in ("integer beyond 64 bits", "huge float"):
            raw = draw(st.sampled_from(BEYOND_64_BITS if kind == "integer beyond 64 bits" else HUGE_FLOATS))
            return Mutation(kind, f"{name}: {_name(path)} = {raw[:24]}", _splice(doc, path, raw), False)
        if kind == "5000-digit integer":
            return Mutation(
                kind, f"{name}: {_name(path)} = 1e5000 as digits", _splice(doc, path, "1" + "0" * 5000), False
            )
        if kind == "non-finite number":
            raw = draw(st.sampled_from(NON_FINITE))
            return Mutation(kind, f"{name}: {_name(path)} = {raw}", _splice(doc, path, raw), strict)
        raw = json.dumps(-abs(value) if value else -1)
        return Mutation(
            kind, f"{name}: {_name(path)} = {raw}", _splice(doc, path, raw), strict and _is_latency(path, value)
        )
    if kind in ("zero latency", "subnormal latency") and latencies:
        path = draw(st.sampled_from(latencies))
        raw = draw(st.sampled_from(("0", "0.0") if kind == "zero latency" else ("1e-320", "1e-400")))
        return Mutation(kind, f"{name}: {_name(path)} = {raw}", _splice(doc, path, raw), True)
    stamps = [p for p in strings if _AWARE.match(_get(doc, p))]
    if kind == "naive timestamp" and stamps:
        # Refused in a bundle and compare.json; a pytest-benchmark file before 5.0 may be naive by
        # the documented rule (history.contract.checks.parse_utc), so there it need only not crash.
        path = draw(st.sampled_from(stamps))
        naive = re.sub(r"(Z|[+-]\d\d:\d\d)$", "", _get(doc, path))
        return Mutation(
            kind,
            f"{name}: {_name(path)} = {naive}",
            _splice(doc, path, json.dumps(naive)),
            fmt in ("bundle", "compare"),
        )
    if kind == "hostile text" and strings:
        path = draw(st.sampled_from(strings))
        text = draw(st.sampled_from(HOSTILE_TEXT))
        raw = json.dumps(text)  # escaped in the file; the reader gets the characters themselves
        return Mutation(kind, f"{name}: {_name(path)} = {text[:40]!r}", _splice(doc, path, raw), False)
    path = draw(st.sampled_from(every))
    raw = draw(st.sampled_from(OTHER_TYPES))
    refused = (strict and _other_type_refused(_get(doc, path), raw)) or (not path and _raw_category(raw) != "dict")
    return Mutation("other type", f"{name}: {_name(path)} = {raw}", _splice(doc, path, raw), refused)


def _name(path: tuple) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(the document)"
