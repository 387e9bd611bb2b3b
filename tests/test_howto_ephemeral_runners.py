"""docs/howto/ephemeral-runners.md: the runner's .env line it shows makes the cache root the mounted
folder, its check commands print what the page says, and the key prefix it names is the
workflow's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML

from howto_support import HOWTO, code_blocks

ROOT = Path(__file__).resolve().parent.parent
PAGE = "ephemeral-runners.md"


def test_the_pages_env_line_and_checks_work(tmp_path):
    (env_line,) = code_blocks(PAGE, "text")
    name, mounted = env_line.strip().split("=", 1)
    assert name == "ATTNWATCH_CACHE"
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "attnwatch").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m attnwatch "$@"\n')
    (bin_dir / "attnwatch").chmod(0o755)
    (checks,) = code_blocks(PAGE, "bash")
    done = subprocess.run(
        ["bash", "-eo", "pipefail", "-c", checks],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), name: mounted},
    )
    assert done.returncode == 0, done.stderr
    root, key, *described = done.stdout.splitlines()
    assert root == mounted
    assert json.loads("\n".join(described))["key"] == key


def test_the_key_prefix_the_page_names_is_the_workflows():
    workflow = YAML(typ="safe").load((ROOT / ".github" / "workflows" / "gpu-bench.yml").read_text())
    (restore,) = [
        s for s in workflow["jobs"]["compare"]["steps"] if str(s.get("uses", "")).startswith("actions/cache/restore@")
    ]
    prefix = restore["with"]["restore-keys"]
    page = (HOWTO / PAGE).read_text()
    shown = prefix.replace("${{ runner.os }}", "<os>").replace("${{ steps.cache.outputs.key }}", "<toolchain key>")
    assert f"`{shown}`" in page
