"""Byte bounds on what otelloop keeps: strings cut once where they enter, caches with byte budgets.

Why: every name, id and text an agent sends may end up in session state or in a process-wide cache,
and a bound in entries is no bound in bytes when one entry can be a megabyte. So the mapper cuts every
string a step carries to ``limits.max_string_bytes`` (UTF-8) with :func:`cut` — once, so detectors only
ever see bounded strings — and every process-wide cache counts the bytes it holds against a budget and
registers itself here, so the memory guard can account for all of them and empty them when it sheds.
"""

from __future__ import annotations

import gc
import hashlib
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

#: Default of ``limits.max_string_bytes``.
DEFAULT_MAX_STRING_BYTES = 256
#: The smallest allowed bound: room for a readable prefix besides the hash suffix.
MIN_STRING_BYTES = 64
#: Texts otelloop composes from bounded strings and keeps in session state (finding and vote messages)
#: are cut to this many bytes.
MAX_TEXT_BYTES = 1024
#: Ids otelloop composes from names (a loop's cycle id: its node names joined) are cut to this many bytes.
MAX_ID_BYTES = 256
#: Progress signals (diff hashes, failure signatures, state hashes: hashes by nature) are cut to this.
MAX_SIGNAL_BYTES = 64
#: What a cut string ends with: ``<prefix>...<16 hex digits of a hash of the whole text>``.
SEPARATOR = "..."
_SUFFIX_BYTES = len(SEPARATOR) + 16


def cut(text: str, max_bytes: int) -> str:
    """``text`` if it fits in ``max_bytes``, else a prefix of it and a hash of all of it.

    "Fits" holds both in UTF-8 and in memory: CPython stores a string at 1, 2 or 4 bytes per character
    depending on its widest one, so one emoji among ASCII letters would otherwise quadruple what a
    bounded string costs. The result fits in ``max_bytes`` both ways. The hash suffix keeps two long
    texts that differ only after the cut distinct (and equal texts equal), so detectors comparing names
    still compare what the agent sent. Cheap for short text: one length comparison.
    """
    n = len(text)
    if n <= max_bytes >> 2 or (n <= max_bytes and text.isascii()):
        return text
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes and n * _width(text) <= max_bytes:
        return text
    digest = hashlib.blake2b(data, digest_size=8).hexdigest()
    prefix = data[:max_bytes - _SUFFIX_BYTES].decode("utf-8", "ignore")
    width = _width(prefix)
    if width > 1:  # the suffix is stored as wide as the prefix's widest character
        prefix = prefix[:max(0, max_bytes // width - _SUFFIX_BYTES)]
    return f"{prefix}{SEPARATOR}{digest}"


def truncate(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that fits in ``max_bytes`` (UTF-8 and memory), without a hash:
    for texts whose identity is kept elsewhere (an argument text beside its hash)."""
    n = len(text)
    if n <= max_bytes >> 2 or (n <= max_bytes and text.isascii()):
        return text
    prefix = text[:max_bytes].encode("utf-8", "surrogatepass")[:max_bytes].decode("utf-8", "ignore")
    return prefix[:max_bytes // _width(prefix)]


def _width(text: str) -> int:
    """Bytes per character CPython stores ``text`` with."""
    widest = ord(max(text)) if text else 0
    return 1 if widest < 0x100 else 2 if widest < 0x10000 else 4


#: id -> weak reference of every registered cache (caches may be unhashable dicts)
_CACHES: dict[int, weakref.ref[Any]] = {}


def register(cache: Any) -> Any:
    """Make ``cache`` known to :func:`caches_nbytes` and :func:`clear_caches`; returns it.

    Held weakly: a cache that belongs to a replaced mapper disappears with it.
    """
    key = id(cache)
    _CACHES[key] = weakref.ref(cache, lambda _: _CACHES.pop(key, None))
    return cache


def _live() -> list[Any]:
    return [c for c in (ref() for ref in list(_CACHES.values())) if c is not None]


def caches_nbytes() -> int:
    """Bytes accounted by every live registered cache."""
    return sum(c.nbytes for c in _live())


def clear_caches() -> int:
    """Empty every registered cache; returns the bytes they accounted for."""
    freed = 0
    for c in _live():
        freed += c.nbytes
        c.clear()
    return freed


class Memo(dict[Any, Any]):
    """Computed values by key, bounded in entries and in bytes.

    It starts over when either bound is reached: cheaper than keeping an eviction order, and the
    working set of a looping agent refills it at once. Registered, so the memory guard counts it and
    can empty it.

    Args:
        max_entries: entries kept before starting over.
        max_bytes: estimated bytes kept before starting over.
    """

    __slots__ = ("__weakref__", "max_bytes", "max_entries", "nbytes")

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        super().__init__()
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.nbytes = 0
        register(self)

    def put(self, key: Any, value: Any, nbytes: int) -> Any:
        """Keep ``value`` under ``key``, an entry of about ``nbytes`` bytes; returns ``value``."""
        if len(self) >= self.max_entries or self.nbytes + nbytes > self.max_bytes:
            self.clear()
        self[key] = value
        self.nbytes += nbytes
        return value

    def clear(self) -> None:
        super().clear()
        self.nbytes = 0


class InternTable(Memo):
    """One shared object per distinct value, bounded in entries and in bytes.

    Detectors keep small tuples of names per step; sessions repeat the same few, so sharing them saves
    far more than the table costs.

    Args:
        max_entries: entries kept before starting over.
        max_bytes: estimated bytes kept before starting over.
        size: estimated bytes of one value (its strings and container).
    """

    __slots__ = ("_size",)

    def __init__(self, max_entries: int, max_bytes: int, size: Callable[[Any], int]) -> None:
        super().__init__(max_entries, max_bytes)
        self._size = size

    def __missing__(self, value: Any) -> Any:
        """``table[value]`` for a value not kept (new, or since the table started over): it becomes the
        shared one. A kept value is found by the dict's own lookup, without a Python call: callers on a
        hot path write ``table[value]``."""
        return self.put(value, value, self._size(value))

    def __call__(self, value: Any) -> Any:
        """The shared object equal to ``value``: ``table[value]``."""
        return self[value]


#: Objects :func:`deep_size` does not count or enter: code and classes are shared by every session.
_SHARED_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def deep_size(obj: Any) -> int:
    """Bytes of ``obj`` and of every object it reaches (each counted once), classes and code excluded.

    An upper estimate of what dropping ``obj`` frees: strings it shares with other objects (interned
    names) are counted as if they were its own.
    """
    seen: set[int] = set()
    todo = [obj]
    total = 0
    getsizeof, referents, shared = sys.getsizeof, gc.get_referents, _SHARED_TYPES
    while todo:
        o = todo.pop()
        if id(o) in seen or isinstance(o, shared):
            continue
        seen.add(id(o))
        total += getsizeof(o)
        todo.extend(referents(o))
    return total
