"""The project's import graph, read from the source: layer violations and import cycles.

The rules (docs/design.md, "Layers and the direction of imports"): `kernels` and `history`
import nothing else of the project, `app` imports only `history`, `ci` may import `kernels`
and `history`; `scripts` and `tests` are free. Inside a package, modules must not import one
another in a circle: a circle makes the import order decide what works.

Every `import` / `from … import` statement counts, at module level or inside a function (a
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
PACKAGES = ("kernels", "ci", "history", "app")
# What each package may import from the project, besides itself.
ALLOWED: dict[str, frozenset[str]] = {
    "kernels": frozenset(),
    "history": frozenset(),
    "app": frozenset({"history"}),
    "ci": frozenset({"kernels", "history"}),
}
PROJECT_TOP_LEVEL = frozenset(PACKAGES) | {"scripts", "tests"}


@dataclass(frozen=True)
class Import:
    """One import statement: the importing module, the imported module, where it stands."""

    source: str  # dotted module name, e.g. "kernels.nvcc"
    target: str  # dotted module name as resolved, e.g. "kernels.registry"
    path: Path
    line: int


def module_name(path: Path, root: Path = ROOT) -> str:
    """`kernels/cuda/launch.py` -> `kernels.cuda.launch`; a package's `__init__.py` -> the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_sources(package: str, root: Path = ROOT) -> list[Path]:
    return sorted((root / package).rglob("*.py"))


def _resolve_relative(source: str, is_package: bool, level: int, module: str | None) -> str:
    base = source.split(".") if is_package else source.split(".")[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports_of(path: Path, root: Path = ROOT) -> list[Import]:
    """Every project import in one file, with `from pkg import mod` resolved to `pkg.mod`
    when `mod` is a module or package in the tree."""
    source = module_name(path, root)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module if node.level == 0 else _resolve_relative(
                source, path.name == "__init__.py", node.level, node.module)
            if not module:
                continue
            targets = []
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                as_path = root.joinpath(*candidate.split("."))
                is_module = as_path.with_suffix(".py").is_file() or (as_path / "__init__.py").is_file()
                targets.append(candidate if is_module else module)
        else:
            continue
        for target in targets:
            if target.split(".")[0] in PROJECT_TOP_LEVEL:
                found.append(Import(source, target, path, node.lineno))
    return found


def layer_violations(root: Path = ROOT) -> list[Import]:
    """Imports that cross a layer the wrong way (an import of a package not in ALLOWED)."""
    bad = []
    for package in PACKAGES:
        for path in package_sources(package, root):
            for imp in imports_of(path, root):
                top = imp.target.split(".")[0]
                if top != package and top not in ALLOWED[package]:
                    bad.append(imp)
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
        print(f"{imp.path.relative_to(args.root)}:{imp.line}: {imp.source} imports {imp.target}")
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
