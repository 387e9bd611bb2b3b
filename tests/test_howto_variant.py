"""docs/howto/add-a-kernel-variant.md followed in a copy of the checkout: the page's module and
its two lines in the explicit list make a variant that `attnwatch variants` lists and that
`attnwatch run` checks and times."""

from __future__ import annotations

import json

import pytest

from howto_support import code_blocks, copy_checkout, insert_after, run_in

PAGE = "add-a-kernel-variant.md"
NAME = "torch_einsum"


@pytest.fixture
def checkout_with_variant(tmp_path):
    """A copy of the checkout with the how-to's steps 1 and 2 done."""
    module, import_line, builtin_line = code_blocks(PAGE, "python")
    assert f'name="{NAME}"' in module
    copy = copy_checkout(tmp_path / "checkout")
    variants = copy / "kernels" / "variants"
    (variants / f"{NAME}.py").write_text(module, encoding="utf-8")
    insert_after(variants / "__init__.py", "from . import rmsnorm_torch", import_line)
    insert_after(variants / "__init__.py", "*rmsnorm_quack.VARIANTS", builtin_line)
    return copy


def test_the_variant_of_the_howto_is_listed(checkout_with_variant):
    done = run_in(checkout_with_variant, "-m", "attnwatch", "variants", "--json")
    assert done.returncode == 0, done.stderr
    listed = {v["name"]: v for v in json.loads(done.stdout)["variants"]}
    assert listed[NAME]["operator"] == "attention" and listed[NAME]["family"] == "torch"
    assert listed[NAME]["available"] is True and listed[NAME]["reason"] is None


@pytest.mark.slow
def test_the_variant_of_the_howto_is_checked_and_timed_on_the_cpu(checkout_with_variant, tmp_path):
    """Step 4, as the page writes it for a machine without a GPU (about 50 s on 2 cores)."""
    out = tmp_path / "bundle"
    done = run_in(checkout_with_variant, "-m", "attnwatch", "run", "--shapes", "cpu", "--variants", f"sdpa,{NAME}",
                  "--out", str(out), "--no-progress", "--commit", "0" * 40, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = json.loads((out / "outcomes.json").read_text())["cases"]
    ours = [c for c in outcomes if c["variant"] == NAME]
    assert ours and all(c["status"] == "ok" for c in ours)
    checks = [r for r in json.loads((out / "correctness.json").read_text())["records"] if r["variant"] == NAME]
    assert len(checks) == 3 * len(ours) and all(r["passed"] for r in checks)
