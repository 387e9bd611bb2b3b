"""docs/howto/add-a-kernel-variant.md followed in a copy of the checkout: the page's module, its
two lines in the explicit list and its doc entry make a variant that `attnwatch variants` lists,
that the checks against the registry (the docs' lists, chart colours) admit, and that
`attnwatch run` checks and times."""

from __future__ import annotations

import json
import re

import pytest

from howto_support import code_blocks, copy_checkout, insert_after, run_in

PAGE = "add-a-kernel-variant.md"
NAME = "torch_einsum"


@pytest.fixture
def checkout_with_variant(tmp_path):
    """A copy of the checkout with the how-to's steps 1, 2 and 5 done."""
    module, import_line, builtin_line = code_blocks(PAGE, "python")
    (doc_entry,) = code_blocks(PAGE, "text")
    assert f'name="{NAME}"' in module
    copy = copy_checkout(tmp_path / "checkout")
    variants = copy / "kernels" / "variants"
    (variants / f"{NAME}.py").write_text(module, encoding="utf-8")
    insert_after(variants / "__init__.py", "from . import rmsnorm_torch", import_line)
    insert_after(variants / "__init__.py", "*rmsnorm_quack.VARIANTS", builtin_line)
    for doc in ("docs/design.md", "docs/reference/kernels.md"):  # step 5: after torch_3op's entry
        text = (copy / doc).read_text(encoding="utf-8")
        text, found = re.subn(r"(`torch_3op` \([^)]*\))", lambda m: f"{m[1]}, {doc_entry.strip()}", text, count=1)
        assert found == 1, doc
        (copy / doc).write_text(text, encoding="utf-8")
    return copy


def test_the_variant_of_the_howto_is_listed(checkout_with_variant):
    done = run_in(checkout_with_variant, "-m", "attnwatch", "variants", "--json")
    assert done.returncode == 0, done.stderr
    listed = {v["name"]: v for v in json.loads(done.stdout)["variants"]}
    assert listed[NAME]["operator"] == "attention" and listed[NAME]["family"] == "torch"
    assert listed[NAME]["available"] is True and listed[NAME]["reason"] is None


def test_the_checks_against_the_registry_admit_the_documented_variant(checkout_with_variant):
    done = run_in(
        checkout_with_variant,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "tests/test_kernels_registry.py::test_the_docs_list_exactly_the_registered_variants",
        "tests/test_app_trend_chart.py::test_every_registered_variant_has_a_colour_no_other_variant_of_its_operator_has",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^5 passed", done.stdout, re.MULTILINE), done.stdout  # 4 doc lists, 1 colour check


@pytest.mark.slow
def test_the_variant_of_the_howto_is_checked_and_timed_on_the_cpu(checkout_with_variant, tmp_path):
    """Step 4, as the page writes it for a machine without a GPU (about 50 s on 2 cores)."""
    out = tmp_path / "bundle"
    done = run_in(
        checkout_with_variant,
        "-m",
        "attnwatch",
        "run",
        "--shapes",
        "cpu",
        "--variants",
        f"sdpa,{NAME}",
        "--out",
        str(out),
        "--no-progress",
        "--commit",
        "0" * 40,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = json.loads((out / "outcomes.json").read_text())["cases"]
    ours = [c for c in outcomes if c["variant"] == NAME]
    assert ours and all(c["status"] == "ok" for c in ours)
    checks = [r for r in json.loads((out / "correctness.json").read_text())["records"] if r["variant"] == NAME]
    assert len(checks) == 3 * len(ours) and all(r["passed"] for r in checks)
