"""The part of the mapping the request reader runs itself: a span's step kind and its typed reads.

Why: per span, building an attribute dict, looking up the kind and running the typed reads in Python
cost more than the rest of the mapping together. The mapper compiles a :class:`Program` once; the
native reader (``otelloop._scan``) runs it on the span's attribute bytes and creates objects only for
the values the reads return, so a span's unread attributes (call ids, response ids, …) cost nothing.

A span carrying any of ``slow_keys`` (an explicit kind, a Logfire pending span, OpenInference metadata,
progress signals, attributes a detector overwrites) is handed to the mapper with its attribute dict,
and so is every span when mapping rules are configured (the mapper then builds no program).
:meth:`Program.run` is the same program in Python, used by the pure-Python reader; tests hold the two
equal, and hold both equal to the mapper deciding everything itself.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from otelloop.mapping.reads import Plan, resolve_python

#: (attribute, {string value: kind} or None, kind when the span carries the attribute at all or None).
KindRule = tuple[str, "dict[str, str] | None", "str | None"]

_EMPTY: dict[str, Any] = {}


def kind_of(attrs: dict[str, Any], rules: tuple[KindRule, ...]) -> str | None:
    """The kind the first matching rule gives: a present key, or a string value found in its table."""
    for key, table, present in rules:
        if key in attrs:
            if present is not None:
                return present
            value = attrs[key]
            kind = table.get(value) if type(value) is str and table is not None else None
            if kind is not None:
                return kind
    return None


class Program(NamedTuple):
    """What the reader decides itself (the native reader takes it as a plain tuple).

    Attributes:
        slow_keys: a span carrying one of these goes to the mapper with its attribute dict.
        kinds: the kind rules, tried in order (docs/mapping.md#kind).
        plans: the typed reads of each kind, in the order of :class:`~otelloop.model.Step`'s fields
            the mapper fills from them.
        keep_attributes: kinds whose spans still get their attribute dict (the mapper reads more).
    """

    slow_keys: frozenset[str]
    kinds: tuple[KindRule, ...]
    plans: dict[str, Plan]
    keep_attributes: frozenset[str]

    def run(self, attrs: dict[str, Any] | None, res: dict[str, Any] | None,
            errors: list[str]) -> tuple[dict[str, Any] | None, str | None, tuple[Any, ...] | None] | None:
        """(attribute dict or None, kind, reads) of a span, or None when it cannot be a step.

        The kind is None (and the dict is given) when the span carries a slow key.
        """
        if not attrs:
            return None  # the kind is declared by the span's own attributes
        if not self.slow_keys.isdisjoint(attrs):
            return attrs, None, None
        kind = kind_of(attrs, self.kinds)
        if kind is None:
            return None
        reads = resolve_python(attrs, res or _EMPTY, self.plans[kind], errors)
        return (attrs if kind in self.keep_attributes else None), kind, reads
