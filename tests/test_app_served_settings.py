"""How `attnwatch dashboard` serves the app, installed or from a checkout (issue 26): the
viewer's toolbar (no "Deploy" button) and a page icon shipped as package data, so nothing is
fetched from outside the dashboard's own server. The browser side: tests/test_browser_layout.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

from PIL import Image

from attnwatch.cli.commands.dashboard import entrypoint, streamlit_command

ROOT = Path(__file__).resolve().parent.parent


def test_the_dashboard_runs_with_the_viewer_toolbar():
    command = streamlit_command(8600, "127.0.0.1")
    assert command[command.index("--client.toolbarMode") + 1] == "viewer"


def test_the_page_icon_is_a_png_the_package_ships():
    icon = entrypoint().parent / "assets" / "icon.png"
    with Image.open(icon) as image:
        assert image.format == "PNG"
    shipped = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["*"]
    assert "*.png" in shipped
    assert "page_icon=str(ICON)" in (entrypoint()).read_text(encoding="utf-8")
