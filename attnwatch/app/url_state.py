"""Every view's state in the URL, so that any link (PR comment, alert, another page) reopens it.

The parameter names and their encoding are history.links' (one contract for writers and this
reader). A page makes one `UrlState` and binds each widget to a parameter in two steps:

  url.choice / many / flag / integer / text (key, param, ...)   before the widget is drawn:
      when the URL holds a value that differs from what this session last saw there (a fresh
      page load, or a link followed from another page), that value becomes the widget's state;
      otherwise the user's current choice stands. Values the widget cannot show are returned,
      so the page can say what it ignored instead of silently showing something else.
  url.publish(...)   after the widgets: the URL is rewritten to the current state.

Widgets are then drawn with `key=` only (no `index=`/`default=`), as Streamlit requires when
state is set through st.session_state.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import streamlit as st

from attnwatch.history.links import join_list, split_list

_SEEN = "_url_seen:"


def url_text(param: str) -> str | None:
    """The parameter's raw value ('' counts as absent); repeated parameters are comma-joined."""
    values = [v for v in st.query_params.get_all(param) if v != ""]
    return join_list(values) if values else None


def url_list(param: str) -> list[str]:
    return split_list(url_text(param))


def url_flag(param: str) -> bool | None:
    text = (url_text(param) or "").lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    return None


def encode(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (list, tuple)):
        return join_list(value)
    return str(value)


class UrlState:
    """One page's bindings between widget keys and URL parameters (create one per page run)."""

    def __init__(self) -> None:
        self.bound: dict[str, str] = {}  # param -> widget key

    def _changed(self, key: str, param: str) -> bool:
        self.bound[param] = key
        return key not in st.session_state or st.session_state.get(_SEEN + key) != url_text(param)

    def _seeded(self, key: str, param: str, value: Any) -> None:
        st.session_state[key] = value
        st.session_state[_SEEN + key] = url_text(param)

    def choice(
        self, key: str, param: str, options: Sequence[Any], default: Any, decode: Callable[[str], Any] = str
    ) -> list[str]:
        """Seed a single-choice widget (selectbox, radio); returns the URL's value if it is not an option."""
        if self._changed(key, param) or st.session_state.get(key) not in options:
            text = url_text(param)
            wanted = decode(text) if text is not None else None
            if wanted in options:
                self._seeded(key, param, wanted)
                return []
            self._seeded(key, param, default)
            return [text] if text is not None else []
        return []

    def many(self, key: str, param: str, options: Sequence[Any], default: Sequence[Any]) -> list[str]:
        """Seed a multiselect; returns the URL's values that are not options (they are dropped)."""
        current = st.session_state.get(key)
        if self._changed(key, param) or current is None or any(v not in options for v in current):
            wanted = url_list(param)
            kept = [v for v in wanted if v in options]
            self._seeded(key, param, kept or [v for v in default if v in options])
            return [v for v in wanted if v not in options]
        return []

    def flag(self, key: str, param: str, default: bool) -> None:
        """Seed a toggle or checkbox from `1`/`0`."""
        if self._changed(key, param):
            flag = url_flag(param)
            self._seeded(key, param, default if flag is None else flag)

    def integer(self, key: str, param: str, default: int, low: int, high: int) -> None:
        """Seed a slider; a value outside [low, high] or not a number gives the default."""
        if self._changed(key, param):
            try:
                value = int(url_text(param) or "")
            except ValueError:
                value = default
            self._seeded(key, param, value if low <= value <= high else default)

    def text(self, key: str, param: str, default: str = "") -> None:
        """Seed a text input."""
        if self._changed(key, param):
            self._seeded(key, param, url_text(param) or default)

    def publish(self, **extra: Any) -> None:
        """Write every bound widget's current value, and `extra` (param -> value, None removes
        it), to the URL; mark what was written as seen, so the next rerun does not take our own
        write for a followed link."""
        values = {param: st.session_state.get(key) for param, key in self.bound.items()}
        for param, value in {**values, **extra}.items():
            text = encode(value)
            if not text:
                if param in st.query_params:
                    del st.query_params[param]
            elif url_text(param) != text:
                st.query_params[param] = text
        for param, key in self.bound.items():
            st.session_state[_SEEN + key] = url_text(param)
