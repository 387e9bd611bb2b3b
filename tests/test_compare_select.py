"""Which variants a compare measures (ci/compare/select.py) from real fingerprints of two copies of
this checkout (ci/fingerprint), one of them changed: a variant's source, a header a CUDA variant
includes, a Triton config table, the engine, nothing; and the comment and compare.json's account."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.ci.plan import operator_baselines

from attnwatch.ci.integration.comment.render import render_comment
from attnwatch.ci.compare.affected import SOURCE_UNCHANGED
from attnwatch.ci.compare.report import ReportError, load_report, write_report
from attnwatch.ci.compare.select import (
    BASELINE_REASON,
    CANARY,
    REFERENCE,
    UNCHANGED,
    difference,
    harness_change,
    head_checks,
    never_canary,
    profiled_cases,
    select_variants,
    selection_record,
)
from attnwatch.ci.fingerprint.source_print import source_print
from attnwatch.ci.fingerprint.sources import harness_closure, module_closure, rules
from attnwatch.ci.fingerprint.variant import library_versions, variant_fingerprint
from attnwatch.kernels.registry import all_variants, reference
from attnwatch.layout import top_level_name
from compare_factory import make_report

REPO_ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = {"torch_version": "2.11.0", "triton_version": "3.6.0", "nvcc_version": "13.0"}
CUDA = ("cuda_scalar", "cuda_wmma", "cuda_wmma_cpasync")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """A copy of what a fingerprint reads of this checkout (kernels/, ci/, history/)."""
    root = tmp_path_factory.mktemp("checkout")
    for part in ("kernels", "ci", "history"):
        shutil.copytree(REPO_ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture
def sides(tree, tmp_path) -> tuple[Path, Path]:
    """(base, head): two identical copies; a test changes the head."""
    out = []
    for name in ("base", "head"):
        shutil.copytree(tree, tmp_path / name)
        out.append(tmp_path / name)
    return out[0], out[1]


def _module(variant) -> str:
    """The variant's module, relative to the checkout root, as a fingerprint names it (`kernels/…`)."""
    return top_level_name(Path(sys.modules[variant.prepare.__module__].__file__).resolve().relative_to(REPO_ROOT))


def _nvcc_key(root: Path, name: str) -> str:
    """nvcc's cache key of the variant's cubin in `root` (kernels.nvcc.source_hash, the real function)."""
    from attnwatch.kernels.cuda.launch import SPECS
    from attnwatch.kernels.nvcc import source_hash

    return source_hash(
        [root / "kernels" / "cuda" / SPECS[name].path.name], output="cubin", arch="sm_90", flags=(), include_dirs=()
    )


def _cache_binary(key: str, content: str = "") -> None:
    """A compile-cache entry's metadata for `key`, as kernels.compile_cache writes it: the sha256 of
    the stored binary (here of a stand-in text; `content` changes it, as a non-deterministic build would)."""
    import hashlib

    from attnwatch.kernels.compile_cache import DIGEST_FIELD, default_cache_dir

    root = default_cache_dir("nvcc")
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{key}.json").write_text(json.dumps({DIGEST_FIELD: hashlib.sha256((key + content).encode()).hexdigest()}))


def fingerprints(root: Path, *, keyed: bool = False, libraries: dict = LIBRARIES) -> dict[str, dict]:
    """Every registered variant's fingerprint in `root`, as a worker makes it (ci/fingerprint/variant.py);
    `keyed`: the CUDA variants built, each build record carrying nvcc's source hash and its binary cached."""
    out = {}
    for v in all_variants():
        builds = (
            [{"variant": v.name, "ok": True, "source_hash": _nvcc_key(root, v.name), "compile_seconds": 1.0}]
            if keyed and v.name in CUDA
            else []
        )
        for build in builds:
            if not (default_cache_dir_has(build["source_hash"])):
                _cache_binary(build["source_hash"])
        out[v.name] = variant_fingerprint(
            root / _module(v), root, builds=builds, libraries=libraries, settings={"cases": [v.name]}
        )
        out[v.name]["operator"] = v.operator  # as plan_fingerprints records it from the plan's cases
    return out


def select(base: Path, head: Path, *, keyed: bool = False, rotation: str = "c0ffee", canary: int = 1, **kw):
    hb, hh = harness_closure(base), harness_closure(head)
    return select_by_fingerprints(
        fingerprints(base, keyed=keyed),
        fingerprints(head, keyed=keyed, **kw),
        rotation=rotation,
        canary=canary,
        everything=harness_change(hb.files, hh.files, hb.unknown, hh.unknown),
    )


def select_by_fingerprints(base: dict, head: dict, *, rotation: str, canary: int = 1, everything: str | None = None):
    """select()'s decision on fingerprints already made (a loop over rotations makes them once)."""
    return select_variants(
        [v.name for v in all_variants()],
        base,
        head,
        reference=reference().name,
        baselines=operator_baselines(),
        rotation=rotation,
        canary=canary,
        everything=everything,
    )


def changed(selection) -> set[str]:
    return {v for v, why in selection.measured.items() if why.startswith("changed")}


def default_cache_dir_has(key: str) -> bool:
    from attnwatch.kernels.compile_cache import default_cache_dir

    return (default_cache_dir("nvcc") / f"{key}.json").exists()


@pytest.fixture
def stand_in_nvcc(tmp_path, monkeypatch):
    """An `nvcc` that only answers --version: nvcc's key needs the version text, not a compiler;
    and a compile cache of its own (ATTNWATCH_CACHE) for the binaries' digests."""
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "cache"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    nvcc = bin_dir / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.48'\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _changed_variant(sides: tuple[Path, Path], name: str) -> tuple[Path, Path]:
    """(base, head) after a comment is added to the head's module of variant `name`."""
    source = sides[1] / "kernels" / "variants" / f"{name}.py"
    source.write_text(source.read_text() + "\n# a change\n")
    return sides


def test_nothing_changed_measures_only_the_reference_and_the_canary(sides):
    """The A/A: sdpa and the canary; RMSNorm's baseline serves no changed variant, so it is not timed."""
    selection = select(*sides)
    assert selection.everything is None and not changed(selection)
    assert selection.measured[reference().name] == REFERENCE
    assert len(selection.canary) == 1 and selection.measured[selection.canary[0]] == CANARY
    assert set(selection.measured) == {reference().name, *selection.canary}
    assert set(selection.skipped) == {v.name for v in all_variants()} - set(selection.measured)
    assert set(selection.skipped.values()) == {UNCHANGED}
    assert selection.reference == reference().name  # compare.json's "reference": the baselines measured
    rmsnorm = operator_baselines()["rmsnorm"]
    base, head = fingerprints(sides[0]), fingerprints(sides[1])  # the trees are not changed below
    for k in range(40):  # whichever canary is drawn, RMSNorm's baseline comes only as a canary itself
        drawn = select_by_fingerprints(base, head, rotation=f"{k:040x}")
        assert rmsnorm not in drawn.measured or drawn.canary == [rmsnorm]


def test_a_variant_source_change_measures_that_variant(sides):
    """A change to one attention variant measures it and sdpa, not RMSNorm's baseline."""
    selection = select(*_changed_variant(sides, "torch_3op"))
    assert changed(selection) == {"torch_3op"}
    assert selection.measured["torch_3op"] == "changed: kernels/variants/torch_3op.py"
    assert set(selection.measured) == {"torch_3op", reference().name, *selection.canary}
    rmsnorm = operator_baselines()["rmsnorm"]
    assert rmsnorm in selection.canary or selection.skipped[rmsnorm] == UNCHANGED


def test_only_the_heads_changed_variants_are_checked_for_correctness(sides):
    """The reference, the baselines and the canary run identical code: only the changed variant's
    head is checked; when everything is measured (--all, a harness change) every one is."""
    base, head = _changed_variant(sides, "rmsnorm_triton")
    fb, fh = fingerprints(base), fingerprints(head)
    selection = select_by_fingerprints(fb, fh, rotation="c0ffee")
    assert len(selection.measured) == 4  # the change, its baseline, the reference, the canary
    assert head_checks(selection, fb, fh) == ["rmsnorm_triton"]
    forced = select_by_fingerprints(fb, fh, rotation="c0ffee", everything="--all")
    assert head_checks(forced, fb, fh) == list(forced.measured) == [v.name for v in all_variants()]


def test_a_change_to_an_rmsnorm_variant_measures_its_baseline_and_the_reference(sides):
    selection = select(*_changed_variant(sides, "rmsnorm_triton"))
    assert changed(selection) == {"rmsnorm_triton"}
    assert selection.measured["rmsnorm_torch"] == BASELINE_REASON.format(operator="rmsnorm", changed="rmsnorm_triton")
    assert selection.measured[reference().name] == REFERENCE
    assert set(selection.measured) == {"rmsnorm_triton", "rmsnorm_torch", reference().name, *selection.canary}
    assert selection.reference == f"{reference().name}, rmsnorm_torch"


def test_a_canary_of_another_operator_does_not_measure_its_baseline(tree):
    """Only a change serves a baseline: an RMSNorm canary is timed without rmsnorm_torch."""
    same = fingerprints(tree)
    rmsnorm = [n for n, fp in same.items() if fp["operator"] == "rmsnorm" and n not in operator_baselines().values()]
    only = {n: fp for n, fp in same.items() if n in (*rmsnorm, "rmsnorm_torch", reference().name)}
    for k in range(8):
        selection = select_variants(
            list(only),
            only,
            only,
            reference=reference().name,
            baselines=operator_baselines(),
            rotation=f"{k:040x}",
            canary=1,
        )
        assert "rmsnorm_torch" not in selection.measured or selection.canary == ["rmsnorm_torch"]
    # a changed variant whose operator is not known needs every baseline
    unknown = {n: {k: v for k, v in fp.items() if k != "operator"} for n, fp in only.items()}
    head = {**unknown, rmsnorm[0]: {**unknown[rmsnorm[0]], "digest": "another"}}
    assert (
        "rmsnorm_torch"
        in select_variants(
            list(only), unknown, head, reference=reference().name, baselines=operator_baselines(), rotation="", canary=0
        ).measured
    )


def test_a_module_a_variant_imports_is_followed(sides):
    """kernels/triton/fa2_fwd.py is imported lazily, inside a function, two packages away."""
    base, head = sides
    source = head / "kernels" / "triton" / "fa2_fwd.py"
    source.write_text(source.read_text() + "\n# a change\n")
    assert changed(select(base, head)) == {"triton_fa2"}


def test_a_header_change_measures_the_cuda_variants_that_include_it(sides, stand_in_nvcc):
    base, head = sides
    header = head / "kernels" / "cuda" / "wmma_attention.cuh"
    header.write_text(header.read_text() + "\n// a change\n")
    selection = select(base, head, keyed=True)
    assert changed(selection) == {"cuda_wmma", "cuda_wmma_cpasync"}  # cuda_scalar does not include it
    assert selection.measured["cuda_wmma"] == "changed: builds, binaries"  # a new key, its own cubin
    # without build records nothing vouches for which .cu a variant compiles: every CUDA file counts
    assert changed(select(base, head)) == set(CUDA)


def test_a_header_every_cuda_source_includes_measures_them_all(sides, stand_in_nvcc):
    base, head = sides
    header = head / "kernels" / "cuda" / "attention_common.cuh"
    header.write_text(header.read_text() + "\n// a change\n")
    assert changed(select(base, head, keyed=True)) == set(CUDA)


def test_a_triton_config_entry_change_measures_the_triton_variant(sides):
    base, head = sides
    table = head / "kernels" / "triton" / "configs.toml"
    text = table.read_text()
    assert "num_warps = 4" in text
    table.write_text(text.replace("num_warps = 4", "num_warps = 8", 1))
    selection = select(base, head)
    assert changed(selection) == {"triton_fa2"}
    assert selection.measured["triton_fa2"] == "changed: kernels/triton/configs.toml"


def test_a_data_file_beside_a_module_counts_even_when_its_name_is_computed(sides):
    base, head = sides
    (head / "kernels" / "triton" / "extra_configs.toml").write_text("# read by a name the code computes\n")
    assert changed(select(base, head)) == {"triton_fa2"}


def test_a_cutlass_source_change_measures_the_cutlass_variants_only(sides):
    """Every variant imports kernels/cutlass/headers.py (the capability check): the .cu beside it is
    still only the CUTLASS variants' (named by kernels/cutlass/build.py)."""
    base, head = sides
    source = head / "kernels" / "cutlass" / "attention_3k.cu"
    source.write_text(source.read_text() + "\n// a change\n")
    # (rmsnorm_quack is of the cutlass family too, but quack's CuTe DSL is a library: no .cu of ours)
    assert changed(select(base, head)) == {v.name for v in all_variants() if v.name.startswith("cutlass_3k")}


def test_an_engine_change_measures_everything(sides):
    base, head = sides
    engine = head / "ci" / "engine" / "group.py"
    engine.write_text(engine.read_text() + "\n# a comment-only change\n")
    selection = select(base, head)
    assert selection.everything == "the shared harness changed (ci/engine/group.py)"
    assert set(selection.measured) == {v.name for v in all_variants()} and not selection.skipped


def test_a_kernels_harness_module_change_measures_everything(sides):
    base, head = sides
    inputs = head / "kernels" / "inputs.py"
    inputs.write_text(inputs.read_text() + "\n# a change\n")
    assert "kernels/inputs.py" in select(base, head).everything


def test_a_checkout_without_the_harness_measures_everything(sides):
    """A kernels-only base (--base-root of an exported kernels/): nothing says its harness is the same."""
    base, head = sides
    shutil.rmtree(base / "ci")
    selection = select(base, head)
    assert selection.everything.startswith("the base's shared harness cannot be fingerprinted")
    assert not selection.skipped


def test_the_session_reads_the_harness_of_both_checkouts(sides):
    """ci/compare/session.harness_reason, computed while the workers start: identical harness, None;
    a base without ci/, everything measured; a root that is not a checkout, the same, never a crash."""
    from attnwatch.ci.compare.session import harness_reason

    base, head = sides
    assert harness_reason({"base": base, "head": head}) is None
    assert harness_reason({"base": base, "head": None}) is None  # None: this checkout (a copy of it is `base`)
    shutil.rmtree(base / "ci")
    assert harness_reason({"base": base, "head": head}).startswith("the base's shared harness cannot be fingerprinted")


def test_different_library_versions_measure_everything(sides):
    base, head = sides
    selection = select(base, head, libraries={**LIBRARIES, "torch_version": "2.12.0"})
    assert selection.everything == "the sides run different libraries (torch_version: 2.11.0 vs 2.12.0)"


def test_a_different_flash_attn_4_measures_everything(sides):
    """The optional packages a run records (Environment.packages) are libraries too: two sides
    with different flash-attn-4 versions, or one without it, vouch for nothing."""
    base, head = sides
    env = {**LIBRARIES, "packages": {"flash-attn-4": "4.0.0b4", "liger-kernel": None}}
    base_fps = fingerprints(base, libraries=library_versions(env))

    def chosen(packages):
        return select_variants(
            [v.name for v in all_variants()],
            base_fps,
            fingerprints(head, libraries=library_versions({**env, "packages": packages})),
            reference=reference().name,
            rotation="c0ffee",
            canary=1,
        )

    assert chosen({"flash-attn-4": "4.0.0b4", "liger-kernel": None}).everything is None
    newer = chosen({"flash-attn-4": "4.0.0b5", "liger-kernel": None})
    assert newer.everything == "the sides run different libraries (packages.flash-attn-4: 4.0.0b4 vs 4.0.0b5)"
    assert not newer.skipped
    absent = chosen({"flash-attn-4": None, "liger-kernel": None})
    assert absent.everything == "the sides run different libraries (packages.flash-attn-4: 4.0.0b4 vs None)"


def test_an_import_that_cannot_be_resolved_makes_the_variant_unknown_and_measured(sides):
    base, head = sides
    source = head / "kernels" / "variants" / "torch_3op.py"
    source.write_text(source.read_text() + "\nfrom ..no_such_module import x  # noqa\n")
    selection = select(base, head)
    assert selection.measured["torch_3op"].startswith("fingerprint unknown on the head side")
    dynamic = head / "kernels" / "variants" / "sdpa.py"
    dynamic.write_text(dynamic.read_text() + "\nimport importlib\nimportlib.import_module('kernels.' + 'x')\n")
    assert "imports a module by name at run time" in select(base, head).measured["sdpa_math"]


def test_a_tree_laid_out_before_and_after_the_move_into_the_package_fingerprints_alike(tree, tmp_path):
    """A base from before the layers moved into attnwatch/ (real top-level kernels/, ci/, history/)
    and a head from after (attnwatch/<layer>, the top-level names links to them, beside
    attnwatch/__init__.py): the same sources, so the same labels and digests, and a compare across
    the move measures only the reference and the canary, not every variant as changed."""
    new = tmp_path / "new"
    for part in ("kernels", "ci", "history"):
        shutil.copytree(tree / part, new / "attnwatch" / part)
        (new / part).symlink_to(Path("attnwatch") / part, target_is_directory=True)
    shutil.copy2(REPO_ROOT / "attnwatch" / "__init__.py", new / "attnwatch" / "__init__.py")
    old_harness, new_harness = harness_closure(tree), harness_closure(new)
    assert new_harness.files == old_harness.files and not new_harness.unknown
    assert any(label.startswith("kernels/") for label in new_harness.files)
    for v in all_variants():  # the CPU check's source fingerprints, CUDA sources and headers included
        old, head = (source_print(v.name, root / _module(v), root, LIBRARIES) for root in (tree, new))
        assert head == old and old["digest"], v.name
    selection = select(tree, new)
    assert selection.everything is None and not changed(selection)


def test_the_variant_list_is_hashed_but_not_followed(tree):
    """kernels/variants/__init__.py imports every variant: following it would tie them all together."""
    closure = module_closure([tree / "kernels" / "variants" / "torch_3op.py"], tree)
    assert "kernels/variants/__init__.py" in closure.files
    assert not any(label.endswith(("sdpa.py", "triton_fa2.py")) for label in closure.files)


def test_the_canary_rotates_with_the_head_commit(tree):
    same = fingerprints(tree)

    def pick(rotation):
        return select_variants(list(same), same, same, reference=reference().name, rotation=rotation, canary=1).canary

    canaries = {tuple(pick(f"{k:040x}")) for k in range(6)}
    assert len(canaries) > 1  # successive pull requests cover different variants
    assert pick("abc") == pick("abc") and reference().name not in {c for cs in canaries for c in cs}


def test_the_canary_is_never_a_variant_this_runner_cannot_run(tree):
    """An unavailable canary is only "skipped" in the report: it would vouch for nothing."""
    same = fingerprints(tree)
    runnable = {"sdpa_math", "torch_3op"}
    for name, fp in same.items():
        fp["available"] = name in runnable or name == reference().name
    for k in range(12):
        canary = select_variants(
            list(same), same, same, reference=reference().name, rotation=f"{k:040x}", canary=1
        ).canary
        assert len(canary) == 1 and set(canary) <= runnable


def test_a_variant_whose_cold_build_costs_a_verdict_is_never_the_canary(tree):
    """rules.toml's never_canary (CUTLASS: 86 s cold) is never drawn, where without it some
    rotations draw a CUTLASS variant; an entry without its reason is refused by name."""
    same = fingerprints(tree)
    patterns = never_canary(rules()["selection"])
    assert "cutlass_*" in patterns
    drawn = {
        rule: {
            name
            for k in range(60)
            for name in select_variants(
                list(same), same, same, reference=reference().name, rotation=f"{k:040x}", canary=1, not_canary=rule
            ).canary
        }
        for rule in ((), patterns)
    }
    assert any(n.startswith("cutlass_") for n in drawn[()])
    assert drawn[patterns] and not any(n.startswith("cutlass_") for n in drawn[patterns])
    with pytest.raises(ValueError, match=r"selection.never_canary\[0\].reason"):
        never_canary({"never_canary": [{"variants": "cutlass_*"}]})


def test_a_worker_records_whether_each_variant_is_available():
    from attnwatch.ci.fingerprint.variant import _available
    from attnwatch.ci.kernels_api import kernels_api
    from attnwatch.kernels.availability import availability
    from attnwatch.kernels.registry import get

    for name in ("sdpa", "cuda_wmma"):  # one runs on any machine, one needs a GPU and nvcc
        assert _available(kernels_api(), get(name)) == availability(get(name))[0]


def test_forced_measures_everything(sides):
    selection = select_variants(
        ["sdpa", "torch_3op"], {}, {}, reference="sdpa", rotation="", canary=1, everything="--all"
    )
    assert selection.everything == "--all" and set(selection.measured) == {"sdpa", "torch_3op"}


def test_compare_json_and_the_comment_say_what_was_skipped_and_the_canary(sides, fixtures_dir, tmp_path):
    base, head = sides
    selection = select(base, head)
    planned = {v.name: 3 for v in all_variants()}
    report = make_report(fixtures_dir)
    report.selection = selection_record(selection, planned, fingerprints(base), fingerprints(head))
    report.selection.canary = ["sdpa_cudnn"]  # the fixture's cases are sdpa_cudnn's and a few others'
    report.times = {"startup_s": 4.0, "wall_s": 50.0}
    loaded = load_report(write_report(report, tmp_path / "compare.json"))
    skipped = loaded.selection.skipped
    assert skipped and all(v.reason == UNCHANGED and v.base_fingerprint == v.head_fingerprint for v in skipped)
    body = render_comment(loaded)
    folded = [line for line in body.splitlines() if line.startswith("<details><summary>Not measured")]
    assert folded == [
        f"<details><summary>Not measured: {len(skipped)} variants ({3 * len(skipped)} cases), unchanged: "
        "identical code and binaries on both sides (fingerprints in compare.json)</summary>"
    ]
    assert "A/A canary `sdpa_cudnn` (identical on both sides, measured as a check)" in body
    assert f"Baselines measured: `{reference().name}` (the reference, always)." in body.splitlines()


def test_the_comment_says_which_baselines_were_measured_and_why(sides, fixtures_dir):
    report = make_report(fixtures_dir)
    report.selection = selection_record(
        select(*_changed_variant(sides, "rmsnorm_triton")), {v.name: 2 for v in all_variants()}, {}, {}
    )
    line = next(x for x in render_comment(report).splitlines() if x.startswith("Baselines measured"))
    assert line == (
        f"Baselines measured: `{reference().name}` (the reference, always), `rmsnorm_torch` (because "
        "rmsnorm\\_triton changed)."
    )


def test_a_canary_that_moved_is_a_warning(fixtures_dir):
    report = make_report(fixtures_dir, slowdown={"sdpa_cudnn/h100_small/fp16/noncausal": 1.10})
    report.selection = selection_record(
        select_variants(["sdpa", "sdpa_cudnn"], {}, {}, reference="sdpa", rotation="", canary=1, everything=None),
        {"sdpa": 1, "sdpa_cudnn": 1},
        {},
        {},
    )
    report.selection.canary = ["sdpa_cudnn"]
    assert "**A/A canary moved**" in render_comment(report)


def test_a_report_with_an_unknown_time_part_is_refused(fixtures_dir, tmp_path):
    report = make_report(fixtures_dir)
    report.times = {"coffee_s": 1.0}
    path = write_report(report, tmp_path / "compare.json")
    with pytest.raises(ReportError, match="times: unknown part 'coffee_s'"):
        load_report(path)
    document = json.loads(path.read_text())
    document["times"] = {"wall_s": -1.0}
    path.write_text(json.dumps(document))
    with pytest.raises(ReportError, match="times.wall_s: expected seconds >= 0"):
        load_report(path)


def _scratch_repo(tmp_path: Path) -> Path:
    """A git repository holding this checkout's files in one commit (the base)."""
    repo = tmp_path / "repo"
    listed = (
        subprocess.run(
            ["git", "-C", str(REPO_ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
            check=True,
            capture_output=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (REPO_ROOT / name).is_symlink():  # ci -> attnwatch/ci: the scratch copy's own folders, not this checkout's
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(REPO_ROOT / name), repo / name)
        elif (REPO_ROOT / name).is_file():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, repo / name)
    for args in (["init", "--quiet"], ["add", "-A"], ["commit", "--quiet", "-m", "base"]):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.org", *args], check=True
        )
    return repo


@pytest.mark.slow
def test_a_real_compare_measures_the_changed_variant_and_all_with_all(tmp_path):
    """Through git worktrees on this CPU: a head that changes torch_3op measures sdpa (the reference),
    torch_3op and one A/A canary of the two unchanged sdpa variants, and checks the correctness of
    torch_3op's head alone; --all measures all four and checks every head variant (the base side
    never: ci/compare/select.head_checks)."""
    repo = _scratch_repo(tmp_path)
    source = repo / "kernels" / "variants" / "torch_3op.py"
    source.write_text(source.read_text() + "\n# a change\n")
    subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "--quiet",
            "-am",
            "head",
        ],
        check=True,
    )
    variants = ("sdpa", "sdpa_math", "sdpa_flash", "torch_3op")
    reports = {}
    for name, extra in (("selected", []), ("all", ["--all"])):
        out = tmp_path / name
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "attnwatch",
                "compare",
                "--base",
                "HEAD~1",
                "--head",
                "HEAD",
                "--shapes",
                "cpu",
                "--variants",
                ",".join(variants),
                "--causal",
                "no",
                "--rounds",
                "1",
                "--ncu",
                "off",
                "--out",
                str(out),
                *extra,
            ],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert "compare: time: wall " in done.stderr and "other = outside the rounds " in done.stderr
        reports[name] = load_report(out / "compare.json")
    selected = reports["selected"]
    (canary,) = selected.selection.canary
    assert canary in ("sdpa_math", "sdpa_flash")
    assert {c.variant for c in selected.cases} == {"sdpa", "torch_3op", canary}
    by_name = {v.variant: v for v in selected.selection.variants}
    assert by_name["torch_3op"].reason == "changed: kernels/variants/torch_3op.py"
    (skipped,) = selected.selection.skipped  # identical sources: not built on either side (ci/compare/affected.py)
    assert skipped.reason == SOURCE_UNCHANGED and skipped.variant not in {c.variant for c in selected.cases}
    assert set(selected.times) >= {"startup_s", "builds_s", "fingerprint_s", "timing_s", "judging_s", "wall_s"}
    assert {c.variant for c in selected.cases if c.head.correct is not None} == {"torch_3op"}
    assert all(c.head.correct for c in selected.cases if c.variant == "torch_3op")
    everything = reports["all"]
    assert {c.variant for c in everything.cases} == set(variants) and not everything.selection.skipped
    assert {c.variant for c in everything.cases if c.head.correct} == set(variants)
    assert all(c.base.correct is None for report in reports.values() for c in report.cases)
    assert everything.selection.everything.startswith("--all")


def test_the_same_build_key_with_another_binary_measures_the_variant(sides, stand_in_nvcc):
    """Byte-identical sources that compiled to different machine code (a non-deterministic build,
    another nvcc behind the same version text) are not vouched for by the key alone."""
    base, head = sides
    before = fingerprints(base, keyed=True)
    _cache_binary(_nvcc_key(head, "cuda_wmma"), content="another cubin")
    after = fingerprints(head, keyed=True)
    assert before["cuda_wmma"]["builds"] == after["cuda_wmma"]["builds"]
    assert before["cuda_wmma"]["digest"] != after["cuda_wmma"]["digest"]
    assert difference(before["cuda_wmma"], after["cuda_wmma"]) == "changed: binaries"


def _triton_build(tree: Path, **bucket: object) -> dict:
    """triton_fa2's fingerprint over one build record shaped as its build writes it (kernels/variants/
    triton_fa2.py: per configuration bucket the compiler's resources and the cubin's digest)."""
    v = next(v for v in all_variants() if v.name == "triton_fa2")
    resources = {"registers_per_thread": 168, "spilled_registers": 0, "binary_sha256": "a" * 64, **bucket}
    build = {
        "variant": v.name,
        "ok": True,
        "compile_seconds": 2.7,
        "config": {"builds": {"d128/causal/m64_n64_w4_s3_tma": resources, "d64/causal/m64_n64_w4_s3": {}}},
    }
    return variant_fingerprint(tree / _module(v), tree, builds=[build], libraries=LIBRARIES, settings={})


def test_two_triton_builds_of_one_source_with_other_cubin_bytes_are_the_same_variant(tree):
    """Two checkouts compiling triton_fa2 cold at once recorded other cubin digests for identical
    SASS (ptxas writes the source file's path and time into the line table; an H100 A/A at
    c9e4b2d drew it as the canary and then measured it as "changed: builds"). The per-configuration
    digest is volatile (rules.toml [builds]); what the compiler reported about the code is not."""
    base = _triton_build(tree)
    assert difference(base, _triton_build(tree, binary_sha256="b" * 64)) is None
    assert difference(base, _triton_build(tree, registers_per_thread=170)) == "changed: builds"


def test_a_keyed_build_whose_binary_is_not_cached_is_unknown(sides, stand_in_nvcc):
    base, _ = sides
    v = next(v for v in all_variants() if v.name == "cuda_wmma")
    build = {"variant": v.name, "ok": True, "source_hash": "0" * 64, "compile_seconds": 1.0}
    fp = variant_fingerprint(base / _module(v), base, builds=[build], libraries=LIBRARIES, settings={})
    assert fp["digest"] is None and "compile cache" in fp["unknown"]


# ------------------------------------------------------------------ which cases a compare profiles

# The one-line CUDA change of the H100 verdict check at 86bacad (scripts/verdict_check.py, wmma):
# its warm re-run decided cuda_wmma_cpasync/b4_h16_s1k/fp16/noncausal "sure but small" where the
# cold run had said "no change", and that one uncached case cost each side an ncu start.
_PROFILE_CASES = [
    f"{v}/{s}/fp16/{c}"
    for v in ("sdpa", "cuda_wmma", "cuda_wmma_cpasync")
    for s in ("b4_h16_s1k", "h100_small")
    for c in ("causal", "noncausal")
]
_VARIANT_OF = {cid: cid.split("/")[0] for cid in _PROFILE_CASES}


def test_a_compare_with_nothing_decided_profiles_nothing():
    assert profiled_cases([], _VARIANT_OF, ["cuda_wmma", "cuda_wmma_cpasync"], 24) == []


def test_the_decided_changes_come_first_then_every_other_case_of_the_changed_variants():
    decided = ["cuda_wmma_cpasync/h100_small/fp16/causal", "cuda_wmma/b4_h16_s1k/fp16/causal"]
    chosen = profiled_cases(decided, _VARIANT_OF, ["cuda_wmma", "cuda_wmma_cpasync"], 24)
    assert chosen[:2] == decided
    assert sorted(chosen) == sorted(c for c in _PROFILE_CASES if not c.startswith("sdpa/"))  # never the reference
    assert len(chosen) == len(set(chosen)) == 8


def test_past_the_limit_only_the_decided_changes_are_profiled():
    decided = ["cuda_wmma/b4_h16_s1k/fp16/causal"]
    assert profiled_cases(decided, _VARIANT_OF, ["cuda_wmma", "cuda_wmma_cpasync"], 7) == decided
    assert len(profiled_cases(decided, _VARIANT_OF, ["cuda_wmma", "cuda_wmma_cpasync"], 8)) == 8


def test_a_decided_change_outside_the_changed_variants_is_still_profiled():
    decided = ["sdpa/h100_small/fp16/causal"]  # a canary or the reference that moved: its cause matters most
    chosen = profiled_cases(decided, _VARIANT_OF, ["cuda_wmma"], 24)
    assert chosen[0] == decided[0] and sorted(chosen[1:]) == sorted(
        c for c in _PROFILE_CASES if c.startswith("cuda_wmma/")
    )
