"""The wire format between a compare worker and its parent: length-prefixed JSON over pipes.

A message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON (an object
with a `kind` or `op` field). The pipes are dedicated file descriptors passed to the worker,
not its stdin/stdout: a kernel library that prints cannot corrupt the channel, and the worker's
stdout and stderr go to its log file.

Each message is written with one `os.write` loop on a blocking descriptor; the reader keeps
partial data between calls, so a read with a timeout never loses bytes. A length above
`MAX_MESSAGE_BYTES` or a body that is not a JSON object is a protocol error (the peer is
broken; the parent then treats the worker as dead). End of file means the peer exited.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any, overload

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # samples of every case of a round fit with room to spare
_HEADER = struct.Struct(">I")


class ChannelClosed(Exception):
    """The peer closed its end (it exited or died)."""


class ProtocolError(Exception):
    """The peer sent something that is not a message of this protocol."""


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, allow_nan=True, default=str).encode("utf-8")
    if len(body) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
    return _HEADER.pack(len(body)) + body


def send(fd: int, message: dict[str, Any]) -> None:
    """Write one whole message; ChannelClosed when the reader is gone."""
    data = memoryview(encode(message))
    while data:
        try:
            written = os.write(fd, data)
        except BrokenPipeError:
            raise ChannelClosed("the reader closed the channel") from None
        data = data[written:]


class Reader:
    """Reads messages from `fd`, keeping partial data between calls."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = bytearray()

    def _message_from_buffer(self) -> dict[str, Any] | None:
        if len(self._buffer) < _HEADER.size:
            return None
        (length,) = _HEADER.unpack_from(self._buffer)
        if length > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"announced message of {length} bytes exceeds {MAX_MESSAGE_BYTES}")
        if len(self._buffer) < _HEADER.size + length:
            return None
        body = bytes(self._buffer[_HEADER.size : _HEADER.size + length])
        del self._buffer[: _HEADER.size + length]
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ProtocolError(f"message is not UTF-8 JSON: {exc}") from None
        if not isinstance(message, dict):
            raise ProtocolError(f"message is a {type(message).__name__}, not an object")
        return message

    @overload
    def read(self, timeout_s: None = None) -> dict[str, Any]: ...
    @overload
    def read(self, timeout_s: float | None) -> dict[str, Any] | None: ...
    def read(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The next message; None when `timeout_s` passes first (None: wait for ever)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            message = self._message_from_buffer()
            if message is not None:
                return message
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                raise ChannelClosed("end of file: the writer exited")
            self._buffer.extend(chunk)
