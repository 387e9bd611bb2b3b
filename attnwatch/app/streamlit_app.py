"""attnwatch dashboard entrypoint: page setup and routing, nothing else.

Run with `attnwatch dashboard` (or `streamlit run app/streamlit_app.py`); the history is the
file named by $ATTNWATCH_DB. Every page reads it through short-lived read-only connections.
"""

from pathlib import Path

import streamlit as st

from attnwatch.app.data.store import current_source, schema_notice
from attnwatch.history.links import PAGES

# A file shipped with the package: Streamlit serves it from the dashboard's own server. An emoji
# or :material/...: page icon makes every load fetch an image from an outside font host, which an
# offline runner cannot reach (and which the dashboard should not call anyway).
ICON = Path(__file__).resolve().parent / "assets" / "icon.png"

st.set_page_config(page_title="attnwatch", page_icon=str(ICON), layout="wide")

# The navigation, in the order of the one page declaration (history.links.PAGES); the first
# page is the default, what a link to the dashboard opens.
NAVIGATION = [st.Page(page.script, title=page.title, icon=page.icon, default=page is PAGES[0]) for page in PAGES]

notice = schema_notice(current_source())
if notice:
    level, text = notice
    (st.warning if level == "warning" else st.caption)(text)

st.navigation(NAVIGATION).run()
