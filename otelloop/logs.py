"""Log lines that cannot flood: at most one line per kind of event every few seconds.

A misbehaving client or upstream can cause the same event thousands of times a second (every dropped
connection, every rejected batch); logging each would bury everything else and cost more than the event.
:class:`ThrottledLog` writes the first line of a kind, counts the ones it holds back, and says how many
it held back in the next line of that kind.
"""

from __future__ import annotations

import logging
import time


class ThrottledLog:
    """At most one line per key every ``interval`` seconds, the skipped ones counted in the next line.

    Args:
        logger: where the lines go.
        interval: seconds between two lines of one key.
    """

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self._log = logger
        self.interval = interval
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, key: str, level: int, text: str) -> bool:
        """Log ``text`` unless a line of ``key`` went out less than ``interval`` ago; True if logged."""
        now = time.monotonic()
        if now - self._last.get(key, float("-inf")) < self.interval:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return False
        self._last[key] = now
        skipped = self._skipped.pop(key, 0)
        more = f" (and {skipped} more like it since the last line)" if skipped else ""
        self._log.log(level, "%s%s", text, more)
        return True
