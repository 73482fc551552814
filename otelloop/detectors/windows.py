"""Sliding windows of recent entries, shared between steps and sessions that repeat each other.

Detectors keep a session's last few steps as a tuple of interned entries and recompute what depends on
that window on every step. A stuck agent goes through the same few windows again and again, so the
work is done once per distinct window: :class:`Windows` remembers each move "``entry`` arrives after
``before``" by its content and keeps what the detector computed about it (:attr:`Slide.facts`). The
window a move leads to is interned by content too, so sessions that loop alike share their windows.

Looking a move up hashes its window's entries (about a microsecond for ten); on a looping workload
that costs no more than keying moves by object identity would, and a third less than computing the
facts anew on every step (``benchmarks/bench_pipeline.py``). A healthy session rarely repeats a
window; for it a new move costs one interning of its window.
"""

from __future__ import annotations

import sys
from collections.abc import Hashable
from typing import Any

from otelloop.bounds import InternTable, Memo

#: Moves remembered per detector before starting over, and their estimated bytes.
MAX_SLIDES = 16384
MAX_SLIDE_BYTES = 8 << 20
#: Estimated bytes of one remembered move: key and slide (windows are counted apart, entries are shared).
_SLIDE_BYTES = 400


class Slide:
    """One move of a window: ``entry`` arriving after ``before`` gives ``after``."""

    __slots__ = ("after", "before", "entry", "facts")

    def __init__(self, entry: Any, before: tuple[Any, ...], after: tuple[Any, ...]) -> None:
        self.entry = entry
        self.before = before
        self.after = after
        #: what the detector derived from this move (None until it says)
        self.facts: Any = None


class Windows:
    """The moves of windows of ``length`` entries, remembered (bounded) by content.

    Args:
        length: entries a window keeps (a longer ``before``, after a reload shrank it, is cut).
    """

    def __init__(self, length: int) -> None:
        self.length = length
        self._moves = Memo(MAX_SLIDES, MAX_SLIDE_BYTES)
        self._windows = InternTable(MAX_SLIDES, MAX_SLIDE_BYTES, lambda w: sys.getsizeof(w) + 64)

    def slide(self, before: tuple[Any, ...], entry: Any, context: Hashable = None) -> Slide:
        """The move of ``entry`` (interned) arriving after ``before``; ``context`` tells apart moves
        whose facts depend on more than the entries (it must be small and hashable)."""
        key = (entry, before, context)
        found: Slide | None = self._moves.get(key)
        if found is None:
            after = self._windows[(*before, entry)[-self.length:]]
            found = self._moves.put(key, Slide(entry, before, after), _SLIDE_BYTES)
        return found
