"""The float64 reference outputs, kept between jobs: they depend only on the case, never on the variant.

Every variant of a case is checked against the same float64 output of the same seeded inputs;
recomputing it in every job (and for every variant) repeats work whose answer is fixed by:

- the problem: the operator, its shape's dimensions, dtype and mode;
- the inputs: the seed, the input profile and the device type (CPU and CUDA generators give
  different streams, kernels.inputs);
- the code that makes them: a sha256 over the source of the operator's `make_inputs` and
  `reference64` modules and every module of this package they import, transitively, plus torch's
  version.

Those fields are the entry's key. An entry is used only for inputs that are exactly the
canonical ones (the operator's `make_inputs` of that seed, compared element for element): a
variant whose `prepare` makes its own inputs gets a reference computed from them, never a stored
one.

Storage is kernels.compile_cache's (`<cache root>/reference/<trust>`): the raw float64 bytes and
a metadata file holding the key fields, the shape and the bytes' sha256; the directory and both
files must be private to this user. A read is used only when the digest of the bytes read
matches, the metadata repeats exactly the key asked for and the byte count is the shape's; a
corrupt, truncated, foreign or tampered entry is a miss, recomputed and overwritten. A cache
that cannot be used (unsafe directory, full disk) costs only the recomputation.

Only references computed on a CPU are cached (`CACHED_DEVICES`). On a GPU the float64 reference
is cheaper to compute than to read back: on an H100 (2026-12-06, scripts/reference_cache_check.py
over the pr set, synchronised, medians of 5) it took 0.5-1.5 ms per case against 22-81 ms for a
cached read, 8 cases 0.009 s against 0.41 s, and it made 240 of a GPU runner's 248 MiB cache
root, which an ephemeral runner restores and saves in every job. On a CPU the cache pays: on the
2-core CI machine (the same script and day, the test suite running beside it) b4_h16_s1k took
2.8-4.1 s to compute against 0.33 s to read back, the 8 cases 15.3 s against 1.7 s.
Entries above `MAX_ENTRY_BYTES` are not stored either.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import inspect
import json
import math
import warnings
from pathlib import Path
from typing import Any

from .compile_cache import CacheEntryWarning, CompileCache, open_cache
from .inputs import input_profile

SCHEMA = "attnwatch.reference"
VERSION = 1
SUFFIX = ".f64"
KIND = "reference"  # the folder under the cache root
# 64 MiB: the largest entry stored. Chosen so the pr set's largest output (b4_h16_s1k, 32 MiB)
# is kept: on a CPU, the only device cached, computing it takes seconds (module doc).
MAX_ENTRY_BYTES = 64 << 20
CACHED_DEVICES = ("cpu",)  # where a stored reference beats computing it (module doc)
_PACKAGE = Path(__file__).resolve().parent


def _relative_imports(path: Path) -> list[Path]:
    """The files of this package that `path` imports relatively (module or function level)."""
    path = path.resolve()
    if not path.is_relative_to(_PACKAGE):
        return []
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[Path] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        base = path.parent
        for _ in range(node.level - 1):
            base = base.parent
        parts = node.module.split(".") if node.module else []
        names = [alias.name for alias in node.names]
        for candidate in [base.joinpath(*parts)] + [base.joinpath(*parts, name) for name in names]:
            for file in (candidate.with_suffix(".py"), candidate / "__init__.py"):
                if file.is_file() and file.resolve().is_relative_to(_PACKAGE):
                    found.append(file.resolve())
    return found


@functools.lru_cache(maxsize=None)
def code_digest(*start: Path) -> str:
    """sha256 over the source of `start` and every file of this package they import, transitively."""
    seen: set[Path] = set()
    todo = [Path(p).resolve() for p in start]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.add(path)
            todo.extend(_relative_imports(path))
    digest = hashlib.sha256()
    for path in sorted(seen):
        # A file of this package by its place in it (the same on every checkout); another (an
        # operator registered from outside) by its name.
        name = path.relative_to(_PACKAGE).as_posix() if path.is_relative_to(_PACKAGE) else path.name
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _source_file(fn: Any) -> Path | None:
    try:
        name = inspect.getsourcefile(fn)
    except TypeError:  # a builtin or C function: no source to key on
        return None
    return Path(name).resolve() if name and Path(name).is_file() else None


def key_fields(operator: Any, case: Any, seed: int, profile: str, device_type: str) -> dict[str, Any] | None:
    """Everything the reference output depends on (module doc), as the entry records it; None when
    the code that makes the inputs or the reference has no source file to key on (never cached)."""
    import torch

    inputs_source, reference_source = _source_file(operator.make_inputs), _source_file(operator.reference64)
    if inputs_source is None or reference_source is None:
        return None
    is_instance = dataclasses.is_dataclass(case.shape) and not isinstance(case.shape, type)
    shape = dataclasses.asdict(case.shape) if is_instance else {"repr": repr(case.shape)}
    dims = {name: value for name, value in shape.items() if name not in ("id", "source")}
    code = code_digest(inputs_source, reference_source)
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "operator": operator.name,
        "shape": dims,
        "dtype": case.dtype,
        "mode": case.mode,
        "seed": int(seed),
        "profile": profile,
        "device": device_type,
        "code": code,
        "torch": torch.__version__,
    }


def entry_key(fields: dict[str, Any]) -> str:
    """The entry's file name: the sha256 of its key fields."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


def _canonical(operator: Any, case: Any, inputs: tuple, seed: int, profile: str) -> bool:
    """Whether `inputs` are exactly the operator's own inputs of this seed (module doc)."""
    import torch

    try:
        with input_profile(profile):
            fresh = operator.make_inputs(case.shape, case.dtype, case.mode, inputs[0].device, seed)
    except Exception:  # inputs it cannot remake are not its own: computed, never looked up
        return False
    return len(fresh) == len(inputs) and all(
        a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(fresh, inputs)
    )


def _load(cache: CompileCache, key: str, fields: dict[str, Any], device: Any) -> Any | None:
    import torch

    found = cache.read_keyed(key, SUFFIX, fields)
    if found is None:
        return None
    data, meta = found
    path = cache.paths(key, SUFFIX)[0]
    shape = meta.get("shape")
    if (
        not isinstance(shape, list)
        or not all(isinstance(n, int) and n >= 0 for n in shape)
        or math.prod(shape) * 8 != len(data)
    ):
        warnings.warn(
            f"{path}: ignored, {len(data)} bytes do not hold a float64 tensor of shape {shape}; recomputing",
            CacheEntryWarning,
            stacklevel=3,
        )
        return None
    return torch.frombuffer(bytearray(data), dtype=torch.float64).reshape(shape).to(device)


def _store(cache: CompileCache, key: str, fields: dict[str, Any], ref: Any) -> None:
    cache.store_bytes(key, SUFFIX, ref.detach().to("cpu").contiguous().numpy().tobytes(), fields, shape=list(ref.shape))


def cached_reference(
    operator: Any, case: Any, inputs: tuple, seed: int, profile: str = "normal", *, directory: Path | None = None
) -> Any:
    """`operator.reference64(inputs, case.mode)`, from the cache when a verified entry of exactly
    these inputs is there, else computed and stored (module doc). `directory`: the cache folder
    (default: `<cache root>/reference/<trust>`)."""
    import torch

    expected = None
    if (
        inputs
        and all(isinstance(t, torch.Tensor) for t in inputs)
        and inputs[0].device.type in CACHED_DEVICES
        and _canonical(operator, case, inputs, seed, profile)
    ):
        expected = key_fields(operator, case, seed, profile, inputs[0].device.type)
    cache = open_cache(KIND, directory, "the reference cache") if expected is not None else None
    if cache is None or expected is None:
        return operator.reference64(inputs, case.mode)
    key = entry_key(expected)
    hit = _load(cache, key, expected, inputs[0].device)
    if hit is not None:
        return hit
    ref = operator.reference64(inputs, case.mode)
    if isinstance(ref, torch.Tensor) and ref.dtype == torch.float64 and ref.numel() * 8 <= MAX_ENTRY_BYTES:
        _store(cache, key, expected, ref)
    return ref
