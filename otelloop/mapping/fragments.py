"""What a replace-style edit put into a file and took out of it, and a failure's text with those masked.

An agent stuck on a failing check often tries one value after another at the same place: a link target
``setup.md``, then ``./setup.md``, then ``../setup.md``. The check fails the same way each time, but its
text names the value the agent just wrote, so compared as text every failure is a new one. A failure
that differs from the last only by the edit's own fragments — the old value where the last failure
named it, the new value where this one does — is the same failure (``otelloop.progress``).

Fragments are the edit's tokens (its text split at white space and at the brackets, quotes and
separators that surround a value) found on one side of the edit only. Tokens too short or made of digits
alone are left out: they occur in a check's text by chance (a count, a line number), not as an echo.
Everything here is bounded: at most :data:`MAX_FRAGMENTS` fragments a side, each at most
:data:`MAX_FRAGMENT_CHARS` long, and only the first :data:`MAX_TEXT_CHARS` of an edit's text are read.
"""

from __future__ import annotations

import re

#: Fragments kept per side of an edit (an edit that changes more is a rewrite, not a value tried).
MAX_FRAGMENTS = 8
#: Longest fragment kept (a longer token is content, not a value a check would repeat).
MAX_FRAGMENT_CHARS = 128
#: Shortest fragment kept: a shorter token occurs in a check's text by chance.
MIN_FRAGMENT_CHARS = 3
#: Characters of an edit's old and new text read.
MAX_TEXT_CHARS = 2048
#: What a masked fragment reads as.
PLACEHOLDER = "<edit>"

#: Characters between tokens: white space, brackets, quotes and the separators around a value (a path's
#: ``/`` and ``.`` stay inside it).
_SPLIT = re.compile(r"""([\s\[\](){}<>"'`,;=|]+|:(?=\s|$))""")

#: An edit's fragments: (put in, taken out).
Fragments = tuple[tuple[str, ...], tuple[str, ...]]
NONE: Fragments = ((), ())


def _tokens(text: str) -> set[str]:
    return {t for t in _SPLIT.split(text[:MAX_TEXT_CHARS])[::2] if t}


def _kept(tokens: set[str]) -> tuple[str, ...] | None:
    """The tokens that can be echoes, in a stable order; None when there are too many to be one value."""
    kept = sorted(t for t in tokens if MIN_FRAGMENT_CHARS <= len(t) <= MAX_FRAGMENT_CHARS and not t.isdigit())
    return tuple(kept) if len(kept) <= MAX_FRAGMENTS else None


def edit_fragments(old: str | None, new: str | None) -> Fragments:
    """The fragments a replace-style edit of ``old`` by ``new`` put in and took out (:data:`NONE` when it
    changed none, or too many to be a value tried)."""
    before, after = _tokens(old or ""), _tokens(new or "")
    put, taken = _kept(after - before), _kept(before - after)
    if not put or taken is None:
        return NONE
    return put, taken


def mask(text: str, fragments: tuple[str, ...]) -> str | None:
    """``text`` with each token equal to one of ``fragments`` replaced by :data:`PLACEHOLDER`; None when
    it holds none."""
    if not fragments:
        return None
    parts = _SPLIT.split(text)
    found = False
    for i in range(0, len(parts), 2):
        if parts[i] in fragments:
            parts[i] = PLACEHOLDER
            found = True
    return "".join(parts) if found else None
