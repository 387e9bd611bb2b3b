"""attnwatch dashboard entrypoint: page setup and routing, nothing else.

Run with `attnwatch dashboard` (or `streamlit run app/streamlit_app.py`); the history is the
file named by $ATTNWATCH_DB. Every page reads it through short-lived read-only connections.
"""

from pathlib import Path

import streamlit as st

from attnwatch.app.data.store import current_source, schema_notice

# A file shipped with the package: Streamlit serves it from the dashboard's own server. An emoji
# or :material/...: page icon makes every load fetch an image from an outside font host, which an
# offline runner cannot reach (and which the dashboard should not call anyway).
ICON = Path(__file__).resolve().parent / "assets" / "icon.png"

st.set_page_config(page_title="attnwatch", page_icon=str(ICON), layout="wide")

PAGES = [
    st.Page("views/push.py", title="This push", icon=":material/rocket_launch:", default=True),
    st.Page("views/overview.py", title="Overview", icon=":material/dashboard:"),
    st.Page("views/trends.py", title="Trends", icon=":material/show_chart:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/alerts.py", title="Alerts", icon=":material/notifications:"),
    st.Page("views/kernel.py", title="Kernel", icon=":material/memory:"),
    st.Page("views/sql.py", title="SQL", icon=":material/terminal:"),
    st.Page("views/run.py", title="Run", icon=":material/receipt_long:"),
]

notice = schema_notice(current_source())
if notice:
    level, text = notice
    (st.warning if level == "warning" else st.caption)(text)

st.navigation(PAGES).run()
