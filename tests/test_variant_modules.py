"""Variants from outside the repository (ci/variant_modules.py): an installed distribution's
`attnwatch.variants` entry point and `--variant-module` reach `attnwatch run`'s measuring child
as they reach compare's workers, through the one loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

PLUGIN = """
import dataclasses
from attnwatch.kernels.variants.torch_3op import TORCH_3OP

def make():
    return [dataclasses.replace(TORCH_3OP, name="plugin_3op", description="torch_3op under a plugin's name")]
"""


def _site(tmp_path: Path, spec: str | None) -> Path:
    """A directory holding a module and, with `spec`, a distribution declaring it as an entry point."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "plug_variants.py").write_text(PLUGIN)
    if spec is not None:
        info = site / "plug_variants-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plug-variants\nVersion: 0.1\n")
        (info / "entry_points.txt").write_text(f"[attnwatch.variants]\nplug = {spec}\n")
    return site


def _run(tmp_path: Path, site: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(site)])}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "attnwatch",
            "run",
            "--device",
            "cpu",
            "--shapes",
            "cpu_tiny",
            "--variants",
            "plugin_3op",
            "--dtypes",
            "bf16",
            "--causal",
            "no",
            "--no-correctness",
            "--no-progress",
            "--time-cap",
            "0.05",
            "--commit",
            "ab" * 20,
            "--out",
            str(tmp_path / "bundle"),
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )


def _statuses(bundle: Path) -> dict[str, str]:
    return {c["case_id"]: c["status"] for c in json.loads((bundle / "outcomes.json").read_text())["cases"]}


@pytest.mark.slow
def test_an_entry_point_variant_is_measured_by_run(tmp_path):
    done = _run(tmp_path, _site(tmp_path, "plug_variants:make"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _statuses(tmp_path / "bundle") == {"plugin_3op/cpu_tiny/bf16/noncausal": "ok"}


def test_a_variant_module_that_does_not_load_is_a_usage_error(tmp_path):
    missing = _run(tmp_path, _site(tmp_path, None), "--variant-module", "no_such_module")
    assert missing.returncode == 2
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .endswith("--variant-module: no_such_module: No module named 'no_such_module'")
    )
    assert not (tmp_path / "bundle").exists()


@pytest.mark.slow
def test_run_takes_variant_module_as_compare_does(tmp_path):
    done = _run(tmp_path, _site(tmp_path, None), "--variant-module", "plug_variants:make")
    assert done.returncode == 0, done.stderr[-2000:]
    assert _statuses(tmp_path / "bundle") == {"plugin_3op/cpu_tiny/bf16/noncausal": "ok"}
