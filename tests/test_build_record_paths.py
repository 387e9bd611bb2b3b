"""Build records carry no machine's file layout: the compile command names sources relative to
the repository and include folders by what they are, the shipped sample run holds no absolute
path, and the rule (kernels.record_paths) leaves case ids and URLs alone."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from attnwatch.kernels.cuda.launch import variant_build_report
from attnwatch.kernels.nvcc import NvccError, failed_build_report, nvcc_compile
from attnwatch.kernels.record_paths import (
    REPO_ROOT,
    absolute_paths,
    portable_command,
    portable_path,
    portable_text,
)

# The H200 run shipped as the demo until the demo became a short history; kept for its cleaned
# CUTLASS build commands (and as a real format-1 bundle, tests/test_bundle_contract.py).
SAMPLE = REPO_ROOT / "tests" / "data" / "bundles" / "h200-main-fp16-3225df5.tgz"
DEMO_HISTORY = REPO_ROOT / "docs" / "data" / "demo" / "h200-demo-history.tgz"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
# A second, plainer check than absolute_paths: a command token (or its -I/-L value) that starts with "/".
GLUED = re.compile(r"^(-I|-L|-o|--[\w-]+=)")


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


def _absolute_tokens(command: str) -> list[str]:
    return [t for t in command.split() if GLUED.sub("", t).startswith("/")]


def _machine_paths(record) -> list[str]:
    found = []
    for text in _strings(record):
        found += absolute_paths(text) + _absolute_tokens(text)
    return found


# ---------------------------------------------------------------- the shipped sample


def test_shipped_sample_holds_no_absolute_machine_path():
    with tarfile.open(SAMPLE) as tar:
        members = tar.getmembers()
        assert all(not m.name.startswith("/") and ".." not in Path(m.name).parts for m in members)
        texts = {m.name: tar.extractfile(m).read().decode() for m in members if m.isfile()}
    assert {Path(name).name for name in texts} >= {"manifest.json", "builds.json", "benchmark.json"}
    for name, text in texts.items():
        assert absolute_paths(text) == [], name
        assert "site-packages" not in text, name
    builds = json.loads(next(t for n, t in texts.items() if n.endswith("/builds.json")))["builds"]
    commands = [b["config"]["command"] for b in builds if "command" in b["config"]]
    assert len(commands) == 10
    assert [c for c in commands if _absolute_tokens(c)] == []
    assert sum("kernels/cutlass/attention_3k.cu" in c and "-I<cutlass-4.2.0>" in c for c in commands) == 7


def test_the_demo_history_holds_no_absolute_machine_path():
    """Every run of the demo history `make demo` loads: no machine path in any file, and the
    hand-written CUDA builds name their source as a repository path."""
    with tarfile.open(DEMO_HISTORY) as tar:
        members = tar.getmembers()
        assert all(not m.name.startswith("/") and ".." not in Path(m.name).parts for m in members)
        texts = {m.name: tar.extractfile(m).read().decode() for m in members if m.isfile()}
    manifests = [name for name in texts if name.endswith("/manifest.json")]
    assert len(manifests) == 8
    for name, text in texts.items():
        assert absolute_paths(text) == [], name
        assert "site-packages" not in text, name
    for name in (n for n in texts if n.endswith("/builds.json")):
        commands = [b["config"]["command"] for b in json.loads(texts[name])["builds"] if "command" in b["config"]]
        assert commands and [c for c in commands if _absolute_tokens(c)] == [], name
        assert all(" kernels/cuda/cuda_wmma.cu " in c for c in commands), name


# ---------------------------------------------------------------- records made by the code


@needs_nvcc
def test_a_real_build_record_holds_no_absolute_path(tmp_path):
    report = variant_build_report("cuda_scalar", "sm_90", cache_dir=tmp_path / "cache")
    assert report.ok, report.error
    command = report.config["command"]
    assert " kernels/cuda/cuda_scalar.cu " in command
    assert _machine_paths(dataclasses.asdict(report)) == []


@needs_nvcc
def test_a_cache_entry_written_with_absolute_paths_is_recorded_portably(tmp_path):
    """An entry from before this rule (the command as run, in this checkout) is a cache hit
    whose record reads as a new one would."""
    cache = tmp_path / "cache"
    first = variant_build_report("cuda_scalar", "sm_90", cache_dir=cache)
    meta_path = next(cache.glob("*.json"))
    meta = json.loads(meta_path.read_text())
    source = str(REPO_ROOT / "kernels" / "cuda" / "cuda_scalar.cu")
    meta["command"] = [source if part.endswith("cuda_scalar.cu") else part for part in meta["command"]]
    meta["log"] = f"{source}(1): warning: recorded as it was\n" + meta["log"]
    meta_path.write_text(json.dumps(meta))
    again = variant_build_report("cuda_scalar", "sm_90", cache_dir=cache)
    assert again.cached and again.config["command"] == first.config["command"]
    assert _machine_paths(dataclasses.asdict(again)) == []


@needs_nvcc
def test_a_failed_build_record_names_the_file_without_its_folder(tmp_path):
    source = tmp_path / "deep" / "broken_kernel.cu"
    source.parent.mkdir()
    source.write_text('extern "C" __global__ void k(float* x) { x[0] = undefined_name; }\n')
    with pytest.raises(NvccError) as info:
        nvcc_compile([source], arch="sm_90", cache_dir=tmp_path / "cache")
    assert str(source) in str(info.value)  # the developer here sees the real path
    report = failed_build_report("broken", info.value, "sm_90")
    assert report.error.startswith("<external>/broken_kernel.cu: nvcc exited")
    assert "undefined_name" in report.log_tail
    assert _machine_paths(dataclasses.asdict(report)) == []


@needs_nvcc
def test_a_named_include_folder_is_recorded_by_its_name(tmp_path):
    include = tmp_path / "site-packages" / "lib" / "include"
    include.mkdir(parents=True)
    (include / "tile.cuh").write_text("#define TILE 64\n")
    source = tmp_path / "k.cu"
    source.write_text('#include "tile.cuh"\nextern "C" __global__ void k(float* x) { x[0] = TILE; }\n')
    result = nvcc_compile(
        [source],
        arch="sm_90",
        include_dirs=[include],
        cache_dir=tmp_path / "cache",
        include_names={include: "<lib-1.0>"},
    )
    assert "-I<lib-1.0>" in result.command and "<external>/k.cu" in result.command
    assert _absolute_tokens(" ".join(result.command)) == []


# ---------------------------------------------------------------- the rule itself


def test_portable_path_rules(tmp_path):
    assert portable_path(REPO_ROOT / "kernels" / "cuda" / "cuda_wmma.cu") == "kernels/cuda/cuda_wmma.cu"
    assert portable_path(REPO_ROOT) == "."
    assert portable_path("kernels/x.cu") == "kernels/x.cu"  # relative: kept
    assert portable_path(tmp_path / "a" / "b.cuh") == "<external>/b.cuh"
    names = {tmp_path / "inc": "<cutlass-4.2.0>", tmp_path / "inc" / "cute": "<cute>"}
    assert portable_path(tmp_path / "inc" / "cutlass" / "gemm.h", names) == "<cutlass-4.2.0>/cutlass/gemm.h"
    assert portable_path(tmp_path / "inc" / "cute" / "tensor.hpp", names) == "<cute>/tensor.hpp"  # nested wins
    assert portable_path(tmp_path / "inc", names) == "<cutlass-4.2.0>"


def test_portable_command_handles_glued_flags(tmp_path):
    command = [
        "nvcc",
        f"-I{tmp_path}/inc",
        f"-L{tmp_path}/lib",
        f"--include-path={REPO_ROOT}/kernels",
        "-gencode=arch=compute_90a,code=sm_90a",
        str(REPO_ROOT / "kernels/cutlass/attention_3k.cu"),
        "-o",
        "abc.so",
    ]
    assert portable_command(command, {tmp_path / "inc": "<cutlass-4.2.0>"}) == (
        "nvcc",
        "-I<cutlass-4.2.0>",
        "-L<external>/lib",
        "--include-path=kernels",
        "-gencode=arch=compute_90a,code=sm_90a",
        "kernels/cutlass/attention_3k.cu",
        "-o",
        "abc.so",
    )


def test_portable_text_leaves_case_ids_urls_and_ratios_alone(tmp_path):
    text = (
        f"{tmp_path}/k.cu(3): error: x\nsdpa/l4_mission/fp16/causal 3/4 "
        f"https://github.com/o/r/actions/runs/1 see {REPO_ROOT}/kernels/nvcc.py"
    )
    assert portable_text(text) == (
        "<external>/k.cu(3): error: x\nsdpa/l4_mission/fp16/causal 3/4 "
        "https://github.com/o/r/actions/runs/1 see kernels/nvcc.py"
    )
    assert absolute_paths(portable_text(text)) == []
