"""What a DuckDB write-ahead log holds, read from its framing without replaying it.

DuckDB 1.5 writes a log (version 2) as a header and then entries:

    header   the WAL_VERSION entry, unframed: field 100 (the entry type, 98), field 101 (the
             version), end of object:        64 00 62 65 00 <version> ff ff
    entry    uint64 size, uint64 checksum, then `size` bytes: the serialized entry, whose first
             field (64 00) is its type

A COMMIT writes the transaction's entries followed by a WAL_FLUSH entry (type 100, serialized as
64 00 64 ff ff), so a transaction is the entries up to and including a flush: the transactions
before the last flush were committed, and bytes after it are not a committed transaction (one
cut off mid-write, or damage). DuckDB's own replay (at open, or ATTACH) replays each transaction
whose flush it reads, drops a cut-off tail without a word, ignores a log whose header it cannot
read (and leaves it in place), and refuses the whole log when an entry's checksum does not match.
history.store.recover uses this to say which transactions were replayed and which were not.
"""

from __future__ import annotations

from dataclasses import dataclass

KNOWN_VERSION = 2  # the log version whose framing this reads (DuckDB 1.5)
_HEADER_START = b"\x64\x00\x62\x65\x00"  # field 100 = WAL_VERSION (98), field 101 = ...
_END = b"\xff\xff"
_TYPE_FIELD = b"\x64\x00"
_FLUSH = b"\x64\x00\x64\xff\xff"  # field 100 = WAL_FLUSH (100), end of object
_FRAME = 16  # uint64 size + uint64 checksum

# What follows the last committed transaction (LogLayout.tail):
CUT = "cut"  # an entry cut short: a transaction cut off mid-write
UNCOMMITTED = "uncommitted"  # whole entries but no flush: a transaction whose commit never completed
UNREADABLE = "unreadable"  # bytes that are not a log entry


@dataclass(frozen=True)
class LogLayout:
    """A log's `size` in bytes, its `version` (None: no header DuckDB reads, so not a log to it),
    the (start, end) byte range of each committed transaction (in order), and what follows them:
    `tail` ("" when nothing does) from byte `tail_start`."""

    size: int
    version: int | None
    transactions: tuple[tuple[int, int], ...] = ()
    tail: str = ""
    tail_start: int = 0

    @property
    def readable(self) -> bool:
        """Whether this reader knows the log's framing (its transactions and tail are then known)."""
        return self.version == KNOWN_VERSION

    @property
    def header_end(self) -> int:
        return self.transactions[0][0] if self.transactions else self.tail_start

    def end_of(self, count: int) -> int:
        """The byte after the first `count` transactions (the header's end when `count` is 0)."""
        return self.transactions[count - 1][1] if count else self.header_end

    def transaction_at(self, position: int) -> int | None:
        """The 0-based index of the transaction holding byte `position`, or None."""
        return next((i for i, (start, end) in enumerate(self.transactions) if start <= position < end), None)


def read_layout(data: bytes) -> LogLayout:
    """The layout of a log's bytes (module docstring); never raises."""
    version, header_end = _header(data)
    if version is None or version != KNOWN_VERSION:
        return LogLayout(len(data), version, tail_start=header_end)
    transactions, start, position, tail = [], header_end, header_end, ""
    while position < len(data):
        if len(data) - position < _FRAME:
            tail = CUT
            break
        size = int.from_bytes(data[position : position + 8], "little")
        payload = data[position + _FRAME : position + _FRAME + size]
        if not _TYPE_FIELD.startswith(payload[:2]) or size < len(_FLUSH):
            tail = UNREADABLE
            break
        if len(payload) < size:
            tail = CUT
            break
        position += _FRAME + size
        if payload == _FLUSH:
            transactions.append((start, position))
            start = position
    if not tail and start < len(data):
        tail = UNCOMMITTED
    return LogLayout(len(data), version, tuple(transactions), tail, start)


def _header(data: bytes) -> tuple[int | None, int]:
    """(the log's version, the header's end), or (None, 0) when it has no header DuckDB reads."""
    if not data.startswith(_HEADER_START):
        return None, 0
    version, shift, position = 0, 0, len(_HEADER_START)
    while position < len(data) and shift < 64:  # an unsigned LEB128 varint
        byte = data[position]
        version |= (byte & 0x7F) << shift
        position += 1
        shift += 7
        if not byte & 0x80:
            break
    else:
        return None, 0
    if data[position : position + 2] != _END:
        return None, 0
    return version, position + 2
