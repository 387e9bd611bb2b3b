"""The direction of imports and the absence of import circles, read from the source with `ast`
(docs/design.md, "Layers and the direction of imports"): kernels/ and history/ import nothing
else of the project, app/ only history/, ci/ kernels/ and history/ (outside its command line only
history's pure part); history's roles keep their order; every import names `attnwatch.`; no
package imports a module of its own in a circle. scripts/import_graph.py is the checker; the planted trees below
show that it catches each kind of break, lazy imports included."""

from __future__ import annotations

import ast
import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "import_graph.py"
LAYERS = ("cli", "app", "ci", "history", "kernels")


@pytest.fixture(scope="module")
def graph():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def _tree(root: Path, files: dict[str, str]) -> Path:
    """A planted checkout; a file named by its layer (`ci/a.py`) is written where the layer really
    is (`attnwatch/ci/a.py`), as the top-level names are links to there."""
    for name, text in files.items():
        path = root / ("attnwatch/" + name if name.split("/")[0] in LAYERS else name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    for package in ("kernels", "ci", "history", "app"):
        (root / "attnwatch" / package).mkdir(parents=True, exist_ok=True)
        (root / "attnwatch" / package / "__init__.py").touch()
    return root


def test_every_package_imports_only_what_its_layer_allows(graph):
    assert sum(len(graph.package_sources(p)) for p in graph.PACKAGES) >= 80
    bad = [f"{imp.path.relative_to(ROOT)}:{imp.line} {imp.source} -> {imp.target}" for imp in graph.layer_violations()]
    assert bad == []


@pytest.mark.parametrize("package", ["kernels", "ci", "history", "app"])
def test_no_package_has_an_import_cycle(graph, package):
    assert graph.cycles(graph.import_graph(package)) == []


@pytest.mark.parametrize(
    ("path", "text", "target"),
    [
        ("kernels/a.py", "from attnwatch.ci import cli\n", "ci"),
        ("kernels/a.py", "def f():\n    import attnwatch.history.store.db\n", "history.store.db"),
        ("kernels/a.py", "from attnwatch.kernels.cases import Case\n", "kernels.cases"),  # itself, not relatively
        ("history/a.py", "from attnwatch.kernels.cases import Case\n", "kernels.cases"),
        ("history/a.py", "from attnwatch.app import ui\n", "app"),
        ("history/a.py", "from history.errors import HistoryError\n", "history.errors"),  # no attnwatch prefix
        (
            "history/contract/a.py",
            "from attnwatch.history.store import db\n",
            "history.store",
        ),  # the pure part, on the store
        ("history/sql/a.py", "from attnwatch.history.detection import scan\n", "history.detection"),
        ("app/a.py", "import attnwatch.kernels\n", "kernels"),
        ("app/a.py", "from attnwatch.ci.compare import stats\n", "ci.compare"),
        ("ci/a.py", "from attnwatch.app.data import store\n", "app.data"),
        ("ci/a.py", "from attnwatch.scripts import tool\n", "scripts"),
        ("ci/compare/a.py", "from attnwatch.history.store.db import connect\n", "history.store.db"),  # outside the CLI
    ],
)
def test_a_planted_upward_import_is_reported(graph, tmp_path, path, text, target):
    root = _tree(tmp_path, {path: text})
    found = [(imp.source, imp.target) for imp in graph.layer_violations(root)]
    assert found == [(path[:-3].replace("/", "."), target)]


def test_allowed_imports_are_not_reported(graph, tmp_path):
    root = _tree(
        tmp_path,
        {
            "ci/a.py": "from attnwatch.kernels import registry\nfrom attnwatch.history.contract import bundle\n",
            "attnwatch/cli/commands/b.py": "from attnwatch.history.store.db import connect\n",
            "app/a.py": "from attnwatch.history import sql\nimport streamlit\n",
            "history/store/a.py": "from attnwatch.history.contract import bundle\nfrom . import b\n",
            "history/store/b.py": "",
            "history/contract/bundle.py": "from attnwatch.history.analysis import statistics\n",
            "kernels/x.py": "from .cases import Case\n",
            "tests/t.py": "from attnwatch.history.store.db import connect\n",
        },
    )
    assert graph.layer_violations(root) == []


def test_every_layer_may_import_the_shared_toml_reader(graph, tmp_path):
    """attnwatch/toml_reader.py is a leaf of the package: kernels (absolutely), history, ci and
    app all read their TOML through it."""
    root = _tree(
        tmp_path,
        {
            "attnwatch/toml_reader.py": "import tomllib\n",
            "kernels/x.py": "from attnwatch.toml_reader import read_toml\n",
            "history/x.py": "from attnwatch import toml_reader\n",
            "history/analysis/x.py": "from attnwatch.toml_reader import read_toml\n",
            "ci/x.py": "from attnwatch.toml_reader import read_toml\n",
            "app/x.py": "from attnwatch.toml_reader import read_toml\n",
        },
    )
    assert graph.layer_violations(root) == []


def test_a_shared_leaf_that_imports_the_project_is_reported(graph, tmp_path):
    root = _tree(tmp_path, {"attnwatch/toml_reader.py": "from attnwatch.history.errors import HistoryError\n"})
    assert [(imp.source, imp.target) for imp in graph.layer_violations(root)] == [("toml_reader", "history.errors")]


def test_a_bare_project_import_in_tests_or_scripts_is_reported(graph, tmp_path):
    """A test importing `history.…` would load a second copy of a module the code imports as
    `attnwatch.history.…`: two classes of every error, two caches."""
    root = _tree(
        tmp_path,
        {
            "tests/t.py": "from history.errors import HistoryError\n",
            "scripts/s.py": "import attnwatch.cli.main\nfrom kernels import cases\n",
        },
    )
    assert sorted((imp.source, imp.target) for imp in graph.layer_violations(root)) == [
        ("scripts.s", "kernels"),
        ("tests.t", "history.errors"),
    ]


def test_a_planted_circle_through_a_lazy_import_is_found(graph, tmp_path):
    """The old kernels/ circle in miniature: the registry loads the variants lazily, a variant
    imports the compiler driver, the driver imports the registry for its record."""
    root = _tree(
        tmp_path,
        {
            "kernels/registry.py": "def load():\n    from . import variants\n",
            "kernels/variants/__init__.py": "from . import cuda\n",
            "kernels/variants/cuda.py": "from ..nvcc import compile\n",
            "kernels/nvcc.py": "from .registry import BuildReport\n",
            "kernels/shapes.py": "",
        },
    )
    assert graph.cycles(graph.import_graph("kernels", root)) == [
        ["kernels.nvcc", "kernels.registry", "kernels.variants", "kernels.variants.cuda"]
    ]


def test_relative_imports_resolve_to_their_package(graph, tmp_path):
    root = _tree(
        tmp_path,
        {
            "ci/x/__init__.py": "from .y import f\n",
            "ci/x/y.py": "from ..z import g\n",
            "ci/z.py": "from .x import y\n",
        },
    )
    edges = graph.import_graph("ci", root)
    assert edges["ci.x"] == {"ci.x.y"} and edges["ci.x.y"] == {"ci.z"} and edges["ci.z"] == {"ci.x.y"}
    assert graph.cycles(edges) == [["ci.x.y", "ci.z"]]


def test_the_script_exits_nonzero_on_a_break(graph, tmp_path, capsys):
    root = _tree(tmp_path, {"history/a.py": "from attnwatch.app import ui\n"})
    assert graph.main(["--root", str(root)]) == 1
    assert "history.a imports app" in capsys.readouterr().out
    assert graph.main([]) == 0


def _real_modules(root: Path) -> dict[str, Path]:
    """Every module of the package as a tool that does not follow symbolic links finds it:
    `attnwatch.ci.compare.stats` -> its file, walking the checkout without entering a link."""
    found: dict[str, Path] = {}
    for folder, dirs, files in os.walk(root / "attnwatch", followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            path = Path(folder) / name
            if name.endswith(".py") and not path.is_symlink():
                parts = path.relative_to(root).with_suffix("").parts
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _layer_arrows(root: Path) -> set[tuple[str, str]]:
    """(importing layer, imported layer) for every absolute `attnwatch.<layer>…` import that names a
    module found by `_real_modules`: what a structure drawing of the checkout shows."""
    modules = _real_modules(root)
    arrows = set()
    for source, path in modules.items():
        layer = (source.split(".") + [""])[1]
        if layer not in LAYERS:
            continue  # the package's own modules: the name's shim and the shared leaves
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for name in names:
                target = name.split(".")
                if len(target) > 1 and target[0] == "attnwatch" and target[1] in LAYERS and name in modules:
                    arrows.add((layer, target[1]))
    return {(a, b) for a, b in arrows if a != b}


def test_a_reader_that_does_not_follow_links_sees_the_layers_joined():
    """A structure drawing that does not follow symbolic links finds every layer's modules where
    they are (`attnwatch/<layer>/`), so it draws the real arrows between them: each the layers
    allow, and every arrow they declare. With the layers behind links, it saw islands."""
    arrows = _layer_arrows(ROOT)
    declared = {("app", "history"), ("ci", "history"), ("ci", "kernels")}
    allowed = declared | {("cli", layer) for layer in ("app", "ci", "history", "kernels")}
    # The command line starts the dashboard as a process (`python -m attnwatch.app.serve`), no import.
    assert allowed - {("cli", "app")} <= arrows <= allowed
