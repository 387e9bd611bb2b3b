"""The built wheel in a fresh virtual environment, for the tests that install attnwatch as a user
would (tests/test_wheel_install.py, tests/test_adopt_example.py).

The wheel is built once per test session (conftest.py's `attnwatch_wheel`) and installed
without dependencies; the dependencies come from the test's own environment through a path
file (a fresh download of torch would take minutes), behind the fresh environment's own.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pip(python: Path, *args: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "--disable-pip-version-check", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def build_wheel(folder: Path) -> Path:
    """This checkout's wheel, built into `folder`."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(folder), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return next(folder.glob("attnwatch-*.whl"))


def fresh_venv(work: Path) -> Path:
    """A fresh environment at `work/venv`, this environment's packages behind its own; returns its python."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # This environment's packages (duckdb, streamlit, torch, pip...) behind the fresh one's own.
    # In sys.path's order: the first setuptools found must be the one this environment builds with.
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (purelib / "zz_test_dependencies.pth").write_text("\n".join(ours) + "\n", encoding="utf-8")
    return python


def venv_with_wheel(work: Path, wheel: Path) -> Path:
    """A fresh environment at `work/venv` holding the wheel; returns its python."""
    python = fresh_venv(work)
    pip(python, "install", "--no-deps", "--no-index", str(wheel))
    return python
