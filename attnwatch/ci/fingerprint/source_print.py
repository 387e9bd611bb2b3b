"""A variant's source fingerprint: what decides its timed work, read from a checkout before anything is built.

Made on a CPU with no torch, Triton or GPU: the measuring worker's fingerprint (variant.py) needs
the builds, and building every variant on both sides is what a compare that changes nothing
spent its time on. Per variant it covers:

* `files`: the variant's module and everything of `kernels/` it imports, the data files and
  CUDA headers they name (sources.module_closure). Where a module names several CUDA sources
  and one of them is `<variant>.cu` (kernels/cuda: one source per variant), that source and the
  headers it includes stand for the variant's CUDA code, so a header only the WMMA sources
  include does not tie the scalar kernel to it; elsewhere every CUDA file the closure names
  counts (a CUTLASS tile variant is its shared source built with its own flags, which its
  module's tile table declares, in the closure). Build flags are code or data in the closure
  (kernels/nvcc.py, kernels/cutlass/tiles.toml);
* `libraries`: the toolchain this process sees (Python, nvcc when present, the installed torch,
  Triton, CuPy and optional packages by package metadata, nothing imported): both sides of one
  compare run in one environment, so this says what was compared rather than decides.

Which variants a checkout registers, their modules and operators, the reference and each
operator's baseline come from a child Python that imports the checkout's `kernels.registry`
alone (its variant modules import torch lazily, so this needs none of the GPU packages). A
checkout whose registry cannot be read has no source fingerprints: the GPU compare then builds
every variant and its workers' fingerprints decide, as before.
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from attnwatch.ci.fingerprint.sources import _INCLUDE_RE, Snapshot, file_digest, module_closure
from attnwatch.ci.fingerprint.variant import digest_of
from attnwatch.layout import top_level_name

LIST_TIMEOUT_S = 60
# Runs in a child with the checkout's root first on sys.path: its `kernels`, nothing of this checkout.
_LIST_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from kernels import registry
variants = []
for v in registry.all_variants():
    prepare = v.prepare
    name = getattr(prepare, "__module__", None) or getattr(getattr(prepare, "func", None), "__module__", None)
    module = getattr(sys.modules.get(name or ""), "__file__", None)
    variants.append({"name": v.name, "module": module, "operator": getattr(v, "operator", "attention"),
                     "needs": sorted(getattr(v, "needs", ()) or ())})
operators = sorted({v["operator"] for v in variants})
baselines = {}
for op in operators:
    try:
        baselines[op] = registry.baseline(op).name
    except Exception:
        pass
print(json.dumps({"variants": variants, "reference": registry.reference().name, "baselines": baselines}))
"""


@dataclass
class Registered:
    """What a checkout's registry says: variant -> (module file, operator), the reference, the baselines."""

    modules: dict[str, Path | None] = field(default_factory=dict)
    operators: dict[str, str] = field(default_factory=dict)
    # variant -> what it declares it needs (kernels.availability)
    needs: dict[str, list[str]] = field(default_factory=dict)
    reference: str | None = None
    baselines: dict[str, str] = field(default_factory=dict)


class RegistryUnreadable(RuntimeError):
    """The checkout's registry could not be listed (the message says why, in one line)."""


class RegistryListing:
    """The child Python listing one checkout's registry (module doc), started at once and read by
    `result()`: `affected` starts both checkouts' listings before it walks the harness, so the two
    children (0.3-0.6 s each, mostly imports) run beside that walk and each other instead of one
    after the other."""

    def __init__(self, root: Path, python: str | None = None) -> None:
        self.root = Path(root)
        self._failed: str | None = None
        self._child: subprocess.Popen | None = None
        try:
            self._child = subprocess.Popen(
                [python or sys.executable, "-I", "-B", "-c", _LIST_SCRIPT, str(self.root.resolve())],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=str(self.root),
            )
        except OSError as exc:
            self._failed = type(exc).__name__

    def close(self) -> None:
        """Stop the child if its result was never read (the caller gave up early)."""
        child = self._child
        if child is not None and child.returncode is None:
            child.kill()
            child.communicate()

    def result(self) -> Registered:
        """What the registry says; RegistryUnreadable (one line) when it could not be listed."""
        child = self._child
        if child is None:
            raise RegistryUnreadable(f"listing the variants of {self.root} failed: {self._failed}")
        try:
            stdout, stderr = child.communicate(timeout=LIST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.close()
            raise RegistryUnreadable(f"listing the variants of {self.root} failed: TimeoutExpired") from None
        if child.returncode != 0:
            last = (stderr.strip().splitlines() or ["no message"])[-1]
            raise RegistryUnreadable(f"listing the variants of {self.root} failed: {last}"[:300])
        try:
            found = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise RegistryUnreadable(f"listing the variants of {self.root} printed no JSON") from None
        out = Registered(reference=found.get("reference"), baselines=dict(found.get("baselines") or {}))
        for entry in found.get("variants") or []:
            out.modules[entry["name"]] = Path(entry["module"]) if entry.get("module") else None
            out.operators[entry["name"]] = entry.get("operator") or "attention"
            out.needs[entry["name"]] = [str(n) for n in entry.get("needs") or []]
        return out


def registered(root: Path, python: str | None = None) -> Registered:
    """The variants `root`'s kernels register, read by a child Python (module doc)."""
    return RegistryListing(root, python).result()


def toolchain() -> dict[str, str | None]:
    """The versions this process would build and run with (module doc, `libraries`)."""
    from attnwatch.kernels.optional_packages import installed_versions

    versions: dict[str, str | None] = {"python_version": platform.python_version(), "nvcc_version": _nvcc()}
    for key, names in (
        ("torch_version", ("torch",)),
        ("triton_version", ("triton",)),
        ("cupy_version", ("cupy-cuda13x", "cupy-cuda12x", "cupy")),
    ):
        versions[key] = next((v for v in map(_installed, names) if v), None)
    for name, version in sorted(installed_versions().items()):
        versions[f"packages.{name}"] = version
    return versions


def _installed(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _nvcc() -> str | None:
    """nvcc's release line when nvcc is on PATH, else None (a CPU runner has none)."""
    exe = shutil.which("nvcc")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in done.stdout.splitlines() if "release" in line]
    return (lines[-1] if lines else done.stdout.strip())[:200] or None


def source_print(name: str, module: Path | None, root: Path, libraries: dict, snapshot: Snapshot | None = None) -> dict:
    """One variant's source fingerprint in the checkout at `root` (module doc); `digest` None and
    `unknown` saying why when its module is missing or its closure has anything unresolved."""
    if module is None or not module.is_file():
        return {"digest": None, "unknown": "the module defining the variant was not found"}
    closure = module_closure([module], root, snapshot=snapshot)
    if closure.unknown:
        return {"digest": None, "unknown": "; ".join(closure.unknown)[:1000]}
    files = dict(closure.files)
    sources = [label for label in closure.cuda if label.endswith(".cu")]
    own = [label for label in sources if Path(label).stem == name]
    if len(sources) > 1 and own:  # one .cu per variant: the others and the headers only they include are not its
        kept = _with_headers(root, own[0])
        files = {label: sha for label, sha in files.items() if label not in closure.cuda or label in kept}
    parts = {"files": files, "libraries": libraries}
    return {"digest": digest_of(parts), "unknown": None, **parts}


def _with_headers(root: Path, source: str) -> set[str]:
    """`source` (relative to `root`) and the local headers it includes, transitively, as labels."""
    root = root.resolve()
    seen: set[str] = set()
    queue = [(root / source).resolve()]
    while queue:
        path = queue.pop()
        label = top_level_name(path.relative_to(root).as_posix()) if root in path.parents else path.name
        if label in seen or not path.is_file():
            continue
        seen.add(label)
        queue += [(path.parent / n).resolve() for n in _INCLUDE_RE.findall(path.read_text(errors="replace"))]
    return seen


def checkout_prints(
    root: Path,
    libraries: dict,
    python: str | None = None,
    snapshot: Snapshot | None = None,
    listing: RegistryListing | None = None,
) -> tuple[Registered, dict[str, dict]]:
    """The registry of the checkout at `root` and every registered variant's source fingerprint
    (with its `operator`, as the selection reads it); RegistryUnreadable when it cannot be listed.
    The variants' walks share one reading of the checkout (`snapshot`, or a new one); `listing`,
    one already started for `root`, is read instead of starting another."""
    found = (listing or RegistryListing(root, python)).result()
    snapshot = snapshot or Snapshot()
    prints = {}
    for name, module in found.modules.items():
        try:
            prints[name] = source_print(name, module, Path(root), libraries, snapshot)
        except (OSError, ValueError) as exc:  # a closure that cannot be read is unknown: built and measured
            prints[name] = {"digest": None, "unknown": f"fingerprinting failed: {type(exc).__name__}"}
        prints[name]["operator"] = found.operators[name]
    return found, prints


def file_prints(root: Path, paths: list[str]) -> dict[str, str | None]:
    """path -> sha256 of the file in `root` (None where absent), for files compared as they are."""
    return {p: file_digest(Path(root) / p) if (Path(root) / p).is_file() else None for p in paths}
