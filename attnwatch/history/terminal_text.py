"""Text bound for a terminal: control characters escaped, one line, a bounded length.

A terminal acts on what it is sent: ESC starts a control sequence (colours, cursor moves, a
window title, OSC 52 writes to the clipboard), a C1 character (U+0080-U+009F) does the same on
terminals that honour 8-bit controls, CR and backspace overwrite what was printed, and the
bidirectional overrides and isolates (U+202A-U+202E, U+2066-U+2069) reorder what is shown.
Anything the project prints that came from outside (an error's text, a stored value, a file
name) goes through `printable` first: each such character becomes a visible `\\xNN` / `\\uNNNN`
escape, so the reader sees it instead of the terminal obeying it.
"""

from __future__ import annotations

import re

# C0 and DEL, C1, and the bidirectional embeddings, overrides and isolates (plus the line and
# paragraph separators, which some terminals and editors break lines at).
_OTHERS = r"\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
UNSAFE = re.compile(rf"[\x00-\x1f{_OTHERS}]")  # what a terminal, a chat message or a comment must not get raw
_UNSAFE_BUT_LINES_RE = re.compile(rf"[\x00-\x08\x0b-\x1f{_OTHERS}]")  # newline and tab kept
ELLIPSIS = "..."


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, keep_lines: bool = False) -> str:
    """`text` with every control, C1 and bidirectional control character escaped.

    `keep_lines`: leave newline and tab as they are (CSV records and tables span lines); CR and
    every other control character are escaped all the same.
    """
    return (_UNSAFE_BUT_LINES_RE if keep_lines else UNSAFE).sub(_escape, str(text))


def has_unsafe(text: str, keep_lines: bool = True) -> bool:
    """Whether `text` holds a character `printable` would escape (newline and tab allowed when
    `keep_lines`): what must never reach a terminal raw."""
    return bool((_UNSAFE_BUT_LINES_RE if keep_lines else UNSAFE).search(str(text)))


def one_line(text: str, limit: int = 400) -> str:
    """`text` as one printable line: its lines joined with ` | ` (blank ones dropped), control
    characters escaped, cut to at most `limit` characters with a trailing `...`."""
    joined = " | ".join(line.strip() for line in str(text).splitlines() if line.strip())
    line = printable(joined)
    return line if len(line) <= limit else line[: max(limit - len(ELLIPSIS), 0)] + ELLIPSIS
