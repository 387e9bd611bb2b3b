"""Paths as a build record keeps them: relative to the repository, or named, never a machine's.

A build record (`BuildReport`: the compile command, the compiler's log, an error line) goes
into a run bundle and from there into a shared history and onto a dashboard. A runner's file
layout (its checkout folder, a wheel's site-packages folder, a temporary directory) says
nothing about the build and differs from machine to machine, so:

* a path inside the repository is written relative to its root, and one inside the package
  folder relative to that (`kernels/cuda/cuda_wmma.cu`, not `attnwatch/kernels/…`): the name
  the top-level link shows, in a checkout and a wheel alike, and the one every record before
  the folders moved into the package has;
* a folder the caller names is written as that name: the CUTLASS headers are `<cutlass-4.2.0>`
  wherever the wheel or the copy lives (kernels.cutlass.build names them);
* any other absolute path keeps only its file name, under `<external>`
  (`<external>/tile.cuh`): what the file was, not where it was.

The compiler itself is still called with the real paths; only what is recorded changes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping, Sequence

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # attnwatch/, which holds this kernels/
REPO_ROOT = PACKAGE_ROOT.parent  # the checkout's root
EXTERNAL = "<external>"
# An absolute POSIX path in free text: a "/" not preceded by a path or word character (or
# glued to -I / -L), then a name. Case ids ("sdpa/l4_mission/fp16/causal") and repository
# paths start with a word character and are left alone; so are URLs ("//" never matches).
_ABSOLUTE = re.compile(r"(?:(?<=-I)|(?<=-L)|(?<![\w.~<>/:-]))/(?:[\w.+-]+/)*[\w.+-]+")
# Flags that carry a path glued to them: -I/x, -L/x, -o/x, --include-path=/x, -isystem=/x.
_GLUED = re.compile(r"^(-I|-L|-o|-isystem|--[\w-]+=|-[\w-]+=)(/.*)$")

Names = Mapping[Path | str, str]


def _named(names: Names | None) -> list[tuple[str, str]]:
    """(folder as text, name), longest folder first so that a nested folder wins."""
    pairs = [(str(Path(folder)), label) for folder, label in (names or {}).items()]
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def portable_path(path: Path | str, names: Names | None = None, root: Path = REPO_ROOT) -> str:
    """One path as the record keeps it (see the module docstring); a relative path is kept."""
    text = str(path)
    if not text.startswith("/"):
        return text
    for folder, label in _named(names):
        if text == folder or text.startswith(folder + "/"):
            return label + text[len(folder) :]
    resolved = Path(text)
    if resolved.is_relative_to(PACKAGE_ROOT):
        return resolved.relative_to(PACKAGE_ROOT).as_posix()
    for base in {Path(root), Path(root).resolve()}:
        if resolved == base:
            return "."
        if resolved.is_relative_to(base):
            return resolved.relative_to(base).as_posix()
    return f"{EXTERNAL}/{resolved.name}" if resolved.name else EXTERNAL


def portable_command(command: Sequence[str], names: Names | None = None, root: Path = REPO_ROOT) -> tuple[str, ...]:
    """A compile command with every path argument made portable, glued flags (`-I/x`) too."""
    recorded = []
    for part in command:
        glued = _GLUED.match(part)
        if glued:
            recorded.append(glued.group(1) + portable_path(glued.group(2), names, root))
        else:
            recorded.append(portable_path(part, names, root))
    return tuple(recorded)


def portable_text(text: str, names: Names | None = None, root: Path = REPO_ROOT) -> str:
    """Free text (a compiler log, an error line) with every absolute path in it made portable."""
    for folder, label in _named(names):
        text = text.replace(folder, label)
    return _ABSOLUTE.sub(lambda match: portable_path(match.group(0), names, root), text)


def absolute_paths(text: str) -> list[str]:
    """The absolute paths in `text` (what `portable_text` would rewrite); tests use it as the check."""
    return _ABSOLUTE.findall(text)
