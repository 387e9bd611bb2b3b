"""SQL: query the history with DuckDB SQL — read-only and locked down exactly like
`attnwatch sql` — with a schema browser, example queries, a results table and CSV / Parquet
downloads. The query run is kept in the URL (`?sql=`), so the page's link reruns it and shows
its result. A refused or failing query, or anything else that goes wrong, is a one-line
message, never a traceback."""

import pandas as pd
import streamlit as st

from attnwatch.app import table_layout, ui
from attnwatch.app.data import sql_console
from attnwatch.app.url_state import url_text
from attnwatch.history.errors import HistoryError
from attnwatch.history.sql.guard import public_text

URL_PARAM = "sql"  # history.links.PARAMS
_URL_SEEN = "_url_seen:sql"


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
        chosen = st.selectbox(
            "table or view", list(labels), format_func=lambda name: labels[name], key="sql_schema_object"
        )
        st.dataframe(overview[overview["object"] == chosen][["column", "type"]], hide_index=True, width="stretch")


def run(source, sql: str) -> None:
    """Run `sql`, keep its result for this session, and put it in the URL (the page's permalink)."""
    try:
        st.session_state["sql_result"] = (sql, sql_console.run_query(source, sql), None)
    except HistoryError as exc:
        st.session_state["sql_result"] = (sql, None, str(exc))
    if sql.strip():
        st.query_params[URL_PARAM] = sql
    elif URL_PARAM in st.query_params:
        del st.query_params[URL_PARAM]
    st.session_state[_URL_SEEN] = url_text(URL_PARAM)


def follow_link(source) -> None:
    """A query in the URL that this session has not seen (a link opened, a page reloaded): into the
    editor, and run."""
    linked = url_text(URL_PARAM)
    if linked is None or st.session_state.get(_URL_SEEN) == linked:
        return
    st.session_state[_URL_SEEN] = linked
    if len(linked) > sql_console.MAX_SQL_CHARS:
        st.warning(
            f"The link's query is longer than the {sql_console.MAX_SQL_CHARS:,} characters the editor holds; "
            "it was not run."
        )
        return
    st.session_state["sql_text"] = linked
    run(source, linked)


def text_widths(frame) -> dict:
    """Each text column sized to its header and cells (app.table_layout): the grid's own sizing
    cut long variant names and statuses in the first columns at 1440 px. Numbers keep the grid's."""
    numbers = pd.api.types.is_numeric_dtype, pd.api.types.is_datetime64_any_dtype
    return {
        str(c): st.column_config.Column(width=table_layout.fit(str(c), frame[c]))
        for c in frame.columns
        if not any(kind(frame[c]) for kind in numbers)
    }


def show_result(ran_sql: str, result, sql: str) -> None:
    frame = result.frame
    if ran_sql != sql:
        st.caption("Showing the result of the previous query; press Run query for the edited one.")
    elapsed = frame.attrs.get("elapsed_s")
    st.caption(
        f"{len(frame):,} row(s)"
        + sql_console.limit_note(frame)
        + (f" in {elapsed:.3f} s" if elapsed is not None else "")
    )
    if result.renamed:
        st.caption(ui.md(sql_console.renamed_note(result)))
    st.dataframe(frame, hide_index=True, width="stretch", column_config=text_widths(frame))
    cols = st.columns(2)
    cols[0].download_button(
        "Download CSV",
        sql_console.to_csv(result),
        file_name="attnwatch_query.csv",
        mime="text/csv",
        on_click="ignore",
        key="sql_csv",
    )
    try:
        parquet = sql_console.to_parquet(result)
    except HistoryError as exc:
        cols[1].caption(ui.md(str(exc)))
    else:
        cols[1].download_button(
            "Download Parquet",
            parquet,
            file_name="attnwatch_query.parquet",
            mime="application/vnd.apache.parquet",
            on_click="ignore",
            key="sql_parquet",
        )


def sql_page(source, shape):
    examples = sql_console.examples()
    follow_link(source)
    st.session_state.setdefault("sql_text", examples[0].sql)
    schema_browser(source)
    st.selectbox(
        "example queries",
        [e.title for e in examples],
        index=None,
        placeholder="load an example…",
        key="sql_example",
        on_change=load_example,
    )
    sql = st.text_area("SQL (read-only)", key="sql_text", height=200, max_chars=sql_console.MAX_SQL_CHARS)
    if st.button("Run query", type="primary", key="sql_run"):
        run(source, sql)
    result = st.session_state.get("sql_result")
    if not result:
        st.caption(
            f"Results are capped at {sql_console.MAX_ROWS:,} rows, {sql_console.MAX_BYTES // 2**20} MiB "
            f"and {sql_console.TIMEOUT_S:g} s. The page's link carries the query you run."
        )
        return
    ran_sql, frame_result, error = result
    if error:
        st.error(f"Query refused or failed: {ui.md(error)}")
        return
    try:
        show_result(ran_sql, frame_result, sql)
    except Exception as exc:  # noqa: BLE001 - whatever fails in showing a result, the page says so in one line
        first = public_text(f"{type(exc).__name__}: {exc}", source.path)
        st.error(f"The result could not be shown: {ui.md(first)}")


ui.run_page("sql", sql_page)
