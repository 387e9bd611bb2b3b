"""`attnwatch affected` (ci/compare/affected.py) on real git repositories holding a copy of this
checkout: a README-only change sends nothing to the GPU; a one-line CUDA header change, exactly the
variants whose source includes it; a harness or pipeline file, every variant; and the GPU compare
builds only what the source fingerprints say differs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from affected_repos import change, clone, git, origin  # noqa: F401 - fixtures
from attnwatch.ci.compare.affected import SOURCE_UNCHANGED, affected, build_only_affected, missing_here

ROOT = Path(__file__).resolve().parent.parent
CUDA = {"cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync"}


def run_affected(repo: Path, tmp_path: Path, *extra: str, env: dict | None = None) -> tuple[dict, str, str]:
    """The command as the workflow runs it; (its JSON, what it printed, $GITHUB_OUTPUT)."""
    out, output = tmp_path / "affected.json", tmp_path / "github_output"
    output.write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "attnwatch", "affected", "--base", "origin/main", "--json", str(out), *extra],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "GITHUB_OUTPUT": str(output), **(env or {})},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(out.read_text()), done.stdout, output.read_text()


def test_a_readme_only_change_sends_nothing_to_the_gpu(clone, tmp_path):
    head = change(clone, "README.md", "\nA line of prose.\n")
    result, printed, output = run_affected(clone, tmp_path)
    assert result["gpu"] is False and result["changed"] == {} and result["everything"] is None
    assert result["head_sha"] == head and result["base_sha"] == git(clone, "rev-parse", "origin/main")
    assert len(result["variants"]) >= 20 and result["harness_files"] > 20  # what was compared
    assert "nothing the GPU runs changed" in printed
    assert "gpu=false" in output.splitlines()


def test_a_one_line_cuda_header_change_affects_exactly_the_variants_that_include_it(clone, tmp_path):
    change(clone, "kernels/cuda/wmma_attention.cuh", "// a one-line change\n")
    result, _, output = run_affected(clone, tmp_path)
    assert result["gpu"] is True and result["everything"] is None
    assert set(result["changed"]) == {"cuda_wmma", "cuda_wmma_cpasync"}  # cuda_scalar does not include it
    assert result["changed"]["cuda_wmma"] == "changed: kernels/cuda/wmma_attention.cuh"
    built = set(result["build"])
    assert built == {"cuda_wmma", "cuda_wmma_cpasync", result["reference"], *result["canary"]}
    assert "cuda_scalar" not in built or "cuda_scalar" in result["canary"]
    assert "gpu=true" in output.splitlines()


def test_a_header_every_cuda_source_includes_affects_them_all(clone, tmp_path):
    change(clone, "kernels/cuda/attention_common.cuh", "// a one-line change\n")
    result, _, _ = run_affected(clone, tmp_path)
    assert set(result["changed"]) == CUDA


def test_a_harness_file_change_builds_every_variant(clone, tmp_path):
    change(clone, "kernels/inputs.py", "# a comment\n")
    result, printed, _ = run_affected(clone, tmp_path)
    assert result["gpu"] is True and "kernels/inputs.py" in result["everything"]
    assert set(result["build"]) == set(result["variants"]) and not result["unchanged"]
    assert "every variant" in printed


def test_a_change_to_the_gpu_job_itself_goes_to_the_gpu(clone, tmp_path):
    change(clone, ".github/workflows/gpu-bench.yml", "# a comment\n")
    result, _, _ = run_affected(clone, tmp_path)
    assert result["gpu"] is True and ".github/workflows/gpu-bench.yml" in result["everything"]


def test_a_triton_table_change_affects_the_triton_variant_only(clone, tmp_path):
    change(clone, "kernels/triton/configs.toml", "# a comment\n")
    result, _, _ = run_affected(clone, tmp_path)
    assert set(result["changed"]) == {"triton_fa2"}


def test_a_base_whose_registry_cannot_be_read_builds_everything(tmp_path):
    base, head = tmp_path / "base", tmp_path / "head"
    for root in (base, head):
        shutil.copytree(ROOT / "kernels", root / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(ROOT / "ci", root / "ci", ignore=shutil.ignore_patterns("__pycache__"))
    (base / "kernels" / "registry.py").write_text(
        (base / "kernels" / "registry.py").read_text() + "\nraise SystemExit(3)\n"
    )
    # both checkouts' listings start at once; the head's, still running when the base's has
    # failed, is stopped rather than waited for or left behind
    (head / "kernels" / "registry.py").write_text(
        (head / "kernels" / "registry.py").read_text() + "\nimport time\ntime.sleep(60)\n"
    )
    started = time.monotonic()
    result = affected(base, head)
    assert result.gpu and result.build is None and result.everything
    assert time.monotonic() - started < 30 and not _children_naming(os.getpid(), str(head))


def _children_naming(pid: int, text: str) -> list[str]:
    """The processes whose parent is `pid` (/proc/<pid>/stat, field 4) and whose command line
    holds `text`: this test's listings only, not a server another test file's session fixture
    started in the same worker."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            command = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # ended while listed
        if int(fields[1]) == pid and text in command:
            found.append(stat.parent.name)
    return found


def _cases(names: list[str]) -> list[SimpleNamespace]:
    """Planned cases as the pre-filter reads them (their variant only)."""
    return [SimpleNamespace(variant=n, case_id=f"{n}|c") for n in names]


def test_the_compare_builds_only_the_variants_whose_sources_differ(clone):
    """compare's pre-filter (ci/compare/affected.build_only_affected) on the two checkouts: the
    unchanged variants are left out of the plan (neither built, measured nor checked) and reported
    as such; a variant the registry does not know (--variant-module) is kept."""
    change(clone, "kernels/cuda/wmma_attention.cuh", "// a one-line change\n")
    base = clone.parent / "base"
    git(clone, "worktree", "add", "--quiet", "--detach", str(base), "origin/main")
    planned = ["sdpa", "cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync", "triton_fa2", "my_extra_variant"]
    kept, left_out = build_only_affected(
        _cases(planned), {"base": base, "head": clone}, git(clone, "rev-parse", "HEAD"), log=lambda m: None
    )
    kept_names = {c.variant for c in kept}
    assert {"sdpa", "cuda_wmma", "cuda_wmma_cpasync", "my_extra_variant"} <= kept_names
    assert set(left_out) == set(planned) - kept_names and set(left_out.values()) == {SOURCE_UNCHANGED}
    canary = kept_names - {"sdpa", "cuda_wmma", "cuda_wmma_cpasync", "my_extra_variant"}
    assert len(canary) <= 1 and {"triton_fa2", "cuda_scalar"} <= set(left_out) | canary


def test_missing_here_names_the_tool_or_package_a_runner_lacks():
    tools = {"nvcc_version": "13.0", "triton_version": "3.6.0", "cupy_version": None, "packages.flash-attn-4": None}
    assert missing_here(["cuda", "nvcc", "cupy"], tools) == "cupy"
    assert missing_here(["hopper", "flash_attn_cute"], tools) == "flash_attn_cute"
    assert missing_here(["cuda", "hopper", "triton"], tools) is None  # device needs are the worker's to judge
    assert missing_here(["liger"], {**tools, "packages.liger-kernel": "0.5.2"}) is None


def test_the_canary_drawn_from_the_sources_is_one_this_runner_can_run():
    """fa4_sm90 drawn as the canary on an H100 without flash-attn-4 (verdict check at 86bacad) left
    the compare with no A/A canary: its worker found it unavailable. A head commit whose rotation
    puts a variant this machine cannot run first now draws the next one."""
    from attnwatch.ci.compare.select import canary_order
    from attnwatch.ci.fingerprint.source_print import registered, toolchain

    tools, listed = toolchain(), registered(ROOT)
    cannot = [n for n in listed.modules if missing_here(listed.needs[n], tools)]
    assert "fa4_sm90" in cannot or tools["packages.flash-attn-4"]  # this machine lacks flash-attn-4, or has it
    if not cannot:
        return
    rotation = next(f"head{k}" for k in range(10_000) if canary_order(list(listed.modules), f"head{k}")[0] in cannot)
    result = affected(ROOT, ROOT, head_sha=rotation)
    assert result.canary and not set(result.canary) & set(cannot), (result.canary, cannot)


def test_walks_sharing_one_snapshot_find_what_each_finds_alone():
    """checkout_prints reads the checkout once for every variant's walk (sources.Snapshot); each
    variant's fingerprint and files equal those of a walk of its own, and the harness's too."""
    from attnwatch.ci.fingerprint.source_print import checkout_prints, source_print
    from attnwatch.ci.fingerprint.sources import Snapshot, harness_closure

    root = Path(__file__).resolve().parent.parent
    libraries = {"torch": "x"}
    shared = Snapshot()
    found, prints = checkout_prints(root, libraries, snapshot=shared)
    assert len(prints) == len(found.modules) > 10
    for name, module in found.modules.items():
        alone = source_print(name, module, root, libraries)
        assert {k: prints[name].get(k) for k in alone} == alone, name
    together, apart = harness_closure(root, shared), harness_closure(root)
    assert (together.files, together.cuda, together.unknown) == (apart.files, apart.cuda, apart.unknown)
    assert len(apart.files) > 50
