r"""Escaping untrusted text (kernel names, branch names, error messages) for GitHub markdown.

GitHub renders a subset of HTML inside comments, so untrusted text must never reach the
comment as markup: `<`, `>` and `&` become entities, every markdown metacharacter is
backslash-escaped, `|` cannot break a table, newlines cannot start a block. Output is capped so
a long name cannot flood the comment.

Mentions and issue references are found by GitHub after rendering, in the text a reader sees,
so escaping them in markdown does nothing: `&#64;user` and `\#123` render as `@user` and
`#123` again. Instead a zero-width joiner (U+200D) follows every `@` and `#`: the rendered text
reads the same, but `@\u200duser` is no mention and `#\u200d123` no reference (GitHub's
patterns want a name or a number right after the sign). Code spans (`md_code`) are never
scanned for either.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from attnwatch.history.terminal_text import UNSAFE as _CONTROL  # C0, DEL, C1, line separators, bidi controls

_MARKDOWN_SPECIALS = set("\\`*_{}[]()#+-.!|~=:")
_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;", '"': "&quot;", "'": "&#39;"}
_ZWJ = "\u200d"
_INERT = {"@": "@" + _ZWJ, "#": "\\#" + _ZWJ}  # no mention, no issue reference (module docstring)


def md_text(value: object, limit: int = 200) -> str:
    """Untrusted value -> inert markdown text (one line, at most `limit` visible characters)."""
    text = _CONTROL.sub(" ", str(value))
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    out = []
    for ch in text:
        if ch in _INERT:
            out.append(_INERT[ch])
        elif ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _MARKDOWN_SPECIALS:
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def md_code(value: object, limit: int = 200) -> str:
    """Untrusted value as an inline code span; backticks and line breaks cannot escape it."""
    text = _CONTROL.sub(" ", str(value)).replace("`", "'")
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # GFM splits table cells on `|` even inside code spans; `\|` is the escape it honours there.
    text = text.replace("|", "\\|")
    return f"`{text}`" if text.strip() else "` `"


def safe_url(value: str | None) -> str | None:
    """An http(s) URL fit for a markdown link target, or None: no spaces, parentheses or quotes."""
    if not value:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    if any(ch in value for ch in " ()<>\"'`\\") or _CONTROL.search(value):
        return None
    return value
