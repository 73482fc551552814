"""Whether a session's step brought something new: the progress half of "repetition without progress".

An agent repeating itself is not stuck while each repetition teaches it something or changes something:
a batch of reads returns new file contents, a polled job moves from ``queued`` to ``done``, a test run
after an edit fails less. It is stuck when repetitions bring nothing new. This module owns that
judgement, made once per step before the detectors run, and written on the step:

- ``Step.novel``: True when a tool step's result was never seen before in the session (results are
  compared by their canonical hash, so per-call ids and timings do not count as new), when a write gives
  a file content it has not had before, or when an error is a new one; False when the result repeats an
  earlier one or says nothing (``no results``); None when the step has no result to judge (LLM and agent
  steps, and **unjudged** tool steps: spans that carry no result, no effect known from their arguments
  and no error message — content capture is off in most instrumentations by default). An unjudged step
  is neither progress nor evidence of a loop: it breaks the runs below, so detectors never conclude
  "the same again" from a tool's name alone.
- ``Step.repeats``: how many times in a row this same call (tool and arguments) has now given this same
  result, counting occurrences of the call wherever they fall in the session (1 for a first result);
  ``Step.tool_repeats`` the same for the tool whatever its arguments, for results that say nothing or
  report a failure (searches worded differently that all find nothing give one tool the same result
  again and again; a batch of different calls acknowledged alike does not count).
- ``Step.progress``: how many steps of the session have brought something new so far, and
  ``Step.stale``: how many tool steps in a row, up to this one, brought nothing new (an unjudged step
  ends the row: nothing says it brought nothing).

State per session is one small integer array (results remembered, recent calls), bounded whatever the
session's length; a result forgotten beyond :data:`MAX_RESULTS` would count as new again.
"""

from __future__ import annotations

import functools
import sys
from array import array
from typing import TypeAlias

from otelloop.mapping.canonical import hash_text
from otelloop.mapping.results import ACK, BLANK, FAILED
from otelloop.model import Step

#: Distinct results (and written file versions) remembered per session.
MAX_RESULTS = 48
#: Distinct recent calls (and tools) whose last result is remembered per session.
MAX_CALLS = 16
#: Low bits of a remembered call entry that hold its run length.
_RUN_BITS = 8
_RUN_MASK = (1 << _RUN_BITS) - 1
_MASK64 = (1 << 64) - 1
#: Bytes of one element of a state array.
_WIDTH = array("Q").itemsize


#: A session's progress state: one flat array of unsigned 64-bit integers, so that it costs one small
#: object per session: ``[count, stale, n, seen_1 … seen_n, call_1, result_1, call_2, result_2, …]`` —
#: the steps that brought something new, the tool steps in a row since the last one that did, the result
#: keys remembered (oldest first, at most :data:`MAX_RESULTS`), then the recent calls (and tools) with
#: their last result, its run length in the low bits (oldest first, at most :data:`MAX_CALLS`).
ProgressState: TypeAlias = "array[int]"
_COUNT, _STALE, _SEEN, _HEADER = 0, 1, 2, 3


def new_state() -> array[int]:
    """An empty progress state."""
    return array("Q", (0, 0, 0))


def observe(state: array[int], step: Step) -> None:
    """Judge ``step`` against the session's history and record it (sets ``novel``, ``repeats``,
    ``tool_repeats``, ``progress``, ``stale``)."""
    if step.kind == "tool":
        key = step.result = result_key(step)
        call = hash((step.name, step.args_hash)) & _MASK64
        if key is not None:
            step.novel = _remember_result(state, key) and not step.result_flags & BLANK
            step.repeats = _remember_call(state, call, key)
            if step.result_flags & (BLANK | FAILED) or step.outcome == "error":
                # Only results that say nothing or fail count for a tool whatever its arguments: a batch
                # of different calls acknowledged alike ("ok", "sent") is work.
                step.tool_repeats = _remember_call(state, hash(step.name) & _MASK64, key)
            if step.novel:
                state[_COUNT] += 1
                state[_STALE] = 0
            else:
                state[_STALE] += 1
        else:
            # Unjudged: what came back is unknown, so this call's run and its tool's run start again.
            step.repeats = _remember_call(state, call, 0)
            _forget_call(state, hash(step.name) & _MASK64)
            state[_STALE] = 0
    step.progress = state[_COUNT]
    step.stale = state[_STALE]


def unjudged(step: Step) -> bool:
    """A tool step whose span said nothing to judge it by (see :func:`observe`); set once observed."""
    return step.kind == "tool" and step.novel is None


def results_kept(state: array[int]) -> int:
    """How many result keys the state remembers."""
    return state[_SEEN]


def calls_kept(state: array[int]) -> int:
    """How many calls (and tools) the state remembers the last result of."""
    return (len(state) - _HEADER - state[_SEEN]) // 2


def result_key(step: Step) -> int | None:
    """The result key of a tool step as an unsigned 64-bit integer (see :func:`_result_key`)."""
    key = _result_key(step)
    return None if key is None else key & _MASK64


def _result_key(step: Step) -> int | None:
    """What a tool step's effect is identified by, or None when its span does not say.

    A write is identified by the file version it produces (or by its arguments when its content is
    unknown), a failure by its normalised error text, a result that says nothing by its tool, a result
    that only acknowledges the action by the call's arguments, and any other result by its canonical
    hash, whichever tool returned it. Keys are stable hashes (they are shown on findings, and replicas
    and replays must agree on them).

    None — the step is unjudged — when only the tool's name would be left to identify it: no result, a
    write or an acknowledgement whose arguments are unknown, an error that names only its type (an
    ``error.type``, a bare error status) and has no result either. An error with a message (a status
    description, an exception message) is identified by it: instrumentations record those whether or
    not they capture content.
    """
    if step.outcome == "error":
        if step.error_hash is not None:
            return _stable("error", step.name, step.error_hash)
        return step.output_hash
    if step.tool_class == "write":
        if step.content_hash is not None:
            return _stable("file", step.file_path, step.content_hash)
        if step.edit_old_hash is not None or step.edit_new_hash is not None:
            # An edit and the edit that undoes it change the file between the same two versions.
            pair = sorted((step.edit_old_hash or 0, step.edit_new_hash or 0))
            return _stable("edit", step.file_path, *pair)
        return None if step.args_hash is None else _stable("write", step.name, step.args_hash)
    if step.result_flags & BLANK:
        return _stable("blank", step.name)
    if step.result_flags & ACK:  # an acknowledged action is identified by what it was asked to do
        return None if step.args_hash is None else _stable("ack", step.name, step.args_hash)
    return step.output_hash


@functools.lru_cache(maxsize=4096)
def _stable(*parts: object) -> int:
    """A stable hash of the parts; memoised, since a stuck session produces the same few keys."""
    return hash_text("\x1f".join(map(str, parts)))


def _remember_result(state: array[int], key: int) -> bool:
    """Record a result key; True when it was not seen before."""
    n = state[_SEEN]
    if _find(state, key, _HEADER, _HEADER + n, 1) >= 0:
        return False
    state.insert(_HEADER + n, key)
    if n + 1 > MAX_RESULTS:
        del state[_HEADER]
    else:
        state[_SEEN] = n + 1
    return True


def _remember_call(state: array[int], call: int, key: int) -> int:
    """Record that ``call`` gave result ``key`` and return how many times in a row it now has."""
    start = _HEADER + state[_SEEN]
    packed_key = key & ~_RUN_MASK
    run = 1
    i = _find(state, call, start, len(state), 2)
    if i >= 0:
        last = state[i + 1]
        if key and last & ~_RUN_MASK == packed_key:
            run = min((last & _RUN_MASK) + 1, _RUN_MASK)
        del state[i:i + 2]
    state.append(call)
    state.append(packed_key | run)
    if len(state) - start > 2 * MAX_CALLS:
        del state[start:start + 2]
    return run


def _forget_call(state: array[int], call: int) -> None:
    """Drop ``call``'s remembered result, if any: its next result starts a new run."""
    start = _HEADER + state[_SEEN]
    i = _find(state, call, start, len(state), 2)
    if i >= 0:
        del state[i:i + 2]


def _find(state: array[int], value: int, begin: int, end: int, stride: int) -> int:
    """Index of ``value`` among ``state[begin:end:stride]``, or -1.

    A byte search over the array's memory: ``array.index`` makes an int object of every element it
    passes, which made the lookups the larger part of judging a step.
    """
    raw = state.tobytes()
    needle = value.to_bytes(_WIDTH, sys.byteorder)
    lo, hi, step = begin * _WIDTH, end * _WIDTH, stride * _WIDTH
    pos = raw.find(needle, lo, hi)
    while pos >= 0 and (pos - lo) % step:  # a match across two elements, or at a result's place
        pos = raw.find(needle, pos + 1, hi)
    return -1 if pos < 0 else pos // _WIDTH
