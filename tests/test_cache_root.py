"""Caches that survive an ephemeral runner (issue #43): one cache root holding nvcc's, Triton's and
CuPy's caches and the float64 references; a toolchain key (`attnwatch cache-key`) that changes
with any tool; gpu-bench's compare job restoring and saving that root under the key; and a root
carried to a fresh process (as actions/cache does, by tar) answering from its entries."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from attnwatch.ci import cache_key
from attnwatch.ci.child_env import child_env
from attnwatch.ci.errors import UserError
from attnwatch.kernels.compile_cache import cache_root, default_cache_dir, tool_cache_env

ROOT = Path(__file__).resolve().parent.parent
GPU_BENCH = ROOT / ".github" / "workflows" / "gpu-bench.yml"
EXPRESSION = re.compile(r"\$\{\{\s*([^}]+?)\s*\}\}")


def _attnwatch(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "attnwatch", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


# ---------------------------------------------------------------- one root


def test_every_cache_lives_under_the_one_root(tmp_path):
    env = {"ATTNWATCH_CACHE": str(tmp_path / "root"), "ATTNWATCH_TRUST": "untrusted"}
    assert cache_root(env) == tmp_path / "root"
    assert default_cache_dir("nvcc", env) == tmp_path / "root" / "nvcc" / "untrusted"
    assert default_cache_dir("reference", env) == tmp_path / "root" / "reference" / "untrusted"
    assert tool_cache_env(env) == {
        "TRITON_CACHE_DIR": str(tmp_path / "root" / "triton" / "untrusted"),
        "CUPY_CACHE_DIR": str(tmp_path / "root" / "cupy" / "untrusted"),
    }
    assert tool_cache_env({**env, "TRITON_CACHE_DIR": "/elsewhere"}).keys() == {"CUPY_CACHE_DIR"}  # a choice is kept
    assert cache_root({"XDG_CACHE_HOME": str(tmp_path / "xdg")}) == tmp_path / "xdg" / "attnwatch"
    assert cache_root({"ATTNWATCH_CACHE": " "}) == Path.home() / ".cache" / "attnwatch"  # the user's cache folder


def test_a_measuring_child_gets_the_compilers_caches_under_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNWATCH_CACHE", str(tmp_path / "root"))
    monkeypatch.setenv("ATTNWATCH_TRUST", "untrusted")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    env = child_env(tmp_path / "work", None)
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['TRITON_CACHE_DIR']); print(os.environ['CUPY_CACHE_DIR'])"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == [
        str(tmp_path / "root" / "triton" / "untrusted"),
        str(tmp_path / "root" / "cupy" / "untrusted"),
    ]
    monkeypatch.setenv("ATTNWATCH_TRUST", "main")
    with pytest.raises(UserError, match="ATTNWATCH_TRUST='main'"):
        child_env(tmp_path / "work", None)


# ---------------------------------------------------------------- the toolchain key


def _fake_tool(folder: Path, name: str, output: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    tool = folder / name
    tool.write_text(f"#!/bin/sh\necho '{output}'\n")
    tool.chmod(0o755)


def test_the_key_is_one_line_and_changes_with_any_tool(tmp_path):
    """Real `attnwatch cache-key` processes: a stand-in nvcc of another release changes the key."""
    path = os.environ["PATH"]
    keys = {}
    for release in ("12.8", "13.0"):
        _fake_tool(tmp_path / release, "nvcc", f"Cuda compilation tools, release {release}")
        done = _attnwatch("cache-key", env={"PATH": f"{tmp_path / release}{os.pathsep}{path}"})
        assert done.returncode == 0, done.stderr
        keys[release] = done.stdout
        assert re.fullmatch(r"[0-9a-f]{16}\n", done.stdout)
    assert keys["12.8"] != keys["13.0"]
    described = json.loads(
        _attnwatch("cache-key", "--json", env={"PATH": f"{tmp_path / '13.0'}{os.pathsep}{path}"}).stdout
    )
    assert described["parts"]["nvcc"] == "Cuda compilation tools, release 13.0"
    assert described["key"] + "\n" == keys["13.0"]
    parts = cache_key.toolchain_parts()
    assert set(parts) == {"nvcc", "driver", "torch", "triton", "cupy", "python"}
    for name in parts:
        assert cache_key.toolchain_key({**parts, name: parts[name] + "-other"}) != cache_key.toolchain_key(parts), name


def test_cache_key_root_prints_the_root(tmp_path):
    done = _attnwatch("cache-key", "--root", env={"ATTNWATCH_CACHE": str(tmp_path / "mounted")})
    assert done.stdout == f"{tmp_path / 'mounted'}\n"


# ---------------------------------------------------------------- the workflow


def _compare_steps() -> list[dict]:
    workflow = YAML(typ="safe").load(GPU_BENCH.read_text())
    return workflow["jobs"]["compare"]["steps"]


def _step(steps: list[dict], predicate) -> tuple[int, dict]:
    (found,) = [(i, s) for i, s in enumerate(steps) if predicate(s)]
    return found


def _evaluate(text: str, context: dict[str, str]) -> str:
    """The workflow's `${{ name }}` lookups of plain context names (all the cache steps use)."""
    return EXPRESSION.sub(lambda m: context[m.group(1)], text)


def _run_key_step(script: str, tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    """The key step's own script under bash, `.venv/bin/attnwatch` this checkout's CLI: its outputs."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (bin_dir / "attnwatch").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m attnwatch "$@"\n')
    (bin_dir / "attnwatch").chmod(0o755)
    outputs = tmp_path / "github_output"
    outputs.write_text("")
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**env, "PYTHONPATH": str(ROOT), "GITHUB_OUTPUT": str(outputs)},
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split("=", 1) for line in outputs.read_text().splitlines())


def test_the_compare_job_restores_and_saves_the_root_under_the_toolchain_key(tmp_path):
    steps = _compare_steps()
    key_at, key_step = _step(steps, lambda s: s.get("id") == "cache")
    restore_at, restore = _step(steps, lambda s: str(s.get("uses", "")).startswith("actions/cache/restore@"))
    verify_at, verify = _step(steps, lambda s: "cache-key --verify" in s.get("run", ""))
    compare_at, _ = _step(steps, lambda s: "attnwatch compare" in s.get("run", ""))
    seal_at, seal = _step(steps, lambda s: "cache-key --seal" in s.get("run", ""))
    save_at, save = _step(steps, lambda s: str(s.get("uses", "")).startswith("actions/cache/save@"))
    install_at, _ = _step(steps, lambda s: "make install" in s.get("run", ""))
    # Triton's entries checked against the manifest after the restore, the manifest written before the save
    assert install_at < key_at < restore_at < verify_at < compare_at < seal_at < save_at
    assert "always()" in save["if"] and seal["if"] == save["if"]  # a failed compare still keeps what it compiled
    assert verify["if"] == restore["if"]

    env = {k: v for k, v in os.environ.items() if k != "ATTNWATCH_CACHE"}
    home = tmp_path / "home"
    outputs = _run_key_step(key_step["run"], tmp_path, {**env, "HOME": str(home), "XDG_CACHE_HOME": ""})
    assert "mounted" not in outputs
    assert outputs["key"] == cache_key.toolchain_key() and outputs["root"] == str(home / ".cache" / "attnwatch")

    context = {f"steps.{key_step['id']}.outputs.{name}": value for name, value in outputs.items()}
    context |= {"runner.os": "Linux", "github.run_id": "1001", "github.run_attempt": "1"}
    for step in (restore, save):
        assert _evaluate(step["with"]["path"], context) == outputs["root"]
        assert _evaluate(step["if"], {f"steps.{key_step['id']}.outputs.mounted": "''"}).count("'true'") == 1
    saved = _evaluate(save["with"]["key"], context)
    assert saved == _evaluate(restore["with"]["key"], context) and outputs["key"] in saved
    prefix = _evaluate(restore["with"]["restore-keys"], context)
    # actions/cache restores the newest entry whose key starts with the prefix: an earlier run of
    # this toolchain, never another toolchain's, nor a trusted job's.
    earlier = _evaluate(save["with"]["key"], context | {"github.run_id": "999"})
    other_toolchain = _evaluate(save["with"]["key"], context | {f"steps.{key_step['id']}.outputs.key": "0" * 16})
    assert earlier.startswith(prefix) and not other_toolchain.startswith(prefix)
    assert "untrusted" in prefix and outputs["key"] in prefix


def test_a_runner_with_a_mounted_cache_folder_restores_nothing(tmp_path):
    steps = _compare_steps()
    _, key_step = _step(steps, lambda s: s.get("id") == "cache")
    mounted = tmp_path / "mounted"
    outputs = _run_key_step(key_step["run"], tmp_path, {**os.environ, "ATTNWATCH_CACHE": str(mounted)})
    assert outputs["mounted"] == "true" and outputs["root"] == str(mounted)
    for step in steps:
        run = step.get("run", "")
        if str(step.get("uses", "")).startswith("actions/cache") or "--seal" in run or "--verify" in run:
            assert "steps.cache.outputs.mounted != 'true'" in step["if"]


def test_no_trusted_job_restores_a_github_cache():
    """The trusted caches are the runner's own folder: no actions/cache could plant entries in them."""
    for name in ("gpu-bench.yml", "bisect.yml", "history-maintain.yml", "pr-comment.yml"):
        workflow = YAML(typ="safe").load((GPU_BENCH.parent / name).read_text())
        for job in workflow["jobs"].values():
            if job.get("env", {}).get("ATTNWATCH_TRUST") == "trusted":
                assert not any(str(s.get("uses", "")).startswith("actions/cache") for s in job.get("steps", [])), name


# ---------------------------------------------------------------- a root carried to a fresh process

FRESH_PROCESS = """
import sys, torch
from attnwatch.kernels import reference_cache
from attnwatch.kernels.cases import Case
from attnwatch.kernels.operators import get_operator
from attnwatch.kernels.shapes import adhoc_shape

attention = get_operator("attention")
computed = []
class Counting:
    name, make_inputs = attention.name, staticmethod(attention.make_inputs)
    def reference64(self, inputs, mode):
        computed.append(1)
        return attention.reference64(inputs, mode)

case = Case("sdpa", adhoc_shape(1, 2, 40, 64), "fp16", True)
op = Counting()
for seed in (0, 1):
    inputs = attention.make_inputs(case.shape, case.dtype, case.mode, torch.device("cpu"), seed)
    reference_cache.cached_reference(op, case, inputs, seed)
print(len(computed))
"""


def test_a_restored_root_answers_a_fresh_process(tmp_path):
    """As on a fresh runner: a process fills a root, the root goes through tar (actions/cache's
    archive) to another folder, and a new process there computes nothing again."""
    script = tmp_path / "fresh_process.py"
    script.write_text(FRESH_PROCESS)

    def fresh(root: Path) -> int:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYTHONPATH": str(ROOT), "ATTNWATCH_CACHE": str(root), "ATTNWATCH_TRUST": "untrusted"},
        )
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip())

    assert fresh(tmp_path / "first") == 2
    archive = tmp_path / "cache.tar"
    with tarfile.open(archive, "w") as tar:
        tar.add(tmp_path / "first", arcname="attnwatch")
    (tmp_path / "runner").mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "runner", filter="tar")
    restored = tmp_path / "runner" / "attnwatch"
    assert fresh(restored) == 0
    entries = sorted((restored / "reference" / "untrusted").glob("*.f64"))
    raw = bytearray(entries[0].read_bytes())
    raw[-1] ^= 0x01  # a damaged archive: that entry alone is computed again
    entries[0].write_bytes(bytes(raw))
    assert fresh(restored) == 1
