"""SQL: query the history with DuckDB SQL — read-only and locked down exactly like
`attnwatch sql` — with a schema browser, example queries, a results table and CSV / Parquet
downloads. A refused or failing query is a message, never a traceback."""

import streamlit as st

from app import ui
from app.data import sql_console
from history.errors import HistoryError


def load_example() -> None:
    chosen = st.session_state.get("sql_example")
    for example in sql_console.examples():
        if example.title == chosen:
            st.session_state["sql_text"] = example.sql


def schema_browser(source) -> None:
    """Pick a table or view, see its columns and types."""
    with st.expander("Schema browser: tables and views", expanded=False):
        overview = sql_console.schema(source)
        objects = overview[["object", "kind"]].drop_duplicates()
        labels = {row.object: f"{row.object} ({row.kind})" for row in objects.itertuples()}
        chosen = st.selectbox("table or view", list(labels), format_func=labels.get, key="sql_schema_object")
        st.dataframe(overview[overview["object"] == chosen][["column", "type"]], hide_index=True, width="stretch")


def sql_page(source, shape):
    examples = sql_console.examples()
    st.session_state.setdefault("sql_text", examples[0].sql)
    schema_browser(source)
    st.selectbox("example queries", [e.title for e in examples], index=None, placeholder="load an example…",
                 key="sql_example", on_change=load_example)
    sql = st.text_area("SQL (read-only)", key="sql_text", height=200, max_chars=20_000)
    if st.button("Run query", type="primary", key="sql_run"):
        try:
            st.session_state["sql_result"] = (sql, sql_console.run_query(source, sql), None)
        except HistoryError as exc:
            st.session_state["sql_result"] = (sql, None, str(exc))
    result = st.session_state.get("sql_result")
    if not result:
        st.caption(f"Results are capped at {sql_console.MAX_ROWS:,} rows, {sql_console.MAX_BYTES // 2**20} MiB "
                   f"and {sql_console.TIMEOUT_S:g} s.")
        return
    ran_sql, frame, error = result
    if error:
        st.error(f"Query refused or failed: {ui.md(error)}")
        return
    if ran_sql != sql:
        st.caption("Showing the result of the previous query; press Run query for the edited one.")
    elapsed = frame.attrs.get("elapsed_s")
    st.caption(
        f"{len(frame):,} row(s)" + sql_console.limit_note(frame)
        + (f" in {elapsed:.3f} s" if elapsed is not None else "")
    )
    st.dataframe(frame, hide_index=True, width="stretch")
    cols = st.columns(2)
    cols[0].download_button("Download CSV", frame.to_csv(index=False).encode("utf-8"), file_name="attnwatch_query.csv",
                            mime="text/csv", on_click="ignore", key="sql_csv")
    try:
        parquet = sql_console.to_parquet(frame)
    except HistoryError as exc:
        cols[1].caption(ui.md(str(exc)))
    else:
        cols[1].download_button("Download Parquet", parquet, file_name="attnwatch_query.parquet",
                                mime="application/vnd.apache.parquet", on_click="ignore", key="sql_parquet")


ui.run_page("SQL", sql_page)
