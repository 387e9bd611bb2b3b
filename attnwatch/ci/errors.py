"""Errors the user can fix; the CLI prints them as one line and exits with 2."""

from __future__ import annotations


class UserError(Exception):
    pass
