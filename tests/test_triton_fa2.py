"""The Triton FA2 forward: correctness against the float64 reference, the config table, the
variant's declarations, and (on a GPU) the tuned kernel at the benchmark shapes.

CPU CI has no GPU, so the kernel runs under the Triton interpreter (TRITON_INTERPRET=1).
Triton decides interpreter-or-compiler when a kernel is decorated, i.e. at import, so those
checks run in a child process started with the variable set (this file, run as a script):
the pytest process itself, and every other test in it, keep compiled Triton.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import SHAPES, Shape, adhoc_shape, shape_set
from attnwatch.kernels.triton.configs import ConfigError, load_table, parse_table, runs_exactly

REPO_ROOT = Path(__file__).resolve().parent.parent

# Relative error ||out - ref|| / ||ref|| bounds. fp16 keeps 11 significant bits: rounding the
# output alone gives ~2.5e-4 at these sizes; bf16 keeps 8 bits (~4e-3 seen). The bounds leave
# room for accumulation order, not for a wrong mask (a missing or shifted mask is >1e-1).
REL_ERR_BOUND = {"fp16": 2e-3, "bf16": 1.5e-2}

INTERPRETER_CASES = [
    (batch, heads, seq, dim, dtype, causal, config)
    for (batch, heads, seq, dim) in ((1, 2, 64, 64), (2, 1, 128, 64), (1, 2, 77, 64), (1, 1, 77, 128))
    for dtype in ("fp16", "bf16")
    for causal in (False, True)
    for config in ("variant",)
] + [
    # Explicit configurations: the TMA descriptor path, a query tile narrower than the key
    # step (causal diagonal band starts below the tile), and the warp-specialised loop.
    (1, 2, 128, 64, "fp16", True, "m64_n64_w4_s3_tma"),
    (1, 2, 128, 64, "bf16", False, "m64_n64_w4_s3_tma"),
    (1, 1, 96, 64, "fp16", True, "m16_n64_narrow"),
    (1, 1, 128, 64, "bf16", True, "m64_n64_ws_tma"),
    # Split-KV: partial states merged by the last program of each tile (empty splits at S=40).
    (2, 1, 77, 64, "fp16", True, "m32_n16_split3"),
    (1, 2, 77, 64, "bf16", False, "m32_n16_split3"),
    (1, 1, 40, 64, "fp16", False, "m32_n16_split4"),
    (1, 2, 128, 64, "fp16", True, "m64_n32_split2_tma"),
]


def _case_key(case) -> str:
    batch, heads, seq, dim, dtype, causal, config = case
    return f"b{batch}h{heads}s{seq}d{dim}/{dtype}/{'causal' if causal else 'noncausal'}/{config}"


def _interpreter_worker(cases) -> dict:
    """Run in the child (TRITON_INTERPRET=1): each case through the registered variant's own
    prepare (or an explicit config), output poisoned with NaN before each of two calls."""
    import torch

    from attnwatch.kernels.reference import reference_attention
    from attnwatch.kernels.triton.configs import BlockConfig
    from attnwatch.kernels.triton.fa2_fwd import make_launcher
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2

    extra = {
        "m16_n64_narrow": BlockConfig("m16_n64_narrow", 16, 64, 4, 2, False, False, "test"),
        "m64_n64_ws_tma": BlockConfig("m64_n64_ws_tma", 64, 64, 4, 3, True, True, "test"),
        "m32_n16_split3": BlockConfig("m32_n16_split3", 32, 16, 4, 1, False, False, "test", 3),
        "m32_n16_split4": BlockConfig("m32_n16_split4", 32, 16, 4, 1, False, False, "test", 4),
        "m64_n32_split2_tma": BlockConfig("m64_n32_split2_tma", 64, 32, 4, 3, True, False, "test", 2),
    }
    table = load_table()
    results = {}
    for case in cases:
        batch, heads, seq, dim, dtype, causal, config = case
        shape = adhoc_shape(batch, heads, seq, dim)
        prepared = TRITON_FA2.prepare(Case("triton_fa2", shape, dtype, causal), torch.device("cpu"), 7)
        run, out = prepared.fn, prepared.out
        chosen = prepared.info["config"]["name"]
        if config != "variant":
            cfg = extra.get(config) or table.configs[config]
            run, chosen = make_launcher(prepared.q, prepared.k, prepared.v, out, causal, cfg), cfg.name
        ref = reference_attention(prepared.q, prepared.k, prepared.v, causal)
        worst = 0.0
        nonfinite = 0
        for _ in range(2):
            out.fill_(float("nan"))
            got = run()
            nonfinite += int((~torch.isfinite(got)).sum())
            rel = float((got.double() - ref).norm() / ref.norm())
            worst = max(worst, rel if rel == rel else float("inf"))
        results[_case_key(case)] = {
            "rel_err": worst,
            "nonfinite": nonfinite,
            "config": chosen,
            "info": prepared.info["config"],
            "reported": [prepared.config, prepared.config_source],
        }
    return results


@pytest.fixture(scope="module")
def interpreter_results():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, __file__, json.dumps(INTERPRETER_CASES)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", INTERPRETER_CASES, ids=_case_key)
def test_interpreter_output_matches_float64_reference(interpreter_results, case):
    result = interpreter_results[_case_key(case)]
    dtype = case[4]
    assert result["nonfinite"] == 0, f"{result['nonfinite']} unwritten or non-finite elements"
    assert result["rel_err"] < REL_ERR_BOUND[dtype], result


def test_interpreter_records_the_configuration_it_ran(interpreter_results):
    table = load_table()
    info = interpreter_results[_case_key(INTERPRETER_CASES[0])]["info"]
    first = table.configs[table.interpreter[0]]
    assert info["name"] == first.name
    assert (info["BLOCK_M"], info["BLOCK_N"]) == (first.block_m, first.block_n)
    assert info["num_warps"] == first.num_warps and info["num_stages"] == first.num_stages
    assert info["tuned"] is False  # nothing is timed under the interpreter
    # what every stored result of it records (CaseTiming.kernel_config / kernel_config_source)
    assert interpreter_results[_case_key(INTERPRETER_CASES[0])]["reported"] == [first.name, "fixed"]


# ---- the config table (data) ---------------------------------------------------------------


def test_config_table_gives_every_benchmark_problem_a_candidate():
    table = load_table()
    for shape in shape_set("nightly", Shape) + [adhoc_shape(2, 4, 777, 64), adhoc_shape(1, 4, 777, 128)]:
        for causal in (False, True):
            found = table.candidates(shape.head_dim, causal, shape.seq_len)
            assert found, f"{shape.id} causal={causal}: no candidate"
            assert all(runs_exactly(c, causal, shape.seq_len) for c in found)


def test_odd_length_never_gets_a_descriptor_config():
    table = load_table()
    for causal in (False, True):
        found = table.candidates(64, causal, 777)
        assert found and not any(c.tma for c in found)
    assert any(c.tma for c in table.candidates(64, False, 1024))


def test_every_config_has_a_reason_and_is_used():
    table = load_table()
    used = set(table.interpreter)
    for bucket in table.buckets:
        assert bucket.reason.strip()
        used.update(bucket.candidates)
    for config in table.configs.values():
        assert config.reason.strip(), config.name
    assert used == set(table.configs), f"unused configs: {set(table.configs) - used}"


def _minimal_table(**overrides):
    config = {"name": "a", "block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2, "reason": "r"}
    config.update(overrides)
    return {
        "config": [config],
        "bucket": [{"head_dim": 64, "causal": False, "seq_max": 1024, "candidates": ["a"], "reason": "r"}],
        "interpreter": {"candidates": ["a"], "max_work": 1, "reason": "r"},
        "tuner": {"tie_margin": 0.02, "reason": "r"},
    }


@pytest.mark.parametrize(
    "overrides, field",
    [
        ({"block_m": 48}, "block_m"),
        ({"num_warps": 3}, "num_warps"),
        ({"reason": " "}, "reason"),
        ({"num_stages": "3"}, "num_stages"),
        ({"split_kv": 0}, "split_kv"),
    ],
)
def test_malformed_config_entry_names_file_and_field(overrides, field):
    with pytest.raises(ConfigError) as err:
        parse_table(_minimal_table(**overrides), "configs.toml")
    assert "configs.toml" in str(err.value) and field in str(err.value)


def test_bucket_naming_an_unknown_config_is_refused():
    data = _minimal_table()
    data["bucket"][0]["candidates"] = ["nope"]
    with pytest.raises(ConfigError, match="unknown config 'nope'"):
        parse_table(data, "configs.toml")


def test_invalid_toml_names_the_file(tmp_path):
    bad = tmp_path / "configs.toml"
    bad.write_text("[[config]\nname = ")
    with pytest.raises(ConfigError, match=str(bad)):
        load_table(bad)


def test_missing_or_bad_tie_margin_is_refused():
    data = _minimal_table()
    del data["tuner"]
    with pytest.raises(ConfigError, match=r"missing table \[tuner\]"):
        parse_table(data, "configs.toml")
    data["tuner"] = {"tie_margin": 0.7, "reason": "r"}
    with pytest.raises(ConfigError, match="tie_margin"):
        parse_table(data, "configs.toml")


def test_pick_prefers_the_listed_order_within_the_tie_margin():
    from attnwatch.kernels.triton.tuner import Trial, pick

    trials = [Trial("first", 101.5), Trial("broken", error="OutOfResources"), Trial("second", 100.0)]
    assert pick(trials, 0.02).config == "first"  # 1.5% slower: a tie, the preferred one stays
    assert pick(trials, 0.01).config == "second"  # outside a 1% margin the faster one wins
    assert pick([Trial("a", 110.0), Trial("b", 100.0)], 0.02).config == "b"


def test_pick_fails_loudly_when_every_candidate_failed():
    from attnwatch.kernels.triton.tuner import Trial, pick

    with pytest.raises(RuntimeError, match="every candidate configuration failed.*boom"):
        pick([Trial("a", error="boom")], 0.02)


def test_longer_sequences_than_any_bucket_use_the_longest_bucket():
    table = load_table()
    longest = table.bucket_for(64, True, 1 << 40)
    assert longest is not None and longest.seq_max == max(
        b.seq_max for b in table.buckets if b.head_dim == 64 and b.causal
    )


# ---- the variant's declarations --------------------------------------------------------------


def test_variant_is_registered_with_its_needs():
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2
    from attnwatch.kernels.operators import get_operator

    assert TRITON_FA2.name == "triton_fa2" and TRITON_FA2.family == "triton"
    assert TRITON_FA2.needs == frozenset({"triton"})
    assert TRITON_FA2.operator == "attention" and TRITON_FA2.name != get_operator("attention").baseline


@pytest.mark.parametrize(
    "shape, dtype, expected",
    [
        (SHAPES["b4_h16_s1k"], "fp32", "fp16 and bf16 only"),
        (Shape("odd_d", 1, 1, 128, 96), "fp16", "head_dim=96"),
        (Shape("many_heads", 1100, 64, 128, 64), "fp16", "grid's y limit"),
    ],
)
def test_unsupported_cases_say_why(shape, dtype, expected):
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2

    reason = TRITON_FA2.unsupported(Case("triton_fa2", shape, dtype, False))
    assert reason and expected in reason


def test_interpreter_declares_large_shapes_unsupported(monkeypatch):
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert "TRITON_INTERPRET=1" in TRITON_FA2.unsupported(Case("triton_fa2", SHAPES["b4_h16_s1k"], "fp16", True))
    assert TRITON_FA2.unsupported(Case("triton_fa2", SHAPES["cpu_tiny"], "bf16", True)) is None
    monkeypatch.delenv("TRITON_INTERPRET")
    assert TRITON_FA2.unsupported(Case("triton_fa2", SHAPES["b16_h16_s2k"], "fp16", True)) is None


def test_launcher_refuses_a_descriptor_config_that_would_cross_heads():
    import torch

    from attnwatch.kernels.triton.fa2_fwd import make_launcher

    table = load_table()
    q = torch.zeros(1, 1, 100, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="S % 64 == 0 and S % 128 == 0"):
        make_launcher(q, q, q, torch.empty_like(q), False, table.configs["m64_n128_w4_s3_tma"])
    with pytest.raises(ValueError, match="out must be contiguous"):
        make_launcher(
            q,
            q,
            q,
            torch.empty(1, 1, 64, 100, dtype=torch.float16).transpose(2, 3),
            False,
            table.configs["m64_n64_w4_s3"],
        )


# ---- the tuning script (its CPU dry run: same stages, interpreter, tiny shapes) ---------------


@pytest.mark.slow
def test_tuning_script_checks_then_times_and_writes_its_record(tmp_path):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch.scripts.tune_triton",
            "--dry-run",
            "--only",
            "m64_n64_w4_s3,m64_n64_w4_s3_tma",
            "--dtypes",
            "fp16",
            "--rounds",
            "2",
            "--workers",
            "1",
            "--out",
            str(tmp_path),
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = json.loads((tmp_path / "tune_triton.json").read_text())
    assert len(record["cases"]) == 4  # S=128 and S=77, causal and not
    for entry in record["cases"]:
        assert entry["best"], entry["case"]
        for candidate in entry["candidates"].values():
            assert candidate["check"]["passed"] and candidate["check"]["rel_err"] < REL_ERR_BOUND["fp16"]
            assert candidate["n"] == 2 and candidate["median_us"] > 0
        # the descriptor config cannot run S=77 exactly, so it is not even tried there
        if "s77" in entry["case"]:
            assert set(entry["candidates"]) == {"m64_n64_w4_s3"}
    assert "config ranking" in proc.stdout and proc.stdout.rstrip().splitlines()[-1].startswith("wall")


# ---- on the GPU ------------------------------------------------------------------------------

GPU_SHAPES = list(shape_set("main", Shape)) + [adhoc_shape(2, 4, 777, 64), adhoc_shape(1, 4, 777, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: s.id)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
def test_gpu_tuned_kernel_matches_reference(shape, dtype, causal):
    import torch

    from attnwatch.kernels.reference import reference_attention
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2

    case = Case("triton_fa2", shape, dtype, causal)
    prepared = TRITON_FA2.prepare(case, torch.device("cuda"), 3)
    config = prepared.info["config"]
    assert {"BLOCK_M", "BLOCK_N", "num_warps", "num_stages"} <= set(config)
    assert config["tuned"] in (True, False) and config["trials"] is not None
    ref = reference_attention(prepared.q, prepared.k, prepared.v, causal)
    for _ in range(2):
        prepared.out.fill_(float("nan"))
        got = prepared.fn()
        torch.cuda.synchronize()
        assert bool(torch.isfinite(got).all()), "unwritten or non-finite output"
        rel = float((got.double() - ref).norm() / ref.norm())
        assert rel < REL_ERR_BOUND[dtype], (rel, config["name"])


@pytest.mark.gpu
def test_gpu_build_reports_compiler_resources():
    from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2

    report = TRITON_FA2.build()
    assert report.ok, report.error
    assert report.registers_per_thread and report.registers_per_thread > 0
    assert report.config["builds"]


_PREPARE_TWO = """
import torch
from attnwatch.kernels.cases import Case
from attnwatch.kernels.shapes import adhoc_shape
from attnwatch.kernels.variants.triton_fa2 import TRITON_FA2
for causal in (False, True):
    case = Case("triton_fa2", adhoc_shape(1, 2, 256, 64), "fp16", causal)
    print(TRITON_FA2.prepare(case, torch.device("cuda"), 0).binary_sha256)
"""


@pytest.mark.gpu
def test_gpu_prepare_records_the_digest_of_a_cubin_its_cache_keeps(tmp_path):
    """The digest a result stores (Prepared.binary_sha256) is a file's in Triton's cache folder,
    where a compare finds it (ci/compare/runtime_binaries.py); another specialization, another
    binary. A fresh process with its own cache folder: Triton's in-memory cache would skip the
    file for a kernel this process compiled before."""
    from attnwatch.ci.compare.runtime_binaries import find_binaries

    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp_path / "triton"), "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", _PREPARE_TWO], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    digests = set(done.stdout.split())
    assert len(digests) == 2 and all(len(d) == 64 for d in digests), done.stdout
    assert set(find_binaries(tmp_path / "triton", digests)) == digests


if __name__ == "__main__":
    print(json.dumps(_interpreter_worker([tuple(c) for c in json.loads(sys.argv[1])])))
