"""Typed reads of attribute values (docs/mapping.md): the first usable value of a list of keys.

Each read names an operation, the keys to try in order (the span's attributes first, then its
resource's) and the field it fills, for ``otelloop_mapping_errors_total{field}``. A value of the wrong
type is counted once per key it was found under and skipped; the next key is tried.

* ``STRING``: a non-empty string; numbers and booleans as their text. Empty strings and empty values
  are skipped silently.
* ``TEXT``: any value as text: strings as they are, an empty value as ``""``, numbers and booleans as
  their text; arrays and key-value lists are returned as ``list``/``dict`` (the caller renders them as
  canonical JSON) and :class:`~otelloop.otlp.scan.Oversized` values as they are. Bytes are wrong.
* ``COUNT``: a non-negative integer (a whole, finite, non-negative double counts too).
* ``AMOUNT``: a finite, non-negative number, as a float.

The mapper compiles its reads into a *plan* (a tuple of ``(op, keys, field)``) and runs a whole plan in
one :func:`resolve` call; the native implementation (``otelloop._scan.resolve``) does it without
creating objects for the values it skips. The pure-Python one below gives identical results.
"""

from __future__ import annotations

import math
from typing import Any

from otelloop.otlp import scan

STRING, TEXT, COUNT, AMOUNT = 0, 1, 2, 3

Read = tuple[int, tuple[str, ...], str]
Plan = tuple[Read, ...]


def _read(span: dict[str, Any], res: dict[str, Any], op: int, keys: tuple[str, ...], field: str,
          errors: list[str]) -> Any:
    for attrs in (span, res):
        if not attrs:
            continue
        for key in keys:
            if key not in attrs:
                continue
            v = attrs[key]
            t = type(v)
            if op == STRING:
                if t is str:
                    if v:
                        return v
                    continue
                if t is int or t is float or t is bool:
                    return str(v)
                if v is None:
                    continue
            elif op == TEXT:
                if t is str or t is list or t is dict:
                    return v
                if v is None:
                    return ""
                if t is scan.Oversized:
                    if v.kind != "bytes":
                        return v
                elif t is not bytes:
                    return str(v)
            elif op == COUNT:
                if t is int and v >= 0:
                    return v
                if t is float and math.isfinite(v) and v >= 0 and v.is_integer():
                    return int(v)
            elif op == AMOUNT and (t is float or t is int):
                x = float(v)
                if math.isfinite(x) and x >= 0:
                    return x
            errors.append(field)
    return None


def resolve_python(span: dict[str, Any], res: dict[str, Any], plan: Plan, errors: list[str]) -> tuple[Any, ...]:
    """Run every read of ``plan``; one result per read (``None`` when no key held a usable value)."""
    return tuple(_read(span, res, op, keys, field, errors) for op, keys, field in plan)


#: Run a plan of reads over a span's and its resource's wanted attributes.
resolve = scan._native.resolve if scan.NATIVE else resolve_python
