"""Widgets and text helpers every page shares.

Untrusted text (commit messages, branch, kernel and runner names) reaches the screen only
through `st.dataframe`, `st.text`, `st.code`, or markdown after `escape_markdown`: never as
HTML. The Trends chart's tooltips show text as text (Vega's tooltip escapes it).
"""

from __future__ import annotations

import math
import re
from typing import Callable

import streamlit as st

from attnwatch.app.data.runs import HistoryShape, gpu_pools, history_shape
from attnwatch.app.data.store import HistoryUnavailable, Source, current_source, render_reads
from attnwatch.app.url_state import UrlState
from attnwatch.history.errors import HistoryError
from attnwatch.history.links import page_by_key

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:&])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


# What a table cell without a value shows. Streamlit's own default is the word "None", which reads
# as a value; the SQL page keeps it, since there a NULL is what the query returned.
EMPTY_CELL = "—"


def table(data, **kwargs):
    """st.dataframe for the pages' own tables: a missing number or text shows EMPTY_CELL."""
    return st.dataframe(data, placeholder=EMPTY_CELL, **kwargs)


def plain_number(value, digits: int = 3) -> str:
    """A number in its plain decimal form, never in exponent notation: `digits` significant
    digits, but every digit of the integer part, thousands grouped (1,292 · 54.9 · 0.0123);
    EMPTY_CELL for a missing or infinite value. Latencies over 1,000 µs read as such, not 1.29e+03."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return EMPTY_CELL
    if not math.isfinite(number):
        return EMPTY_CELL
    if number == 0:
        return "0"
    rounded = float(f"{number:.{digits}g}")  # 99.96 is 100 to three digits: its decimals follow from that
    decimals = max(digits - 1 - math.floor(math.log10(abs(rounded))), 0)
    return f"{number:,.{decimals}f}"


# The same plain form for the trend's tooltip (d3-format: grouped, significant digits,
# trailing zeros trimmed, no SI suffix or exponent).
PLAIN_D3 = ",.4~r"


def truncate(text: str | None, limit: int = 80) -> str:
    """First line of `text`, at most `limit` characters, control characters removed."""
    if not text:
        return ""
    first = _CONTROL.sub("", str(text).strip().splitlines()[0] if str(text).strip() else "")
    return first if len(first) <= limit else first[: limit - 1] + "…"


def escape_markdown(text: str | None) -> str:
    """Backslash-escape every character Streamlit markdown would interpret (and `<`, `&`)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", _CONTROL.sub("", str(text or "")))


def md(value) -> str:
    """Any value for a markdown message (st.info, st.warning, labels): escaped, so a hostile
    name cannot become a link, an image or emphasis."""
    # A bare URL is auto-linked even when escaped; a zero-width space after the scheme stops it.
    return escape_markdown(str(value)).replace("\\://", "\\:\u200b//")


def code_span(text: str | None) -> str:
    """Untrusted text as a markdown code span: shown literally (no markdown, no HTML inside)."""
    clean = _CONTROL.sub("", str(text or "")).replace("`", "'").replace("\n", " ")
    return f"`{clean}`"


def short_sha(sha: str | None) -> str:
    return (sha or "")[:10]


def page_source() -> Source:
    """The history this page reads, with a one-line caption naming it."""
    source = current_source()
    st.caption(f"History: {code_span(source.path)}")
    return source


def show_unavailable(exc: HistoryUnavailable | HistoryError) -> None:
    """A read failure as a message the user can act on (never a traceback)."""
    st.warning(md(exc))


def empty_history_notice(source: Source) -> None:
    """What an empty history looks like: a message saying how to fill it."""
    st.info(
        "The history is empty: no run has been ingested yet. "
        "Run the suites and ingest a bundle (`attnwatch run --ingest` or `attnwatch ingest BUNDLE_DIR`)."
    )


def synthetic_banner(synthetic_runs: int, total_runs: int) -> None:
    """Label generated data visibly: synthetic rows are scale-test data, never measurements."""
    if synthetic_runs <= 0:
        return
    if synthetic_runs == total_runs:
        st.error("SYNTHETIC DATA: every run shown here was generated for scale tests. These are not measurements.")
    else:
        st.warning(
            f"SYNTHETIC DATA present: {synthetic_runs} of {total_runs} runs were generated for scale tests "
            "(marked `synthetic`); they are not measurements."
        )


def run_page(key: str, body: Callable[[Source, HistoryShape], None], needs_history: bool = True) -> None:
    """Draw the page `key` of history.links.PAGES: its title, which history, the synthetic label,
    then `body`; a history that is empty or unreadable becomes a message, never a traceback."""
    st.title(page_by_key(key).title)
    source = page_source()
    try:
        with render_reads(source):  # the render's queries share one connection (app.data.store)
            shape = history_shape(source)
            if shape.empty and needs_history:
                empty_history_notice(source)
                return
            synthetic_banner(shape.synthetic_runs, shape.runs)
            body(source, shape)
    except (HistoryUnavailable, HistoryError) as exc:
        show_unavailable(exc)


def gpu_picker(shape: HistoryShape, key: str, url: UrlState, default: str | None = None) -> str:
    """Which GPU (or device kind) to show: the URL's ?gpu= if it names one, else `default` (the
    data's focus), else the most-measured GPU. A GPU in a link that this history lacks is named."""
    options = list(shape.gpus)
    ignored = url.choice(key, "gpu", options, default if default in options else options[0])
    if ignored:
        st.warning(
            f"The link names GPU {md(ignored[0])}, which has no runs in this history: showing "
            f"{md(st.session_state[key])} instead."
        )
    return st.selectbox("GPU", options, key=key, help="Runs are only compared on the same GPU model.")


ALL_HOSTS = "all hosts"


def host_picker(source: Source, gpu: str, key: str, allow_all: bool = False) -> str | None:
    """Which host of `gpu` to show (its pool: history.contract.series_key), remembered in the URL as
    ?host=. Drawn only when that GPU model ran on more than one; returns the pool, or None for
    every host (offered where `allow_all`)."""
    pools = gpu_pools(source, gpu)
    if len(pools) <= 1:
        return pools[0] if pools else None
    options = ([ALL_HOSTS] if allow_all else []) + pools
    wanted = st.query_params.get("host")
    index = options.index(wanted) if wanted in options else 0
    host = st.selectbox(
        "host",
        options,
        index=index,
        key=key,
        help="Each host (or declared pool of interchangeable GPUs) is a series of its own: "
        "two hosts of one model are never mixed in one line.",
    )
    if host != wanted:
        st.query_params["host"] = host
    return None if host == ALL_HOSTS else host


def run_label(row) -> str:
    """How a run is named in pickers: commit, branch, GPU, start time, run id (plain text)."""
    when = str(row.started_at)[:16]
    branch = row.branch or "?"
    flag = " [synthetic]" if bool(getattr(row, "synthetic", False)) else ""
    return (
        f"{short_sha(row.commit_sha)} · {truncate(branch, 30)} · {row.gpu} · {when} · {row.status}{flag} · {row.run_id}"
    )


def run_caption(run) -> None:
    """A run's identity: commit, branch, start, id; the commit message as plain text."""
    synthetic = " · SYNTHETIC" if bool(run.synthetic) else ""
    dirty = " · **uncommitted changes** on top of this commit" if bool(run.dirty) else ""
    st.markdown(
        f"**Run** {code_span(run.run_id)} · commit {code_span(short_sha(run.commit_sha))} · "
        f"branch {code_span(truncate(run.branch, 60))} · started {escape_markdown(str(run.started_at)[:19])} UTC · "
        f"status **{escape_markdown(run.status)}**{synthetic}{dirty}"
    )
    if run.commit_message:
        st.text(truncate(run.commit_message, 200))


def safe_file_name(name: str) -> str:
    """A download file name from untrusted parts: letters, digits, dot, dash, underscore only."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)[:120] or "download"
