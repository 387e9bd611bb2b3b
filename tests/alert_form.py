"""The Alerts page's action form in AppTest: its widgets' keys name the group, the alert and the
changes written so far (app/views/alerts.py), so a test finds them by what they end with."""

from __future__ import annotations


def form_key(at, field: str) -> str:
    """The key of the shown form's `field` (note, who or scope)."""
    widgets = {"note": at.text_area, "who": at.text_input, "scope": at.radio}[field]
    (key,) = {w.key for w in widgets if w.key and w.key.startswith("alerts_action:") and w.key.endswith(":" + field)}
    return key


def fill(at, note: str | None = None, actor: str | None = "kernel-dev", scope: str | None = None) -> None:
    """Act on `scope` ('one': the alert drawn, 'group': every unresolved alert of its group) with
    `note` and `actor` typed in (None: that field left as it is)."""
    if scope:
        at.radio(key=form_key(at, "scope")).set_value(scope).run()
    if note is not None:
        at.text_area(key=form_key(at, "note")).input(note)
    if actor is not None:
        at.text_input(key=form_key(at, "who")).input(actor)
