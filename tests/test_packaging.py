"""`pip install .` of this checkout: a clean build that leaves nothing behind in the tree.

Real pip, a real virtual environment (no system site packages) and setuptools' real build in
its isolated environment, on a copy of the checkout's tracked files.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked_copy(dest: Path) -> Path:
    """The checkout as a fresh clone would have it: tracked and new, not ignored, files only."""
    listed = (
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@pytest.mark.slow
def test_pip_install_leaves_no_build_output_in_the_tree_and_no_license_warning(tmp_path):
    source = _tracked_copy(tmp_path / "checkout")
    before = {p.relative_to(source) for p in source.rglob("*")}
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-v", "--no-deps", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    new = sorted(
        str(p.relative_to(source))
        for p in source.rglob("*")
        if p.relative_to(source) not in before and "__pycache__" not in p.parts
    )
    assert new == [], "the build wrote into the source tree"
    log = done.stdout + done.stderr
    assert not re.search(r"license.*deprecat|deprecat.*license", log, flags=re.IGNORECASE), log[-3000:]
    alone = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the installed files answer
    installed = subprocess.run(
        [
            str(python),
            "-c",
            "import attnwatch.app, attnwatch.history, attnwatch.kernels, "
            "attnwatch.ci.port; print(attnwatch.ci.port.DEFAULT_PORT)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env=alone,
    )
    assert installed.stdout.strip() == "8501", installed.stderr
    assert (env_dir / "bin" / "attnwatch").is_file()


@pytest.mark.slow
def test_editable_install_prints_no_same_name_warning(tmp_path):
    """`make install` (and so `make demo`) runs `pip install -e .`, and pip printed setuptools'
    "Editable installation ... be careful with folders in your working directory with the same name
    as your package" on every fresh set-up (issue 44). The folder it means is the package's own
    source here; the backend silences that warning, and the install still imports from the tree."""
    source = _tracked_copy(tmp_path / "checkout")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-v", "--no-deps", "-e", str(source)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    log = done.stdout + done.stderr
    assert not re.search(r"Editable installation\.|same\s+name as your package|InformationOnly", log), log[-3000:]
    alone = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [str(python), "-c", "import attnwatch.ci.port, attnwatch.app; print(attnwatch.ci.port.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env=alone,
    )
    assert installed.stdout.strip() == str(source / "attnwatch" / "ci" / "port.py"), installed.stderr
