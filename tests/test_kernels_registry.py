"""The variant registry: the docs' lists checked against it, integrity of every entry, the explicit import list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from attnwatch.kernels import registry
from attnwatch.kernels.availability import KNOWN_NEEDS, availability
from attnwatch.kernels.cases import DTYPES, Case
from attnwatch.kernels.operators import all_operators
from attnwatch.kernels.registry import FAMILIES, Prepared, Variant
from attnwatch.kernels.shapes import SHAPES, adhoc_shape

VARIANTS_DIR = Path(registry.__file__).with_name("variants")

ROOT = Path(__file__).resolve().parent.parent
# Where the docs list the built-in variants of an operator: (file, the text the list starts with,
# what ends it). The registry is the one declaration; these lists are prose, checked against it.
DOC_LISTS = (
    ("docs/design.md", "attention", "The built-in variants:", "\n\n"),
    ("docs/design.md", "rmsnorm", "Variants (`kernels/variants/rmsnorm_*.py`):", "\n\n"),
    ("docs/reference/kernels.md", "attention", "## Attention variants", "\n## "),
    ("docs/reference/kernels.md", "rmsnorm", "## RMSNorm variants", "\n## "),
)
_NAME = re.compile(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+|_<[a-z]+>)*)`")


def _listed_modules() -> set[str]:
    """Module names imported by kernels/variants/__init__.py (read as source, not executed)."""
    tree = ast.parse((VARIANTS_DIR / "__init__.py").read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:  # from . import x
            names.update(alias.name for alias in node.names)
    return names


def _doc_list(path: str, start: str, end: str) -> str:
    """The text of `path` from `start` (line breaks inside it read as spaces) up to `end`."""
    text = (ROOT / path).read_text(encoding="utf-8")
    found = re.search(r"\s+".join(map(re.escape, start.split())), text)
    assert found, f"{path}: no list starting {start!r}"
    stop = text.find(end, found.end())
    return text[found.start() : stop if stop != -1 else len(text)]


def _names_a_variant(token: str, name: str) -> bool:
    """A doc token names a variant by its name, or by a pattern: `cutlass_3k_<tile>`, every tile's."""
    pattern = re.sub(r"<[a-z]+>", "[a-z0-9_]+", token)
    return re.fullmatch(pattern, name) is not None


@pytest.mark.parametrize("path, operator, start, end", DOC_LISTS, ids=[f"{p}:{o}" for p, o, *_ in DOC_LISTS])
def test_the_docs_list_exactly_the_registered_variants(path, operator, start, end):
    """Each list names every registered variant of its operator, and no variant-like name (a
    snake_case name) that is not one: adding or removing a variant without its docs fails here."""
    tokens = set(_NAME.findall(_doc_list(path, start, end)))
    registered = [v.name for v in registry.all_variants() if v.operator == operator]
    missing = [name for name in registered if not any(_names_a_variant(t, name) for t in tokens)]
    unknown = [t for t in tokens if "_" in t and not any(_names_a_variant(t, name) for name in registered)]
    assert (missing, unknown) == ([], []), f"{path}: not listed {missing}; listed but not registered {unknown}"


def test_every_variant_module_is_in_the_explicit_list():
    files = {p.stem for p in VARIANTS_DIR.glob("*.py") if p.stem != "__init__"}
    listed = _listed_modules()
    assert files - listed == set(), "variant modules present but not imported by kernels/variants/__init__.py"
    assert listed - files == set(), "kernels/variants/__init__.py imports modules that do not exist"


def test_registered_names_are_unique_and_registering_twice_is_refused():
    variants = registry.all_variants()
    names = [v.name for v in variants]
    assert len(names) == len(set(names))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(variants[0])


def test_each_operator_s_baseline_is_a_registered_variant_of_it():
    assert registry.baseline("attention").name == "sdpa" == registry.reference().name
    assert {v.operator for v in registry.all_variants()} >= {"attention"}
    stray = Variant("stray_operator", "test", "d", prepare=lambda c, d, s: None, operator="no_such_operator")
    with pytest.raises(ValueError, match=r"^variant 'stray_operator': unknown operator 'no_such_operator'; known: "):
        registry.register(stray)
    assert "stray_operator" not in {v.name for v in registry.all_variants()}


def test_each_built_in_operator_s_references_are_registered_variants_of_it():
    """An operator's references are names (kernels/operators.py); a variant removed or renamed
    without them would leave a reference that is silently never measured."""
    built_in = {v.operator for v in registry.all_variants() if v.family != "test"}
    for operator in (op for op in all_operators() if op.name in built_in):
        for name in operator.references:
            assert registry.get(name).operator == operator.name, (operator.name, name)


def test_unknown_family_is_refused():
    with pytest.raises(ValueError, match="unknown family"):
        Variant("x", "nonsense", "d", prepare=lambda c, d, s: None)


def test_get_names_the_known_variants_when_missing():
    with pytest.raises(KeyError, match="known: .*sdpa"):
        registry.get("no_such_variant")


@pytest.mark.parametrize("variant", registry.all_variants(), ids=lambda v: v.name)
def test_entry_is_complete(variant):
    assert variant.family in FAMILIES and variant.family != "test"
    assert variant.description.strip() and variant.lineage.strip()
    assert variant.needs <= KNOWN_NEEDS, f"unknown needs {set(variant.needs) - KNOWN_NEEDS}"
    assert callable(variant.prepare)
    ok, reason = availability(variant)
    assert ok or reason, "an unavailable variant must say why"


UNSUPPORTED_PROBE_SHAPES = [
    SHAPES["l4_mission"],
    SHAPES["b4_h16_s1k_d128"],
    SHAPES["fa_s16384_d64"],
    adhoc_shape(1, 1, 777, 64),
    adhoc_shape(1, 1, 1, 64),
    adhoc_shape(1, 1, 77, 40),
]


@pytest.mark.parametrize("variant", registry.all_variants(), ids=lambda v: v.name)
def test_unsupported_is_declared_never_raised(variant):
    """`unsupported(case)` answers None or a reason for any case, on any machine."""
    if not availability(variant)[0]:
        pytest.skip(f"{variant.name} unavailable here: its constraints are probed where it runs")
    for shape in UNSUPPORTED_PROBE_SHAPES:
        for dtype in DTYPES:
            for causal in (False, True):
                reason = variant.unsupported(Case(variant.name, shape, dtype, causal))
                assert reason is None or (isinstance(reason, str) and reason.strip())


def test_prepared_defaults_leave_out_to_the_variant():
    prepared = Prepared(fn=lambda: None, q=None, k=None, v=None)
    assert prepared.out is None and prepared.info == {}


def test_registry_imports_on_a_host_without_torch_triton_or_cupy():
    """A dashboard host has none of them: listing and availability must still work."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "for m in ('torch', 'triton', 'cupy'): sys.modules[m] = None\n"
        "from attnwatch.kernels import registry\n"
        "from attnwatch.kernels.availability import availability\n"
        "names = [v.name for v in registry.all_variants()]\n"
        "print(len(names), availability('sdpa')[1])\n"
    )
    root = Path(registry.__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    count, reason = done.stdout.strip().split(" ", 1)
    assert int(count) == len(registry.all_variants())
    assert reason.startswith("torch is not importable")
