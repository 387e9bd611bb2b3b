"""Progress of a run on stderr: a tqdm bar (current case, ETA), or plain lines for logs.

Plain mode prints one line per finished case and per build, with the elapsed time, so a log
cut short (a CI step killed at its limit) still says how far the run got and where it stalled.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from attnwatch.ci.summary import clip_words

# Characters of a case's reason on its progress line (cut at a word; the run's summary gives it whole).
ERROR_LIMIT = 160


class Progress:
    """Counts finished cases (any status); shows the current case and phase."""

    def __init__(self, total: int, enabled: bool = True, plain: bool = False) -> None:
        self._bar = None
        self._done = 0
        self._total = total
        self._plain = enabled and plain
        self._started = time.monotonic()
        self._printed: set[str] = set()
        if enabled and not plain:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True, leave=True, mininterval=0.5)

    def _line(self, text: str) -> None:
        print(f"[{time.monotonic() - self._started:7.1f} s] {text}", file=sys.stderr, flush=True)

    def on_event(self, event: dict[str, Any], state: Any) -> None:
        kind = event.get("kind")
        if self._plain:
            if kind == "build_begin":
                self._line(f"building {event.get('variant')}")
            elif kind == "build":
                record = event.get("record", {})
                self._line(f"built {record.get('variant')}: ok={record.get('ok')} {record.get('error') or ''}")
            elif kind == "outcome":
                self.sync(state)
            return
        if self._bar is None:
            return
        if kind == "begin":
            self._bar.set_postfix_str(f"{event.get('case')} ({event.get('stage')})", refresh=False)
        elif kind == "build_begin":
            self._bar.set_postfix_str(f"building {event.get('variant')}", refresh=False)
        elif kind != "outcome":
            return  # heartbeats are too frequent to redraw for
        self.sync(state)

    def sync(self, state: Any) -> None:
        done = len(state.outcomes)
        if self._plain:
            for case_id, outcome in state.outcomes.items():  # insertion order = arrival order
                if case_id in self._printed:
                    continue
                self._printed.add(case_id)
                timing = state.timings.get(case_id) or {}
                median = f" median {timing['median_us']:.2f} us" if outcome.status == "ok" and timing else ""
                error = f" ({clip_words(outcome.error, ERROR_LIMIT)})" if outcome.error else ""
                self._line(f"{len(self._printed)}/{self._total} {case_id}: {outcome.status}{median}{error}")
            return
        if self._bar is None:
            return
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
