"""Keep the first page's data computed, so that its first visitor does not wait for it.

The first page ("This push") is what a link to the dashboard opens. On the 1M-result history its
data took about 1 s of the server's time to compute cold (the newest main run of every GPU, both
runs' rows and samples, the interval bootstrap of every GPU's pair) and under 0.01 s to read
back from the cache (docs/benchmarks/dashboard.md, "The first page cold"). `app.serve` computes it before
the server listens, and `keep_warm` computes it again once the history has changed (an ingest)
or the cached results have expired (store.CACHE_TTL_S), so the first visitor after a start or an
ingest finds it ready.

Nothing a page shows can be stale for it: the results are cached under the history's signature
(store.current_source: the file's size and modification time, or the lake's snapshot id), the
same key the page looks them up with, so a page read after a change computes the new version
itself. A visitor who comes while a warm-up is computing waits for it rather than computing the
same thing twice (Streamlit computes a cached value once, under a lock per key).
"""

from __future__ import annotations

import threading
import time

from attnwatch.app.data import alerts, defaults, kernel, overview, push, trends
from attnwatch.app.data.runs import default_branch, history_shape
from attnwatch.app.data.store import CACHE_TTL_S, Source, current_source, render_reads, schema_notice
from attnwatch.history.store.db import schema_version

# Seconds between two looks at the history's signature (two stats of a file, one catalog query
# of a lake). A new version is warmed once it has held for a whole interval, so that a write in
# several steps (ingest, then detect) is not read between them.
POLL_S = 5.0


def warm() -> Source:
    """Compute and cache what the first page reads, in the order it reads it; returns the
    version warmed. A history that cannot be read is left alone: the page says why. So is one
    written by an older attnwatch: the first page view brings it up to date and says so
    (store.schema_notice), which a warm-up nobody sees must not do in its place."""
    source = current_source()
    if not source.exists:
        return source
    try:
        version, latest = schema_version(source.location)
        if version < latest:
            return source
        schema_notice(source)  # nothing to apply: the page's answer (None, or "newer than this attnwatch")
        if not history_shape(source).empty:
            push.push_changes(source)  # reads push.newest_main_runs through the cache
            push.cause_evidence(source)  # each cause's commit, build figures and counter cause
            for pair in push.newest_main_runs(source).itertuples():  # each GPU's "what moved" line
                if pair.base_run:
                    push.what_moved(source, pair.base_run, pair.run_id)
    except Exception:  # noqa: BLE001  (unreadable, being written, damaged: the page shows the one-line reason)
        pass
    return source


def warm_shared(source: Source) -> None:
    """Compute and cache what the other pages open with, after `warm` (the server listens by
    then): the focus every page starts from (app.data.defaults), the lists of GPUs, branches,
    variants, shapes and dtypes the pickers offer, and the Overview's device summary. Each reads
    the whole history (the results table's million rows, on the 1M history) and depends on
    nothing a visitor chooses, so a first view of Trends, Overview, Kernel or Alerts after a start
    or an ingest need not wait for them. One connection serves them all (store.render_reads); a
    visitor who asks for one of them meanwhile waits for this computation rather than repeating it."""
    if not source.exists:
        return
    try:
        version, latest = schema_version(source.location)
        if version < latest or history_shape(source).empty:  # an older history: left to the first page view
            return
        with render_reads(source):
            focus = defaults.focus(source)
            default_branch(source)
            if focus.gpu:
                defaults.measured_on(source, focus.gpu)
            trends.trend_options(source)
            overview.gpu_summary(source)
            kernel.variants_with_data(source)
            alerts.alert_gpus(source)
    except Exception:  # noqa: BLE001  (unreadable, being written, damaged: the page shows the one-line reason)
        pass


def keep_warm(stop: threading.Event, ready: threading.Event, interval_s: float = POLL_S) -> None:
    """`warm` now (then set `ready`, then `warm_shared`), and both again whenever the history's version has changed and
    then held for `interval_s`, or what was warmed has expired from the cache; until `stop`."""
    try:
        warmed = warm()
    finally:
        ready.set()
    warm_shared(warmed)
    warmed_at, seen = time.monotonic(), warmed
    while not stop.wait(interval_s):
        try:
            source = current_source()
            due = source != warmed or time.monotonic() - warmed_at >= CACHE_TTL_S
            if due and source == seen:
                warmed, warmed_at = warm(), time.monotonic()
                warm_shared(warmed)
            seen = source
        except Exception:  # noqa: BLE001  (a lake's catalog unreachable for a moment: look again later)
            continue
