"""Read a 32-bit integer a kernel's source defines, from the cubin nvcc built (no GPU needed).

A CUDA source can state a number the host needs for the launch (the bytes of dynamic shared
memory it lays out, say) as an initialized `extern "C" __device__ const int NAME = ...;`. nvcc keeps
such a variable in the cubin's `.nv.global.init` section under its own symbol, so the host reads
the kernel's own figure instead of keeping a copy of the formula that drifts when the source
changes (a padding change in the source then trapped in the kernel, because the host still
passed the old size).

The cubin is an ELF64 little-endian file (the layout of the System V ABI's ELF specification):
the section headers give `.symtab` and its string table; the symbol's section index and value
(its offset inside that section) give the four bytes.
"""

from __future__ import annotations

import struct
from pathlib import Path

_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")  # name, type, flags, addr, offset, size, link, info, align, entsize
_SYMBOL = struct.Struct("<IBBHQQ")  # name, info, other, section index, value, size
SHT_SYMTAB = 2
SHT_NOBITS = 8


class CubinSymbolError(ValueError):
    """The cubin is not an ELF64 file, or lacks the symbol, or the symbol is not a stored int."""


def int_symbol(path: Path, name: str) -> int:
    """The signed 32-bit value of the initialized global `name` in the cubin at `path`."""
    data = Path(path).read_bytes()
    if data[:5] != b"\x7fELF\x02" or data[5] != 1:
        raise CubinSymbolError(f"{path}: not a 64-bit little-endian ELF cubin")
    try:
        (section_offset,) = struct.unpack_from("<Q", data, 0x28)
        entry_size, count = struct.unpack_from("<HH", data, 0x3A)
        sections = [_SECTION_HEADER.unpack_from(data, section_offset + i * entry_size) for i in range(count)]
        symtab = next(s for s in sections if s[1] == SHT_SYMTAB)
        strings = sections[symtab[6]]
        for index in range(symtab[5] // _SYMBOL.size):
            st_name, _, _, st_shndx, st_value, st_size = _SYMBOL.unpack_from(data, symtab[4] + index * _SYMBOL.size)
            start = strings[4] + st_name
            if data[start : data.index(b"\0", start)].decode(errors="replace") != name:
                continue
            if st_size != 4 or not 0 < st_shndx < len(sections) or sections[st_shndx][1] == SHT_NOBITS:
                raise CubinSymbolError(f"{path}: {name} is not an initialized 4-byte global")
            (value,) = struct.unpack_from("<i", data, sections[st_shndx][4] + st_value)
            return int(value)
    except CubinSymbolError:
        raise
    except (struct.error, StopIteration, IndexError, ValueError) as exc:
        raise CubinSymbolError(f"{path}: unreadable ELF ({type(exc).__name__}: {exc})") from None
    raise CubinSymbolError(f"{path}: no symbol {name}")
