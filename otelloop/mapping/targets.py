"""What a tool call is about: the identifier-shaped values among its arguments.

A batch of calls of one tool on different things (health checks of eight services, notifications to
eight ticket owners, lookups of eight SKUs) often answers each of them alike (``ok``, ``healthy``,
``204 No Content``) or with nothing (``[]``, ``No results.``). The answers repeat, yet every call is
different work: what tells them apart is the thing each call names. A search reworded again and again
that finds nothing repeats its answer too, and that is a loop: what changes there is free text.

This module tells the two apart by the shape of the argument values, in any language:

- an **identifier** is an integer (not a boolean), or a string without whitespace, at most
  :data:`MAX_ID_CHARS` long, that holds a digit or joins letters and digits with a separator
  (``svc-12``, ``T-3301``, ``ana@example.com``, ``src/app.py``, ``9f1c…``, ``sku_42``);
- everything else (a sentence, a query of several words, a single plain word, a float, a boolean) is
  free text or a setting.

:func:`call_target` splits a call's parsed arguments into its **form** (the arguments with every
identifier replaced by a placeholder: what kind of call it is) and its **target** (the identifiers,
with where they stand: what the call is about). The progress tracker (:mod:`otelloop.work`) reads a
form seen with two different targets as a batch. A rewording changes the form, so rewordings are never
a batch, even when every one carries the same identifier (a workspace id beside the query) or a fresh
one (a request id).

Limits, by construction: a query of one token that holds a digit or a separator (``k8s``,
``single-sign-on``) reads as an identifier, so single-token rewordings with alike answers read as a
batch; things named by plain words (``billing``, ``auth``) are not identifiers, so a batch over them
is judged as repetition.
"""

from __future__ import annotations

import json
import re
from typing import Any

from otelloop.mapping.canonical import hash_text

#: Longest string that can be an identifier (paths and URLs included; longer values are content).
MAX_ID_CHARS = 128
#: Argument values looked at per call (a batch call names a few things; a large payload is content).
MAX_VALUES = 32
#: Nesting depth looked into.
MAX_DEPTH = 4

_SPACE = re.compile(r"\s")
_DIGIT = re.compile(r"\d")
#: Letters or digits joined by a separator, as ids, e-mail addresses and paths are made.
_JOINED = re.compile(r"[^\W_][-_.@:/#+~][^\W_]")
_PLACEHOLDER = "\x00id"


def identifier(value: Any) -> bool:
    """Whether an argument value is identifier-shaped (see the module docstring)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS or _SPACE.search(value) is not None:
        return False
    return _DIGIT.search(value) is not None or _JOINED.search(value) is not None


def call_target(args: dict[str, Any]) -> tuple[int, int]:
    """A call's (form, target) from its parsed arguments: stable hashes of the arguments with their
    identifiers masked, and of the identifiers with their paths; target 0 when the call names none."""
    ids: list[str] = []
    budget = [MAX_VALUES]
    form = _masked(args, ids, "", 0, budget)
    if not ids:
        return 0, 0
    canonical = json.dumps(form, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hash_text(canonical), hash_text("\x1f".join(sorted(ids)))


def _masked(obj: Any, ids: list[str], path: str, depth: int, budget: list[int]) -> Any:
    """``obj`` with its identifiers replaced by a placeholder, each recorded in ``ids`` with its path;
    values beyond the budget or the depth are kept as they are (part of the form)."""
    if budget[0] <= 0 or depth > MAX_DEPTH:
        return obj
    if isinstance(obj, dict):
        return {k: _masked(v, ids, f"{path}/{k}", depth + 1, budget) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_masked(v, ids, f"{path}/{i}", depth + 1, budget) for i, v in enumerate(obj)]
    budget[0] -= 1
    if identifier(obj):
        ids.append(f"{path}={obj!r}")
        return _PLACEHOLDER
    return obj
