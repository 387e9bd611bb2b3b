"""Checking untrusted JSON: capped reads, typed dataclass construction, schema upgrades.

The one validator of the project's JSON formats: the run bundle's files (history.contract.validate),
the records a producer is about to write (history.contract.bundle_writer) and compare.json
(ci.compare.report) are all checked here, against their dataclasses. A dataclass field's type
hint says what a value may be; `rule(...)` in its metadata adds what a type cannot say
(choices, a positive number, length caps); a `TextRule` caps a whole document's strings.
Unknown and missing fields are errors: nothing is silently dropped or made up.

Everything here raises BundleError(path, field, message) so a user sees which file and which
field is wrong. Nothing here writes anywhere.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from attnwatch.history.contract import json_limits
from attnwatch.history.errors import BundleError
from attnwatch.history.contract.names import name_problem

MAX_FILE_BYTES = 64 * 1024 * 1024  # largest JSON file read unless a format says otherwise
RULE_KEY = "attnwatch.rule"  # dataclass field metadata key of a FieldRule


@dataclass(frozen=True)
class FieldRule:
    """What a field's type hint cannot say; applies to the field's value and to each item of
    a list or dict value."""

    choices: tuple[str, ...] | None = None  # the allowed strings
    positive: bool = False  # numbers must be > 0
    low: int | None = None  # integers must be >= low
    high: int | None = None  # ... and <= high
    max_len: int | None = None  # longest string (overrides the document's TextRule)
    max_items: int | None = None  # longest list, largest dict
    name: str | None = None  # a series-key name: history.contract.names' kind (NAME, CASE_ID) its text must fit
    timestamp: bool = False  # an ISO 8601 date-time with its UTC offset (parse_utc's rule)
    latency: bool = False  # a per-call time in µs: at least limits.toml's floor (require_latency)


@dataclass(frozen=True)
class TextRule:
    """A document-wide rule for strings (dict keys included): length cap, control characters.

    For text that ends up in front of a person (a PR comment): no terminal escapes, no
    characters that could hide content; newline and tab are allowed.
    """

    max_len: int
    control_chars: bool = False


def rule(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING, **checks: Any) -> Any:
    """A dataclass field with a default and a FieldRule: `ok: float | None = rule(None, positive=True)`.

    A required field is `field(metadata=rule_metadata(...))`: a type checker tells a required
    field from one with a default only by a `dataclasses.field` call without a default, and would
    take any `rule(...)` for a default (and then miss a constructor call that leaves it out).
    """
    if default is dataclasses.MISSING and default_factory is dataclasses.MISSING:
        raise TypeError("rule() is for a field with a default; a required field is field(metadata=rule_metadata(...))")
    return dataclasses.field(default=default, default_factory=default_factory, metadata=rule_metadata(**checks))


def rule_metadata(**checks: Any) -> dict[str, FieldRule]:
    """A required dataclass field's FieldRule: `case_id: str = field(metadata=rule_metadata(name=CASE_ID))`."""
    return {RULE_KEY: FieldRule(**checks)}


def read_json_file(path: Path, max_bytes: int | None = None, allow_constants: bool = False) -> tuple[Any, bytes]:
    """Parse a JSON file after checking its name, size (before reading) and encoding, with the
    strict reader (history.contract.json_limits: duplicate keys, depth, integer and float range).

    `allow_constants`: accept NaN/Infinity, which JSON has not, for pytest-benchmark's files (it
    writes them; their fields are checked one by one). Returns (parsed, raw bytes); the bytes
    feed the content hash.
    """
    path = Path(path)
    check_utf8_name(path)
    if path.is_symlink():
        raise BundleError(path, "file", "is a symbolic link; refused (it would have this read whatever the link names)")
    if not path.exists():
        raise BundleError(path, "file", "not found")
    if not path.is_file():
        raise BundleError(path, "file", "not a regular file")
    size = path.stat().st_size
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    if size > max_bytes:
        raise BundleError(path, "size", f"{size} bytes is over the {max_bytes}-byte limit; refused unread")
    raw = path.read_bytes()
    return parse_json_bytes(raw, path, max_bytes, allow_constants), raw


def parse_json_bytes(
    raw: bytes, path: Path | str, max_bytes: int = MAX_FILE_BYTES, allow_constants: bool = False
) -> Any:
    """The JSON document of a file's bytes, checked as read_json_file checks a file's (size,
    UTF-8, the strict reader); also what a writer parses back before it writes those bytes."""
    if len(raw) > max_bytes:
        raise BundleError(path, "size", f"{len(raw)} bytes is over the {max_bytes}-byte limit")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(path, "encoding", f"not UTF-8 (byte {exc.start}): {exc.reason}") from None
    try:
        return json_limits.loads(text, path, allow_constants=allow_constants)
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
def _field_specs(cls: type) -> tuple[frozenset, tuple[tuple[str, Any, bool, FieldRule | None], ...]]:
    """Per dataclass: its field names, and (name, type hint, required, rule) for each field."""
    hints = typing.get_type_hints(cls)
    specs = tuple(
        (
            f.name,
            hints[f.name],
            f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING,
            f.metadata.get(RULE_KEY),
        )
        for f in dataclasses.fields(cls)
    )
    return frozenset(name for name, _, _, _ in specs), specs


def build_dataclass(cls: type, data: Any, path: Path | str, where: str, text: TextRule | None = None) -> Any:
    """Construct `cls` from a JSON object, checking every field's presence, type and rule.

    Unknown keys are refused (a typo would otherwise silently drop data), and so are missing
    fields without a default; nested dataclass fields are built recursively; floats must be
    finite; `text` caps every string of the document.
    """
    if not isinstance(data, dict):
        raise BundleError(path, where or cls.__name__, f"expected an object, got {_json_type(data)}")
    names, specs = _field_specs(cls)
    if not names.issuperset(data):
        unknown = sorted(map(str, set(data) - names))
        raise BundleError(path, _join(where, unknown[0][:80]), f"unknown field for {cls.__name__}")
    kwargs = {}
    for name, hint, required, field_rule in specs:
        if name not in data:
            if required:
                raise BundleError(path, _join(where, name), "missing")
            continue
        kwargs[name] = check_type(hint, data[name], path, _join(where, name), text, field_rule)
    return cls(**kwargs)


def check_record(record: Any, path: Path | str, where: str, text: TextRule | None = None) -> dict[str, Any]:
    """A dataclass instance as the JSON object a reader will see, checked as the reader checks it.

    Used by writers: a record the reader would refuse (a wrong type, a NaN where no None is
    allowed, a rule broken) fails at the producer, naming the file and field.
    """
    data = json_ready(dataclasses.asdict(record))
    build_dataclass(type(record), data, path, where, text)
    return data


def json_ready(value: Any) -> Any:
    """Plain data for JSON: tuples become lists, non-finite floats None (JSON has no NaN/Inf;
    the record's own fields say why a value is missing, and the check refuses a None where
    the field does not allow one)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def check_type(
    hint: Any,
    value: Any,
    path: Path | str,
    where: str,
    text: TextRule | None = None,
    field_rule: FieldRule | None = None,
) -> Any:
    """Check `value` against a type hint of the contract's dataclasses (and a field's rule);
    return it (converted)."""
    if hint is float:
        if type(value) is float:
            if not math.isfinite(value):
                raise BundleError(path, where, f"{value} is not a finite number")
            if field_rule is not None and field_rule.positive and value <= 0:
                raise BundleError(path, where, f"must be positive, got {value!r}")
            if field_rule is not None and field_rule.latency:
                require_latency(value, path, where)
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BundleError(path, where, f"expected a number, got {_json_type(value)}")
        return check_type(float, float(value), path, where, text, field_rule)
    if hint is str:
        if not isinstance(value, str):
            raise BundleError(path, where, f"expected a string, got {_json_type(value)}")
        _check_text(value, path, where, text, field_rule)
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BundleError(path, where, f"expected an integer, got {_json_type(value)}")
        if field_rule is not None:
            _check_int(value, path, where, field_rule)
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
        if len(non_none) == 1:
            return check_type(non_none[0], value, path, where, text, field_rule)
        for alternative in non_none:
            try:
                return check_type(alternative, value, path, where, text, field_rule)
            except BundleError:
                continue
        names = " or ".join(getattr(a, "__name__", str(a)) for a in non_none)
        raise BundleError(path, where, f"expected {names}, got {_json_type(value)}")
    if origin is list or origin is tuple:
        if not isinstance(value, list):
            raise BundleError(path, where, f"expected a list, got {_json_type(value)}")
        _check_items(value, path, where, field_rule)
        if origin is tuple:  # stored as a JSON list: tuple[int, int] has that length, tuple[int, ...] any
            kinds = [args[0]] * len(value) if len(args) == 2 and args[1] is Ellipsis else list(args)
            if len(kinds) != len(value):
                raise BundleError(path, where, f"expected a list of {len(kinds)} values, got {len(value)}")
            return tuple(
                check_type(k, v, path, f"{where}[{i}]", text, field_rule) for i, (k, v) in enumerate(zip(kinds, value))
            )
        if args[0] is float and (field_rule is None or not (field_rule.positive or field_rule.latency)):
            return check_number_list(value, path, where)
        return [check_type(args[0], v, path, f"{where}[{i}]", text, field_rule) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise BundleError(path, where, f"expected an object, got {_json_type(value)}")
        _check_items(value, path, where, field_rule)
        if text is not None:
            for k in value:
                _check_text(k, path, where, text, None)
        return {k: check_type(args[1], v, path, f"{where}.{k}", text, field_rule) for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return build_dataclass(hint, value, path, where, text)
    raise TypeError(f"check_type: unsupported hint {hint!r} at {where}")


def _check_text(value: str, path: Path | str, where: str, text: TextRule | None, field_rule: FieldRule | None) -> None:
    limit = (
        field_rule.max_len
        if field_rule is not None and field_rule.max_len is not None
        else (text.max_len if text is not None else None)
    )
    if limit is not None and len(value) > limit:
        raise BundleError(path, where, f"longer than {limit} characters")
    if text is not None and not text.control_chars and any(ord(ch) < 32 and ch not in "\n\t" for ch in value):
        raise BundleError(path, where, "contains control characters")
    if field_rule is not None and field_rule.choices is not None and value not in field_rule.choices:
        raise BundleError(path, where, f"expected one of {', '.join(field_rule.choices)}, got {value[:80]!r}")
    if field_rule is not None and field_rule.name is not None:
        problem = name_problem(value, field_rule.name)
        if problem:
            raise BundleError(path, where, problem)
    if field_rule is not None and field_rule.timestamp:
        parse_utc(value, path, where)


def _check_int(value: int, path: Path | str, where: str, field_rule: FieldRule) -> None:
    low = 1 if field_rule.positive and field_rule.low is None else field_rule.low
    if (low is not None and value < low) or (field_rule.high is not None and value > field_rule.high):
        raise BundleError(path, where, f"expected an integer in [{low}, {field_rule.high}], got {value}")


def _check_items(value: list | dict, path: Path | str, where: str, field_rule: FieldRule | None) -> None:
    if field_rule is not None and field_rule.max_items is not None and len(value) > field_rule.max_items:
        raise BundleError(path, where, f"more than {field_rule.max_items} entries")


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


def parse_utc(value: str, path: Path | str, where: str, naive_is_utc: bool = False) -> str:
    """An ISO 8601 date-time as naive UTC ISO text (what the TIMESTAMP columns hold).

    The timestamp rule of every format attnwatch reads (docs/design.md, "Run bundle"):
    a timestamp names an instant, so it carries its UTC offset ("Z" or "+HH:MM") and is
    converted to UTC; one without an offset is refused, since the text cannot tell UTC from
    some machine's local time. `naive_is_utc` is for the one format that defines its naive
    timestamps itself: pytest-benchmark before 5.0 wrote `datetime` from datetime.utcnow(),
    UTC by its writer's definition (history.contract.pytest_benchmark_import).
    """
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise BundleError(path, where, f"{value[:60]!r} is not an ISO 8601 date-time") from None
    if moment.tzinfo is None:
        if not naive_is_utc:
            raise BundleError(
                path,
                where,
                f"{value[:60]!r} has no UTC offset, so the instant it names is unknown "
                "(local time or UTC?); write it with one, e.g. 2026-11-01T08:00:00Z",
            )
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        moment = moment.astimezone(timezone.utc)
    except OverflowError:
        raise BundleError(path, where, f"{value[:60]!r} is out of the date range once converted to UTC") from None
    return moment.replace(tzinfo=None).isoformat()


def latency_floor_us() -> float:
    """The smallest latency (µs) a sample or a latency statistic may have (limits.toml, with its reason)."""
    return float(json_limits.contract_limits()["latency"]["min_us"])


def require_latency(value: float | None, path: Path | str, where: str) -> None:
    """A per-call latency (µs), or None: at least the floor (zero, negative, subnormal refused)."""
    if value is not None and not value >= latency_floor_us():
        raise BundleError(
            path,
            where,
            f"{value!r} us is not a latency: below {latency_floor_us():g} us (history/contract/limits.toml says why)",
        )


def first_below_floor(values: list[float]) -> int | None:
    """Index of the first latency under the floor (vectorised), or None."""
    low = np.flatnonzero(~(np.asarray(values, dtype=np.float64) >= latency_floor_us()))
    return int(low[0]) if low.size else None


def require_non_negative(value: float | None, path: Path | str, where: str) -> None:
    if value is not None and value < 0:
        raise BundleError(path, where, f"{value} is negative; latencies and counts cannot be")


# --- Schema versions and upgrades ------------------------------------------------------
# A format's upgraders: (schema name, version) -> function turning a document of that version
# into version + 1. One entry per format change; never edit a shipped upgrader.
Upgrader = Callable[[dict], dict]


def check_envelope(
    document: Any, path: Path | str, schema: str, current: int, upgraders: Mapping[tuple[str, int], Upgrader]
) -> dict:
    """A document's `schema` and `schema_version`, brought to version `current` by `upgraders`."""
    if not isinstance(document, dict):
        raise BundleError(path, "schema", f"a {schema} file is a JSON object with schema and schema_version")
    if document.get("schema") != schema:
        raise BundleError(path, "schema", f"expected {schema!r}, got {str(document.get('schema'))[:80]!r}")
    return upgrade(schema, document, path, current, upgraders)


def upgrade(
    schema: str,
    document: dict,
    path: Path | str,
    current: int,
    upgraders: Mapping[tuple[str, int], Upgrader],
    where: str = "schema_version",
) -> dict:
    """Bring a document to version `current` through the registered upgraders, one step at a time."""
    version = document.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise BundleError(path, where, f"expected an integer schema version, got {_json_type(version)}")
    if version > current:
        raise BundleError(
            path, where, f"{version} is newer than this attnwatch understands ({current}); upgrade attnwatch"
        )
    while version < current:
        step = upgraders.get((schema, version))
        if step is None:
            raise BundleError(path, where, f"unknown {schema} schema version {version} (no upgrader)")
        document = step(dict(document))
        new_version = document.get("schema_version")
        if new_version != version + 1:
            raise BundleError(path, where, f"upgrader from {schema} v{version} produced version {new_version!r}")
        version = new_version
    return document


def load_document(
    path: Path,
    cls: type,
    *,
    schema: str,
    current: int,
    upgraders: Mapping[tuple[str, int], Upgrader] | None = None,
    max_bytes: int = MAX_FILE_BYTES,
    text: TextRule | None = None,
) -> Any:
    """Read one schema-versioned JSON file whose top level is the dataclass `cls` (strict JSON)."""
    data, _ = read_json_file(Path(path), max_bytes)
    data = check_envelope(data, path, schema, current, upgraders or {})
    return build_dataclass(cls, data, path, "", text)


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
