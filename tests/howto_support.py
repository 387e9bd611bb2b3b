"""Following a how-to of docs/howto/ in a throw-away copy of the checkout.

Each how-to's test takes the code blocks the page shows (`code_blocks`), applies them to a copy of
the checkout's files (`copy_checkout`: tracked and untracked-but-not-ignored files, symbolic
links kept as links), and runs attnwatch there in a child process whose imports resolve to the
copy (`run_in`), so a step the page leaves out, or a block that no longer works, fails the test.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOWTO = ROOT / "docs" / "howto"
_FENCE = re.compile(r"^( *)```(\w+)\n(.*?)^\1```$", re.MULTILINE | re.DOTALL)


def code_blocks(page: str, language: str) -> list[str]:
    """The page's fenced blocks of `language`, in order, with the list item's indent removed."""
    text = (HOWTO / page).read_text(encoding="utf-8")
    return [textwrap.dedent(body) for _, lang, body in _FENCE.findall(text) if lang == language]


def copy_checkout(dest: Path) -> Path:
    """The checkout's files (what `git ls-files -co --exclude-standard` lists) copied under `dest`."""
    listed = (
        subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        source, target = ROOT / name, dest / name
        if not source.is_symlink() and not source.is_file():
            continue  # listed but deleted in the working tree
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        else:
            shutil.copy2(source, target)
    return dest


def insert_after(path: Path, anchor: str, text: str) -> None:
    """Put `text` on the lines after the line holding `anchor` (which must occur once)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if anchor in line]
    assert len(at) == 1, (path, anchor, at)
    lines.insert(at[0] + 1, text if text.endswith("\n") else text + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def run_in(
    copy: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """`python ARGS` in `copy`, importing attnwatch from the copy."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("ATTNWATCH_")}
    environment.update({"PYTHONPATH": str(copy), **(env or {})})
    return subprocess.run(
        [sys.executable, *args], cwd=copy, env=environment, capture_output=True, text=True, timeout=timeout
    )
