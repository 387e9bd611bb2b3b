"""The project's import graph, read from the source: layer violations and import cycles.

The rules (docs/design.md, "Layers and the direction of imports"), as prefixes of what a module
may import from the project besides what its own rule names, the most specific rule winning:

  - `kernels` imports nothing else of the project but the shared leaves, and itself only
    relatively (a compare loads another revision's `kernels/` under another name:
    attnwatch._kernels_alias);
  - the shared leaves, modules of the package itself (`attnwatch/toml_reader.py`: the one TOML
    reader; `attnwatch/layout.py`: the checkout's top-level names), import nothing of the project,
    and every layer may import them;
  - `history`'s roles: `analysis` and `contract` are pure (no store), `store` may use the
    contract, `ingest`, `sql` and `detection` build on the store;
  - `app` imports `history`;
  - `ci` (measuring, and `ci.integration`: GitHub, comments, notifications) imports `kernels`
    and only the pure part of `history`;
  - `cli`, the command line, may use all of them; nothing else imports it;
  - every import of the project names it `attnwatch.…` (a bare `history.…` would load a second
    copy of the module in a checkout): `scripts` and `tests` are otherwise free.

Inside a package, modules must not import one another in a circle: a circle makes the import
order decide what works.

Every layer is a folder of the package (`attnwatch/ci`); the top-level `app`, `ci`, `history`
and `kernels` are links to them and are not read twice. Every `import` / `from … import` statement counts, at module level or inside a function (a
lazy import is still a dependency; it only hides the circle until run time). The source is
parsed with `ast`, nothing is imported, so this runs on a host without torch.

    python3 scripts/import_graph.py            # prints violations and cycles, exit 1 if any
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "attnwatch"
PACKAGES = ("kernels", "ci", "history", "app", "cli")
# history's top-level modules: shared leaves that every role may import.
# history.contract.names (the name rules, no project import) is one too: history.reproduce reads it.
_HISTORY_LEAVES = frozenset(
    {
        "history.errors",
        "history.temp_dirs",
        "history.links",
        "history.reproduce",
        "history.contract.names",
        "history.terminal_text",
        "history.crash_log",
    }
)
# Modules of the package itself (attnwatch/<name>.py) that import nothing of the project: every
# layer may import them, kernels too (absolutely: the compare child's attnwatch is this revision's).
SHARED_LEAVES = frozenset({"toml_reader", "layout"})
_PURE_HISTORY = _HISTORY_LEAVES | {"history.analysis", "history.contract"}
# What a module may import from the project besides its own rule's prefix; the longest matching
# source prefix decides.
ALLOWED: dict[str, frozenset[str]] = {
    "kernels": frozenset({"kernels"}),
    "history": _HISTORY_LEAVES,
    "history.analysis": _HISTORY_LEAVES | {"history.analysis"},
    "history.contract": _HISTORY_LEAVES | {"history.analysis", "history.contract"},
    "history.store": _HISTORY_LEAVES | {"history.contract", "history.store"},
    "history.ingest": _PURE_HISTORY | {"history.store", "history.ingest"},
    "history.sql": _HISTORY_LEAVES | {"history.store", "history.sql"},
    "history.detection": _PURE_HISTORY | {"history.store", "history.detection"},
    "app": frozenset({"app", "history"}),
    "ci": frozenset({"ci", "kernels"}) | _PURE_HISTORY,
    "cli": frozenset({"cli", "ci", "kernels", "history", "app"}),
}
PROJECT_TOP_LEVEL = frozenset(PACKAGES) | SHARED_LEAVES | {"scripts", "tests"}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def allowed_for(source: str) -> frozenset[str]:
    """The rule of the longest ALLOWED prefix of `source`, with the shared leaves."""
    best = max((p for p in ALLOWED if _under(source, p)), key=len)
    return ALLOWED[best] | SHARED_LEAVES


@dataclass(frozen=True)
class Import:
    """One import statement: the importing module, the imported module, where it stands."""

    source: str  # dotted module name, e.g. "kernels.nvcc"
    target: str  # dotted module name as resolved, e.g. "kernels.registry"
    path: Path
    line: int
    bare: bool = False  # named without the attnwatch prefix
    relative: bool = False


def module_name(path: Path, root: Path = ROOT) -> str:
    """`attnwatch/kernels/cuda/launch.py` -> `kernels.cuda.launch`, `attnwatch/toml_reader.py` ->
    `toml_reader`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[0] == NAMESPACE and len(parts) > 1 and parts[1] in set(PACKAGES) | SHARED_LEAVES:
        parts.pop(0)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_folder(package: str, root: Path = ROOT) -> Path:
    """A layer's folder in the package (`attnwatch/ci`); `scripts` and `tests` at the top."""
    return root / NAMESPACE / package if package in PACKAGES else root / package


def package_sources(package: str, root: Path = ROOT) -> list[Path]:
    return sorted(package_folder(package, root).rglob("*.py"))


def _resolve_relative(source: str, is_package: bool, level: int, module: str | None) -> str:
    base = source.split(".") if is_package else source.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every project import in one file, named without the `attnwatch.` prefix, with
    `from pkg import mod` resolved to `pkg.mod` when `mod` is a module or package in the tree."""
    source = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        relative = isinstance(node, ast.ImportFrom) and node.level > 0
        if isinstance(node, ast.Import):
            named = [alias.name for alias in node.names]
            targets = [_unprefixed(n) for n in named]
        elif isinstance(node, ast.ImportFrom):
            module = (
                node.module
                if node.level == 0
                else _resolve_relative(source, path.name == "__init__.py", node.level, node.module)
            )
            if not module:
                continue
            named = [module] * len(node.names)
            module = _unprefixed(module)
            targets = []
            for alias in node.names:
                if module == NAMESPACE:  # `from attnwatch import toml_reader`
                    targets.append(alias.name)
                    continue
                candidate = f"{module}.{alias.name}"
                top, *rest = candidate.split(".")
                as_path = package_folder(top, root).joinpath(*rest)
                is_module = as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file()
                targets.append(candidate if is_module else module)
        else:
            continue
        for name, target in zip(named, targets):
            if target.split(".")[0] in PROJECT_TOP_LEVEL and name.split(".")[0] != "tests":
                bare = not relative and not _under(name, NAMESPACE)
                found.append(Import(source, target, path, node.lineno, bare=bare, relative=relative))
    return found


def _unprefixed(name: str) -> str:
    return name[len(NAMESPACE) + 1 :] if name.startswith(NAMESPACE + ".") else name


def layer_violations(root: Path = ROOT) -> list[Import]:
    """Imports that cross a layer the wrong way (not allowed by the source's rule in ALLOWED),
    that name the project without the `attnwatch.` prefix, or that reach `kernels` from inside it
    other than relatively."""
    bad = []
    for package in PACKAGES:
        for path in package_sources(package, root):
            for imp in imports_of(path, root):
                allowed = allowed_for(imp.source)
                if imp.bare or not any(_under(imp.target, p) for p in allowed):
                    bad.append(imp)
                elif package == "kernels" and not imp.relative and imp.target not in SHARED_LEAVES:
                    bad.append(imp)
    for leaf in SHARED_LEAVES:
        path = root / NAMESPACE / f"{leaf}.py"
        if path.is_file():
            bad += imports_of(path, root)  # a leaf imports nothing of the project
    for free in ("scripts", "tests"):
        for path in package_sources(free, root):
            bad += [imp for imp in imports_of(path, root) if imp.bare and imp.target.split(".")[0] in PACKAGES]
    return bad


def import_graph(package: str, root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (edges to the package's own
    `__init__` are dropped when the importer is inside it: importing a submodule always runs
    its parents' `__init__`, which is not a circle of the code's making)."""
    graph: dict[str, set[str]] = {}
    for path in package_sources(package, root):
        source = module_name(path, root)
        graph.setdefault(source, set())
        for imp in imports_of(path, root):
            if imp.target.split(".")[0] != package or imp.target == source:
                continue
            if source.startswith(imp.target + "."):
                continue
            graph[source].add(imp.target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, 1972: one
    depth-first pass, O(V + E)); each is a set of modules that import one another in a circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    problems = 0
    for imp in layer_violations(args.root):
        how = " without the attnwatch. prefix" if imp.bare else ""
        print(f"{imp.path.relative_to(args.root)}:{imp.line}: {imp.source} imports {imp.target}{how}")
        problems += 1
    for package in PACKAGES:
        for component in cycles(import_graph(package, args.root)):
            print(f"import cycle in {package}/ ({len(component)} modules): {', '.join(component)}")
            problems += 1
    if not problems:
        print("imports follow the layers; no package has an import cycle")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
