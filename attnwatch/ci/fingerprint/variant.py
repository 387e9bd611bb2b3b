"""One variant's fingerprint, computed in the measuring worker of each side of a compare.

The worker has imported its own revision's `kernels` and built its variants (ci/workers/server.py),
so it fingerprints exactly what it will time:

* `files`: the variant's module and everything of `kernels/` it imports, with the data files
  and CUDA headers they name (ci/fingerprint/sources.py), by content;
* `builds`: its build records without their volatile fields (rules.toml [builds]): nvcc's source
  hash (the cache key of its cubin or shared object: sources, headers, flags, target, nvcc),
  ptxas's resources, the Triton configurations it compiled. Where every build of the variant
  carries a source hash, that key stands for its CUDA files, so a module naming several .cu
  files (kernels/cuda/launch.py) does not tie its variants together;
* `binaries`: the sha256 of each compiled cubin or shared object the builds produced, read from
  the compile cache's entry for the build's key (kernels.compile_cache records it when it
  stores the binary and checks it on every hit), so two sides agree on a variant only when they
  would launch byte-identical machine code; a keyed build whose entry is not in this process's
  cache makes the variant unknown (measured). Triton's compiled kernels are not hashed: the
  Triton source, its configuration tables and the Triton version stand for them (the cubin
  digest its build record carries per configuration is volatile: ptxas writes the source
  file's path and time into the line table, so two checkouts' cubins of one source differ);
* `libraries`: the versions this process runs with (torch, Triton, CUDA, CuPy, nvcc, driver,
  Python, GPU, and each optional package the variants import: flash-attn-4, the CuTe DSL, ...,
  as `packages.<distribution>`, None where not installed), stated rather than assumed equal;
* `settings`: the plan's timing and correctness settings and the variant's case ids.

`digest` is the sha256 of all five. `code` is the sha256 of what the variant's own code decides:
its files, binaries and build records without their chosen configuration, so that a run's
history tells a code change apart from a library upgrade or another configuration pick
(history/analysis/attribution.py). A variant whose module cannot be found, or whose closure
has anything unresolved, has no digest and says why (`unknown`): it is measured.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from attnwatch.ci.fingerprint.sources import module_closure, rules
from attnwatch.history.contract.checks import read_json_file
from attnwatch.history.errors import BundleError

LIBRARY_FIELDS = (
    "python_version",
    "torch_version",
    "triton_version",
    "cuda_version",
    "cupy_version",
    "nvcc_version",
    "driver_version",
    "gpu_name",
    "device_kind",
    "packages",
)


def library_versions(environment: dict) -> dict:
    """The `libraries` part of a fingerprint from a captured environment: LIBRARY_FIELDS, with
    `packages` (distribution -> version, history.contract.bundle.Environment) flattened to one
    `packages.<distribution>` entry each, so a difference names the package."""
    libraries = {k: environment.get(k) for k in LIBRARY_FIELDS if k != "packages"}
    for name, version in sorted((environment.get("packages") or {}).items()):
        libraries[f"packages.{name}"] = version
    return libraries


def digest_of(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def stable_build(record: dict) -> dict:
    """A build record without what differs between two builds of one binary (rules.toml
    [builds] volatile: a key, or a dotted path where `*` stands for every key)."""
    stable = record
    for entry in rules()["builds"]["volatile"]:
        stable = _without(stable, entry["field"].split("."))
    return stable


def _without(value: Any, path: list[str]) -> Any:
    """`value` (not changed) less what `path` names in it; what is not a dict along it stays."""
    if not isinstance(value, dict) or not path:
        return value
    head, rest = path[0], path[1:]
    if not rest:
        return {k: v for k, v in value.items() if k != head}
    return {k: (_without(v, rest) if head in ("*", k) else v) for k, v in value.items()}


def variant_fingerprint(
    module_file: Path | None, root: Path, *, builds: list[dict], libraries: dict, settings: dict
) -> dict:
    """The fingerprint of one variant whose module is `module_file`, in the checkout at `root`."""
    if module_file is None or not Path(module_file).is_file():
        return {"digest": None, "unknown": "the module defining the variant was not found"}
    closure = module_closure([Path(module_file)], root)
    if closure.unknown:
        return {"digest": None, "unknown": "; ".join(closure.unknown)[:1000]}
    stable = [stable_build(b) for b in builds]
    keyed = bool(stable) and all(b.get("ok") and b.get("source_hash") for b in stable)
    files = {label: sha for label, sha in closure.files.items() if not (keyed and label in closure.cuda)}
    binaries = binary_digests(stable)
    if binaries is None:
        return {"digest": None, "unknown": "a compiled binary is not in this process's compile cache"}
    parts = {"files": files, "builds": stable, "binaries": binaries, "libraries": libraries, "settings": settings}
    return {"digest": digest_of(parts), "code": code_digest(files, binaries, stable), "unknown": None, **parts}


def code_digest(files: dict, binaries: dict, builds: list[dict]) -> str:
    """The `code` part of a fingerprint (module doc): files, binaries, builds less `config`."""
    return digest_of(
        {
            "files": files,
            "binaries": binaries,
            "builds": [{k: v for k, v in b.items() if k != "config"} for b in builds],
        }
    )


def binary_digests(builds: list[dict], cache_dir: Path | None = None) -> dict[str, str] | None:
    """nvcc source hash -> the sha256 of the binary cached under it, for every keyed build; None
    when a keyed build's cache entry is missing or unreadable (module doc, `binaries`)."""
    from attnwatch.kernels.compile_cache import DIGEST_FIELD, default_cache_dir

    root = Path(cache_dir) if cache_dir is not None else default_cache_dir("nvcc")
    found = {}
    for key in sorted({b["source_hash"] for b in builds if b.get("ok") and b.get("source_hash")}):
        try:
            meta, _ = read_json_file(root / f"{key}.json")  # the strict reader (history.contract.json_limits)
        except (OSError, BundleError):
            return None
        digest = meta.get(DIGEST_FIELD) if isinstance(meta, dict) else None
        if not isinstance(digest, str):
            return None
        found[key] = digest
    return found


def _module_file(variant: Any) -> Path | None:
    prepare = getattr(variant, "prepare", None)
    name = getattr(prepare, "__module__", None) or getattr(getattr(prepare, "func", None), "__module__", None)
    module = sys.modules.get(name or "")
    found = getattr(module, "__file__", None)
    return Path(found) if found else None


def plan_fingerprints(plan: Any, builds: list[dict], environment: dict) -> dict[str, dict]:
    """{variant: fingerprint} for every variant of `plan`, in this process (a compare worker)."""
    from attnwatch.ci.kernels_api import kernels_api, kernels_dir

    root = kernels_dir().parent
    libraries = library_versions(environment)
    common = {
        "timing": plan.timing,
        "device_kind": plan.device_kind,
        "correctness": plan.correctness,
        "correctness_seeds": list(plan.correctness_seeds),
        "timing_seed": plan.timing_seed,
    }
    api, out = kernels_api(), {}
    operators = {c.variant: c.operator for c in plan.cases}
    for name in operators:
        try:
            variant = api.get(name)
        except KeyError:
            out[name] = {"digest": None, "unknown": "not registered on this side", "operator": operators[name]}
            continue
        settings = {**common, "cases": sorted(c.case_id for c in plan.cases if c.variant == name)}
        try:
            out[name] = variant_fingerprint(
                _module_file(variant),
                root,
                libraries=libraries,
                settings=settings,
                builds=[b for b in builds if b.get("variant") == name],
            )
        except Exception as exc:  # noqa: BLE001 - an unknown fingerprint is measured, never a lost compare
            out[name] = {"digest": None, "unknown": f"fingerprinting failed: {type(exc).__name__}"}
        out[name]["operator"] = operators[name]  # which baseline its gaps need (ci/compare/select.py)
        out[name]["available"] = _available(api, variant)
    return out


def _available(api: Any, variant: Any) -> bool:
    """Whether this worker can run `variant` at all (a canary must be one that is timed)."""
    try:
        return bool(api.availability(variant)[0])
    except Exception:  # noqa: BLE001 - an availability probe that fails is "not available here"
        return False
