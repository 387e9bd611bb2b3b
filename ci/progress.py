"""Progress of a run on stderr: a tqdm bar over cases with the case in flight and an ETA."""

from __future__ import annotations

import sys
from typing import Any


class Progress:
    """Counts finished cases (any status); shows the current case and phase as the postfix."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self._bar = None
        self._done = 0
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True, leave=True, mininterval=0.5)

    def on_event(self, event: dict[str, Any], state: Any) -> None:
        if self._bar is None:
            return
        kind = event.get("e")
        if kind == "begin":
            self._bar.set_postfix_str(f"{event.get('case')} ({event.get('phase')})", refresh=False)
        elif kind == "build_begin":
            self._bar.set_postfix_str(f"building {event.get('variant')}", refresh=False)
        elif kind != "outcome":
            return  # heartbeats are too frequent to redraw for
        self.sync(state)

    def sync(self, state: Any) -> None:
        if self._bar is None:
            return
        done = len(state.outcomes)
        if done > self._done:
            self._bar.update(done - self._done)
            self._done = done

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
