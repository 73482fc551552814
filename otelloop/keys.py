"""The search over a session's typed key arrays: where a 64-bit key is in an ``array("Q")``.

The progress tracker (:mod:`otelloop.progress`) and the work memory (:mod:`otelloop.work`) keep their
keys (result keys, calls, polls, batch forms) as arrays of unsigned 64-bit hashes, 8 bytes a key and no
int object each, and look one up several times for every judged tool step. :func:`find_entry` is the
native search (``otelloop/_keys.c``: a loop over the array's memory) where it was built, else
:func:`find_entry_py`, which gives the same answers (``tests/test_keys.py`` compares them);
``OTELLOOP_PURE_PYTHON=1`` selects the Python one, as it does the reader's; ``otelloop --version`` says
when the Python one runs although the native reader does.
"""

from __future__ import annotations

import sys
from array import array
from typing import Protocol

from otelloop import native

_WIDTH = array("Q").itemsize


class _Find(Protocol):
    """What :func:`find_entry` is: a search taking its arguments by position."""

    def __call__(self, values: array[int], value: int, stride: int = 1, /) -> int: ...


def find_entry_py(values: array[int], value: int, stride: int = 1) -> int:
    """Index of the entry (``stride`` values each) whose first value is ``value``, or -1.

    A byte search over the array's memory: ``array.index`` makes an int object of every element it
    passes. A match that starts anywhere but at an entry's first value (its bytes straddling two values)
    is skipped.
    """
    raw = values.tobytes()
    needle = value.to_bytes(_WIDTH, sys.byteorder)
    entry = _WIDTH * stride
    pos = raw.find(needle)
    while pos >= 0 and pos % entry:
        pos = raw.find(needle, pos + 1)
    return -1 if pos < 0 else pos // _WIDTH


_keys = native.load("_keys")
_native_find: _Find | None = None if _keys is None else _keys.find_entry
#: The native search is in use.
NATIVE = _native_find is not None
#: Index of the entry (``stride`` values each, default 1) whose first value is ``value``, or -1 (see
#: :func:`find_entry_py`): the native search where it is in use, bound directly (no call in between).
#: Arguments by position only.
find_entry: _Find = _native_find if _native_find is not None else find_entry_py
