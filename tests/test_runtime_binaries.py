"""A compare reads the binaries Triton compiled at run time and says how their code differs.

The binaries are real: this checkout's triton_fa2 kernel and the same kernel with
scripts/pr_plants/triton_barrier.patch at 1 and 2 (barriers per key block), compiled by Triton for
sm_90 on the CPU (compiling needs no GPU) into a Triton cache folder, as a compare's workers
leave them; each case's rounds record the digest of the cubin it ran (CaseTiming.kernel_binary_sha256).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from attnwatch.ci.compare.rounds import CaseRound, RoundData
from attnwatch.ci.compare.runtime_binaries import find_binaries, runtime_code_changes
from attnwatch.history.analysis.sass import find_tool
from attnwatch.history.analysis.sass_diff import case_code_change, describe_binaries

REPO = Path(__file__).resolve().parent.parent
KERNEL_FILE = REPO / "attnwatch" / "kernels" / "triton" / "fa2_fwd.py"
CASE = "triton_fa2/b4_h16_s1k/fp16/noncausal"
OTHER = "triton_fa2/b4_h16_s1k/fp16/causal"
KERNEL = "fa2_fwd_kernel"

pytestmark = pytest.mark.skipif(find_tool("cuobjdump") is None, reason="needs cuobjdump to read the cubins")


def _compile(module_file: Path, name: str) -> str:
    """The sha256 of the cubin Triton compiles from `module_file`'s kernel for sm_90 (d64, 64x64
    tiles, 4 warps, 3 stages: one of the pr set's configurations), left in $TRITON_CACHE_DIR."""
    from triton import compile as triton_compile
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    spec = importlib.util.spec_from_file_location(name, module_file)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    absent = ("desc_q", "desc_k", "desc_v", "desc_o", "WsAcc", "WsMl", "Counters")
    flags = dict(
        HEAD_DIM=64, BLOCK_M=64, BLOCK_N=64, CAUSAL=False, EVEN_M=True, EVEN_N=True,
        USE_DESC=False, WARP_SPEC=False, UPCAST_DOT=False, SPLIT_KV=1,
    )  # fmt: skip
    signature = {**{n: "*fp16" for n in ("Q", "K", "V", "Out")}, **{n: "constexpr" for n in (*absent, *flags)}}
    signature.update(seq_len="i32", qk_scale="fp32")
    source = ASTSource(module.fa2_fwd_kernel, signature=signature, constexprs={**dict.fromkeys(absent), **flags})
    options = dict(num_warps=4, num_stages=3, **module.COMPILE_OPTIONS)
    compiled = triton_compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    return hashlib.sha256(compiled.asm["cubin"]).hexdigest()


@pytest.fixture(scope="module")
def triton_cache(tmp_path_factory):
    """(Triton's cache folder, base digest, {magnitude: planted digest}) for the plant at 1 and 2."""
    import sys

    from attnwatch.scripts.plant_ladder import apply_plant, load_plants

    root = tmp_path_factory.mktemp("triton")
    (plant,) = [p for p in load_plants() if p.name == "triton_barrier"]
    folder, before = root / "cache", os.environ.get("TRITON_CACHE_DIR")
    os.environ["TRITON_CACHE_DIR"] = str(folder)
    sys.path.insert(0, str(REPO / "scripts"))  # apply_plant reads scripts/ncu_check.py's patcher
    try:
        base, planted = _compile(KERNEL_FILE, "fa2_base"), {}
        for magnitude in ("1", "2"):
            tree = root / f"at{magnitude}"
            (tree / "kernels" / "triton").mkdir(parents=True)
            shutil.copy(KERNEL_FILE, tree / "kernels" / "triton" / "fa2_fwd.py")
            apply_plant(plant, magnitude, tree)
            planted[magnitude] = _compile(tree / "kernels" / "triton" / "fa2_fwd.py", f"fa2_at{magnitude}")
    finally:
        sys.path.remove(str(REPO / "scripts"))
        os.environ.pop("TRITON_CACHE_DIR") if before is None else os.environ.update(TRITON_CACHE_DIR=before)
    assert len({base, *planted.values()}) == 3
    return folder, base, planted


def rounds(binaries: dict[str, list[str | None]], count: int = 2) -> list[RoundData]:
    """`count` rounds of one side; binaries: case id -> the digest each round recorded."""
    out = []
    for i in range(count):
        cases = {}
        for case_id, digests in binaries.items():
            digest = digests[i % len(digests)]
            timing = {"kernel_config": "m64_n64_w4_s3", "kernel_binary_sha256": digest}
            cases[case_id] = CaseRound(case_id, "triton_fa2", "b4_h16_s1k", "fp16", False, "ok", timing=timing)
        out.append(RoundData(bundle=f"r{i}", gpu_name="NVIDIA H200", commit_sha="c" * 40, cases=cases))
    return out


def test_the_planted_barriers_are_named_from_the_two_cubins_found_by_digest(triton_cache, tmp_path):
    """Two barriers per key block add one BAR to the loop; one barrier adds none: Triton moves the
    loop's own barrier to the loop head instead (cuobjdump shows it), so the instruction mix is
    the same and the binary says what else changed, its register count. Either way the case's
    code is known to have changed, exactly, before any counter is read."""
    folder, base, planted = triton_cache
    said: list[str] = []
    found = runtime_code_changes(
        rounds({CASE: [base], OTHER: [base]}),
        rounds({CASE: [planted["2"]], OTHER: [base]}),
        [CASE, OTHER],
        folder,
        said.append,
        tmp_path / "sass",
    )
    assert set(found) == {CASE}, said  # OTHER ran one binary on both sides: the same code
    text = case_code_change(found[CASE], [KERNEL])
    assert text is not None and text.startswith(f"{KERNEL}: +1 BAR in a loop"), describe_binaries(found[CASE])
    found = runtime_code_changes(rounds({CASE: [base]}), rounds({CASE: [planted["1"]]}), [CASE], folder, said.append)
    (kernel,) = found[CASE].kernels
    assert kernel.changes == [] and kernel.loops[0] == kernel.loops[1], describe_binaries(found[CASE])
    (before, after) = kernel.resources["registers"]
    assert before != after and case_code_change(found[CASE], [KERNEL]) == f"{KERNEL}: registers {before} → {after}"


def test_a_case_left_unread_says_why_and_costs_nothing_else(triton_cache, tmp_path):
    folder, base, planted = triton_cache
    head = planted["2"]
    said: list[str] = []
    mixed = rounds({CASE: [base, head]})  # re-tuned between rounds: two binaries on one side
    assert runtime_code_changes(rounds({CASE: [base]}), mixed, [CASE], folder, said.append, tmp_path) == {}
    assert "several binaries" in said[-1]
    unknown = "0" * 64
    assert runtime_code_changes(rounds({CASE: [base]}), rounds({CASE: [unknown]}), [CASE], folder, said.append) == {}
    assert "000000000000 not in" in said[-1]
    # no digest recorded (an older side, an nvcc variant): nothing to diff, nothing said
    assert runtime_code_changes(rounds({CASE: [None]}), rounds({CASE: [head]}), [CASE], folder, said.append) == {}
    assert len(said) == 2


def test_a_damaged_cubin_is_never_taken_for_its_digest(triton_cache, tmp_path):
    folder, base, planted = triton_cache
    head = planted["2"]
    copy = tmp_path / "cache"
    shutil.copytree(folder, copy)
    (damaged,) = [p for p in copy.rglob("*.cubin") if hashlib.sha256(p.read_bytes()).hexdigest() == head]
    damaged.write_bytes(damaged.read_bytes()[:-16])
    assert set(find_binaries(copy, [base, head])) == {base}


def test_a_run_records_its_triton_cases_binaries_and_a_stored_cause_reads_each_cases_own(triton_cache, tmp_path):
    """The run's side (ci/ncu/sass_record.py): the digests its profiled Triton cases recorded are
    found in the cache folder and stored in sass.json, all linked to the variant. Every one holds
    a kernel of the same name, so a stored cause (history.detection.stored_code) must read the
    case's own binary (results.kernel_binary_sha256), not the variant's merged."""
    from bundle_factory import make_bundle

    from attnwatch.ci.ncu.sass_record import record_sass
    from attnwatch.history.contract.validate import load_bundle
    from attnwatch.history.detection.stored_code import stored_code_changes
    from attnwatch.history.ingest.write import ingest_paths
    from attnwatch.history.store.db import open_read
    from attnwatch.history.store.location import parse_location

    folder, base, planted = triton_cache
    missing = "1" * 64
    records, why = record_sass(
        ["triton_fa2", "sdpa"], None, tmp_path, cache=tmp_path / "sass",
        compiled_at_run_time={"triton_fa2": {base, planted["1"], missing}}, folder=folder,
    )  # fmt: skip
    assert why == f"triton_fa2's binaries 111111111111 not in {folder}"
    assert records is not None and {b.digest for b in records.binaries} == {base, planted["1"]}
    assert {(v.variant, v.digest) for v in records.variants} == {("triton_fa2", base), ("triton_fa2", planted["1"])}

    # run-1: the case ran base and the other case the plant at 1; run-2: the case the plant at 2
    cases, paths = {}, []
    for run, (mine, other) in {"run-1": (base, planted["1"]), "run-2": (planted["2"], planted["1"])}.items():
        probe = make_bundle(tmp_path / f"probe-{run}", run_id=run, variants=("triton_fa2",), n_samples=5)
        ids = [t.case_id for t in load_bundle(probe).timings][:2]
        cases = dict(zip(("mine", "other"), ids))
        records, _ = record_sass([], None, tmp_path, cache=tmp_path / "sass",
                                 compiled_at_run_time={"triton_fa2": {mine, other}}, folder=folder)  # fmt: skip
        overrides = {ids[0]: {"kernel_binary_sha256": mine}, ids[1]: {"kernel_binary_sha256": other}}
        paths.append(
            make_bundle(
                tmp_path / run,
                run_id=run,
                variants=("triton_fa2",),
                n_samples=5,
                with_ncu=True,
                sass=records,
                timing_overrides=overrides,
            )  # fmt: skip
        )
    db = tmp_path / "h.duckdb"
    ingest_paths(parse_location(db), paths)
    with open_read(parse_location(db)) as con:
        found = stored_code_changes(con, {("run-2", cases["mine"]): "run-1", ("run-2", cases["other"]): "run-1"})
    assert list(found) == [("run-2", cases["mine"])]  # the other case ran one binary in both runs
    assert case_code_change(found[("run-2", cases["mine"])], [KERNEL]).startswith(f"{KERNEL}: +1 BAR in a loop")
