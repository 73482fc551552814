"""A progress bar on stderr for long offline runs (``otelloop analyze`` over a large recording).

A 130 MB recording takes most of a minute; without a sign of life an operator cannot tell a slow run
from a hung one. The bar goes to stderr only, so stdout (the report, or ``--json``) stays clean for
pipes. On a terminal it redraws one line; elsewhere (a forced bar in a CI log) it writes a line per
tenth of the input, so a log is not flooded with carriage returns.
"""

from __future__ import annotations

import time
from typing import TextIO

#: Inputs at least this large show a bar by default when stderr is a terminal.
AUTO_BYTES = 16 << 20
#: Seconds between two redraws on a terminal.
REDRAW_EVERY = 0.2
_WIDTH = 30


def wanted(forced: bool | None, total_bytes: int, stream: TextIO) -> bool:
    """Show a bar: as forced by ``--progress/--no-progress``, else on a terminal for a large input."""
    if forced is not None:
        return forced
    return total_bytes >= AUTO_BYTES and stream.isatty()


class ProgressBar:
    """Bytes read of ``total``, with the rate and the time left.

    Args:
        total: input bytes in all.
        stream: where to draw (stderr).
        tty: redraw one line in place (a terminal) instead of writing a line per tenth.
    """

    def __init__(self, total: int, stream: TextIO, tty: bool) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.tty = tty
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._last_tenth = -1

    def __call__(self, done: int) -> None:
        """Record ``done`` bytes read; draw when due."""
        now = time.monotonic()
        if self.tty:
            if now - self._last_draw >= REDRAW_EVERY:
                self._last_draw = now
                self.stream.write("\r" + self.line(done, now))
                self.stream.flush()
            return
        tenth = min(done * 10 // self.total, 10)
        if tenth > self._last_tenth:
            self._last_tenth = tenth
            self.stream.write(self.line(done, now) + "\n")
            self.stream.flush()

    def line(self, done: int, now: float) -> str:
        fraction = min(done / self.total, 1.0)
        filled = int(fraction * _WIDTH)
        elapsed = max(now - self.started, 1e-9)
        rate = done / elapsed
        left = (self.total - done) / rate if rate > 0 and done < self.total else 0.0
        return (f"analyzing [{'#' * filled}{'.' * (_WIDTH - filled)}] {fraction * 100:3.0f}% "
                f"{done / 1e6:.1f}/{self.total / 1e6:.1f} MB, {rate / 1e6:.1f} MB/s, {left:.0f}s left")

    def close(self, done: int) -> None:
        """Draw the final state and end the line."""
        if self.tty:
            self.stream.write("\r" + self.line(done, time.monotonic()) + "\n")
        elif self._last_tenth < 10:
            self.stream.write(self.line(done, time.monotonic()) + "\n")
        self.stream.flush()
