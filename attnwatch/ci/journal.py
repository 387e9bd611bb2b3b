"""The JSON-lines journal a measuring child appends to and its parent reads while it runs.

Why a journal: a kernel that corrupts memory can kill the child at any instant (an abort, an
illegal address that poisons the CUDA context) and a hung kernel never returns. Every result
is journalled the moment it exists, each line written with one `os.write` on an O_APPEND
descriptor (no buffering to lose), so whatever the child finished survives it, and the last
`begin`/`beat` line names the case in flight when it died or went silent.

Each line is one event `{"kind": ..., "t": <unix time>, ...}`: the measuring engine's events
(ci/engine/events.py: `build_begin`/`build`, `begin`/`beat` (case, stage), `correctness`,
`result`, `fault`), the same vocabulary a compare worker sends over its pipe, and the pytest
harness's own: `session` (environment), `bench` (pytest-benchmark entry), `outcome` (final
status of a case), `note`.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterator


class JournalWriter:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, "t": time.time(), **fields}, default=str, allow_nan=True) + "\n"
        os.write(self._fd, line.encode("utf-8"))

    def close(self) -> None:
        os.close(self._fd)


class JournalReader:
    """Incremental reader: `read_new()` returns complete lines appended since the last call."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._offset = 0
        self._partial = b""

    def read_new(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            chunk = fh.read()
        self._offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an incomplete last line waits for its end
        return list(_parse(lines))


def _parse(lines: list[bytes]) -> Iterator[dict[str, Any]]:
    for raw in lines:
        if not raw.strip():
            continue
        try:
            yield json.loads(raw)
        except json.JSONDecodeError:
            # A torn line can only be the last one of a killed child; it carries no result.
            continue
