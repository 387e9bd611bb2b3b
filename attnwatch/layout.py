"""Where the package's layers live in a checkout, and the names records give their files.

The folders `app`, `ci`, `history` and `kernels` are folders of this package (`attnwatch/kernels`);
the repository's top level holds a relative symbolic link to each (`kernels -> attnwatch/kernels`),
the names a user, the docs and every record use. A record that names a file of the checkout (a
build record's source, a fingerprint's file list) keeps that top-level name, so that a record
made before the folders moved into the package and one made after agree, and a compare between
revisions of either layout sees only what changed (docs/design.md, "Layers and the direction of
imports").

A leaf of the package itself, like `attnwatch/toml_reader.py`: it imports nothing of the project,
so every layer may import it. `kernels` does not (kernels.record_paths names the package's files by
their place in it): a compare imports one revision's `kernels/` beside another's `attnwatch`.
"""

from __future__ import annotations

from pathlib import PurePosixPath

PACKAGE = "attnwatch"
TOP_LEVEL = ("app", "ci", "history", "kernels")


def top_level_name(relative: str | PurePosixPath) -> str:
    """A path relative to the checkout's root, as records keep it: `attnwatch/kernels/cuda/cuda_wmma.cu`
    becomes `kernels/cuda/cuda_wmma.cu` (the top-level link's name); any other path is returned as given."""
    parts = PurePosixPath(relative).parts
    if len(parts) > 1 and parts[0] == PACKAGE and parts[1] in TOP_LEVEL:
        return PurePosixPath(*parts[1:]).as_posix()
    return PurePosixPath(relative).as_posix()
