"""Log lines that cannot flood and cannot be forged.

A misbehaving client or upstream can cause the same event thousands of times a second (every dropped
connection, every rejected batch); logging each would bury everything else and cost more than the event.
:class:`ThrottledLog` writes the first line of a kind, counts the ones it holds back, and says how many
it held back in the next line of that kind.

Values that come from spans (session ids, agent, service and tool names, finding texts quoting what an
agent did) and upstream answers that may echo them are chosen by whoever sends the spans. Written as
they are, a newline in a session id starts a line that looks like one of otelloop's own, and an ANSI
escape sequence rewrites what a terminal shows. :func:`escape` is the one place such a value is made
safe for a log line: every character that is not printable (C0 and C1 controls including ESC, CR and
LF, DEL, the Unicode line and paragraph separators, bidirectional overrides and other format
characters) is written as a visible escape (``\n``, ``\x1b``, ``\u202e``) and the result is bounded.
The detect-only finding printer applies it to every value it writes; :class:`EscapingFormatter`, which
``otelloop serve`` logs through, applies it to every message, so a value that reaches a log call
unescaped still cannot break a line.
"""

from __future__ import annotations

import logging
import time
from typing import Any

#: Default bound of one escaped value, in characters (the escapes included).
MAX_VALUE_CHARS = 300
#: Bound of one whole log message, in characters.
MAX_MESSAGE_CHARS = 8192

_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped_char(ch: str) -> str:
    if ch.isprintable() or ch == " ":
        return ch
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def escape(value: Any, limit: int | None = MAX_VALUE_CHARS, keep_newlines: bool = False) -> str:
    """``value`` as text fit for one log line: unprintable characters visibly escaped, at most ``limit``
    characters (``None``: unbounded), cut with ``…``.

    Printable text (nearly all of it) is returned as it is, only bounded. ``keep_newlines`` leaves line
    feeds alone, for text that is several lines by design (a traceback), which the caller indents.
    """
    text = value if isinstance(value, str) else str(value)
    if limit is not None and len(text) > limit:
        text = text[:limit + 1]  # each character escapes to one or more: the final cut is unchanged
    if not text.isprintable():
        if keep_newlines:
            text = "\n".join("".join(map(_escaped_char, line)) for line in text.split("\n"))
        else:
            text = "".join(map(_escaped_char, text))
    if limit is not None and len(text) > limit:
        text = text[:limit - 1] + "…"
    return text


class EscapingFormatter(logging.Formatter):
    """A formatter whose every line is one of otelloop's: the message is escaped with :func:`escape` (one
    line, bounded) and a traceback keeps its lines but each is indented and escaped, so no text inside
    one (an exception's message may quote a span) can pass for a log line of its own."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message, MAX_MESSAGE_CHARS)
        return super().formatMessage(record)

    def formatException(self, ei: Any) -> str:
        return _indented(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _indented(super().formatStack(stack_info))


def _indented(text: str) -> str:
    return "\n".join("    " + line for line in escape(text, None, keep_newlines=True).split("\n"))


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
