"""The files a module's behaviour comes from, found with `ast` (nothing is imported or executed).

From an entry module, every import that names the project (`attnwatch.kernels.cases`, the
top-level `kernels.cases` a compare worker aliases, or a relative `from ..x import y`) is resolved
to its file in the checkout being fingerprinted and followed, with the `__init__.py` of every
package on the way (importing a module runs them). Every data file (rules.toml [closure]: TOML,
JSON, CSV) in a module's folder is one it may read, also where the name is computed; so is a
file a string constant names relative to the module (`"../x.toml"`, `"cuda_wmma.cu"`). CUDA
files enter only by name, and their `#include "..."` headers are followed as nvcc finds them
(kernels/nvcc.local_headers): a built variant's CUDA files are what its nvcc key covers
(ci/fingerprint/variant.py), so a CUDA file beside a module some other variant imports (the
CUTLASS source beside kernels/cutlass/headers.py, which every variant's capability check
imports) does not tie that variant to it. Imports of anything else (torch, triton, the
standard library) are libraries, recorded by version (ci/fingerprint/variant.py).

What cannot be resolved is reported, never guessed: an import of a project module that does not
exist in the checkout, a package outside those allowed, a module that does not parse, or (for
a variant) a dynamic import whose target ast cannot see. Any of these makes the fingerprint
unknown, and an unknown variant is measured.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from attnwatch.layout import PACKAGE, top_level_name
from attnwatch.toml_reader import read_toml

RULES_FILE = Path(__file__).resolve().with_name("rules.toml")
PROJECT_PACKAGES = ("kernels", "ci", "history", "app")
_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
_DYNAMIC = {"import_module", "__import__"}


@lru_cache(maxsize=None)
def rules() -> dict:
    """rules.toml, read once."""
    return read_toml(RULES_FILE, "fingerprint rules", ValueError)


def file_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass
class Closure:
    """Files by label (the path relative to the checkout root, by its top-level name:
    attnwatch.layout; `external/<name>` for a module outside it), each with the sha256 of its content; which of them are CUDA; what was unresolved."""

    files: dict[str, str] = field(default_factory=dict)
    cuda: set[str] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)


class Snapshot:
    """What the walks of one look at a checkout share: resolved paths, file digests and each
    folder's files, each read once (a module's statements are parsed once per text: `_statements`).

    A checkout's variants share most of their modules (22 closures plus the harness in one
    `affected`), so without it every walk resolved, read and hashed the same files again. It
    assumes the files do not change while it is in use: make one per look, never keep one."""

    def __init__(self) -> None:
        self._resolved: dict[Path, Path] = {}
        self._digests: dict[Path, str] = {}
        self._listings: dict[Path, list[Path]] = {}

    def resolve(self, path: Path) -> Path:
        found = self._resolved.get(path)
        if found is None:
            found = self._resolved[path] = path.resolve()
        return found

    def digest(self, path: Path) -> str:
        """The sha256 of the file at `path` (resolved)."""
        found = self._digests.get(path)
        if found is None:
            found = self._digests[path] = file_digest(path)
        return found

    def files_beside(self, path: Path) -> list[Path]:
        """The files of the folder holding `path`, sorted."""
        folder = path.parent
        found = self._listings.get(folder)
        if found is None:
            found = self._listings[folder] = sorted(p for p in folder.iterdir() if p.is_file())
        return found


class _Walker:
    def __init__(
        self, root: Path, packages: tuple[str, ...], dynamic_is_unknown: bool, snapshot: Snapshot | None = None
    ) -> None:
        self.seen = snapshot or Snapshot()
        self.root = self.seen.resolve(root)
        self.package = self.root / PACKAGE  # importing its modules runs attnwatch/__init__.py: no code of a measurement
        self.packages = packages
        self.dynamic_is_unknown = dynamic_is_unknown
        closure = rules()["closure"]
        self.not_followed = {entry["path"] for entry in closure["not_followed"]}
        self.data_suffixes = tuple(closure["data_suffixes"])
        self.cuda_suffixes = tuple(closure["cuda_suffixes"])
        self.out = Closure()
        self._queue: list[Path] = []

    def label(self, path: Path) -> str:
        path = self.seen.resolve(path)
        try:
            return top_level_name(path.relative_to(self.root).as_posix())
        except ValueError:
            return f"external/{path.name}"

    def add_module(self, path: Path) -> None:
        path = self.seen.resolve(path)
        label = self.label(path)
        if label in self.out.files:
            return
        self.out.files[label] = self.seen.digest(path)
        if label not in self.not_followed:
            self._queue.append(path)
        if not label.startswith("external/"):
            for sibling in self.seen.files_beside(path):  # data beside a module, also where its name is computed
                if sibling.suffix in self.data_suffixes and sibling.suffix not in self.cuda_suffixes:
                    self.add_data(sibling)
            parent = path.parent  # importing a module runs its packages' __init__ first
            while parent not in (self.root, self.package) and self.root in parent.parents:
                init = parent / "__init__.py"
                if init.is_file():
                    self.add_module(init)
                parent = parent.parent

    def add_data(self, path: Path) -> None:
        label = self.label(path)
        if label in self.out.files:
            return
        self.out.files[label] = self.seen.digest(self.seen.resolve(path))
        if path.suffix in self.cuda_suffixes:
            self.out.cuda.add(label)
            for name in _INCLUDE_RE.findall(path.read_text(errors="replace")):
                header = path.parent / name
                if header.is_file():
                    self.add_data(self.seen.resolve(header))

    def run(self) -> Closure:
        while self._queue:
            self._scan(self._queue.pop())
        return self.out

    # -- one module ---------------------------------------------------------------------

    def _scan(self, path: Path) -> None:
        label = self.label(path)
        found = _statements(path.read_bytes())
        if isinstance(found, str):
            self.out.unknown.append(f"{label} does not parse: {found}")
            return
        for kind, *args in found:
            if kind == "import":
                self._absolute(args[0], args[1], label)
            elif kind == "relative":
                self._relative(path, args[0], args[1], args[2], label)
            elif kind == "text":
                self._maybe_data(path, args[0])
            elif self.dynamic_is_unknown:
                self.out.unknown.append(f"{label} imports a module by name at run time (line {args[0]})")

    def _maybe_data(self, module: Path, text: str) -> None:
        if len(text) > 200 or "\n" in text or not text.endswith(self.data_suffixes):
            return
        candidate = module.parent / text
        if candidate.is_file():
            self.add_data(self.seen.resolve(candidate))

    def _absolute(self, dotted: str, names: tuple[str, ...], where: str) -> None:
        parts = dotted.split(".")
        if parts[0] == "attnwatch":
            parts = parts[1:]
            if not parts:
                return  # the name's own package (a search-path shim), no code of a measurement
        if not parts or parts[0] not in PROJECT_PACKAGES:
            return  # a library: recorded by its version
        if parts[0] not in self.packages:
            self.out.unknown.append(f"{where} imports {'.'.join(parts)}, outside what this fingerprint covers")
            return
        self._resolved(self.root.joinpath(*parts), names, f"{where}: {'.'.join(parts)}")

    def _relative(self, module: Path, level: int, dotted: str | None, names: tuple[str, ...], where: str) -> None:
        base = module.parent
        for _ in range(level - 1):
            base = base.parent
        target = base.joinpath(*dotted.split(".")) if dotted else base
        self._resolved(target, names, f"{where}: {'.' * level}{dotted or ''}")

    def _resolved(self, target: Path, names: tuple[str, ...], what: str) -> None:
        module = _module_file(target)
        if module is None:
            self.out.unknown.append(f"{what} not found in the checkout")
            return
        self.add_module(module)
        if module.name == "__init__.py":  # `from package import submodule`
            for name in names:
                sub = _module_file(target / name)
                if sub is not None:
                    self.add_module(sub)


@lru_cache(maxsize=4096)
def _statements(source: bytes) -> tuple | str:
    """What a module's text says that a closure follows, parsed once per distinct text (the same
    modules recur in every variant's closure): ("import", dotted, names), ("relative", level,
    dotted, names), ("text", a string constant), ("dynamic", line) for an import of a computed name (one of a
    string literal is an "import"); a string when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return exc.msg if isinstance(exc, SyntaxError) else str(exc)
    out: list[tuple] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [("import", alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = tuple(a.name for a in node.names if a.name != "*")
            if node.level:
                out.append(("relative", node.level, node.module, names))
            elif node.module and node.module != "__future__":
                out.append(("import", node.module, names))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(("text", node.value))
        elif isinstance(node, ast.Call) and _called_name(node) in _DYNAMIC:
            named = node.args[0] if node.args else None
            if isinstance(named, ast.Constant) and isinstance(named.value, str) and not named.value.startswith("."):
                out.append(("import", named.value, ()))  # a literal name: the same as an import statement
            else:
                out.append(("dynamic", node.lineno))
    return tuple(out)


def _module_file(target: Path) -> Path | None:
    if target.with_suffix(".py").is_file():
        return target.with_suffix(".py")
    if (target / "__init__.py").is_file():
        return target / "__init__.py"
    return None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None


def module_closure(
    entries: list[Path],
    root: Path,
    *,
    packages: tuple[str, ...] = ("kernels",),
    dynamic_is_unknown: bool = True,
    snapshot: Snapshot | None = None,
) -> Closure:
    """The files `entries` (module files) depend on inside `root`, following imports of `packages`;
    `snapshot` shares the reading with the other walks of one look at the checkout."""
    walker = _Walker(root, packages, dynamic_is_unknown, snapshot)
    for entry in entries:
        walker.add_module(Path(entry))
    return walker.run()


def harness_closure(root: Path, snapshot: Snapshot | None = None) -> Closure:
    """The shared harness of the checkout at `root` (rules.toml [harness]): its entry modules and
    everything of the project they import, plus the listed files. A missing one is unknown."""
    harness = rules()["harness"]
    entries: list[Path] = []
    missing: list[str] = []
    for entry in harness["entries"]:
        path = root / entry["path"]
        if path.is_file():
            entries.append(path)
        else:
            missing.append(entry["path"])
    closure = module_closure(entries, root, packages=PROJECT_PACKAGES, dynamic_is_unknown=False, snapshot=snapshot)
    for entry in harness["paths"]:
        path = root / entry["path"]
        if path.is_file():
            closure.files.setdefault(entry["path"], file_digest(path))
        else:
            missing.append(entry["path"])
    closure.unknown += [f"{m} missing in this checkout" for m in missing]
    return closure
