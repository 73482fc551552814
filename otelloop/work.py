"""Repetition that is work: polls of something that moves on its own, and batches over different targets.

The progress tracker (:mod:`otelloop.progress`) calls a step that repeats an earlier result "nothing
new". Two ordinary patterns repeat results and are work all the same; this module tells them from loops
by the data's structure and behaviour, never by words:

- **Polls.** A call that reads something (not a write, not a command, no failure, not blank) whose answer
  changed between two of its calls while the session did nothing in between that could change it (no
  write or command step, no acknowledged action) watches something that moves on its own: a job going
  from ``pending`` to ``running``. Its next answers that repeat the last one are waiting, not looping:
  :func:`poll_wait` gives them ``Step.wait`` (the times in a row this answer has now come), and the
  detectors allow such a row like a transient failure's retries, within the loop window
  (:data:`otelloop.detectors.base.POLL_WAITS`: a poll stuck after it moved is stopped at its 7th same
  answer). A call whose answer never changed on its own (a job that stays ``running`` from its first
  poll, a file read again and again) gets no allowance: it is judged as repetition from its second call.
  A progress value that rises makes every answer new: that is progress already, no allowance needed.
- **Batches.** Calls of one tool whose arguments differ only in identifier-shaped values
  (:mod:`otelloop.mapping.targets`: the same *form*, different *targets*) and that answer briefly or
  with nothing (``ok``, ``healthy``, ``{"acknowledged": true}``, ``[]``, ``No results.``) are
  different work: once a form has been seen with two targets, :func:`target_key` makes each such
  answer the answer about its target (the result key folds the target in), so eight services reported
  ``healthy`` are eight results while the same service checked eight times is the same result eight
  times. Rewordings of a search change the form (its free text), so a search reworded again and again
  that finds nothing is still a loop, in any language; failures and long results are never folded (the
  same long page for different cursors is stuck pagination; the same error for every target still
  counts).

State per session: :class:`WorkState`, two small integer arrays bounded by :data:`MAX_POLLS` and
:data:`MAX_FORMS` whatever the session's length.
"""

from __future__ import annotations

import functools
from array import array

from otelloop.keys import find_entry
from otelloop.mapping.canonical import hash_text
from otelloop.mapping.results import ACK, BLANK, FAILED, TERSE, TRANSIENT
from otelloop.model import Step

#: Recent calls whose last answer (and whether it moved on its own) is remembered per session.
MAX_POLLS = 16
#: Argument forms (with their first target) remembered per session.
MAX_FORMS = 8
_MASK64 = (1 << 64) - 1
#: A poll entry: ``[call, answer, acts << 1 | moving]``.
_POLL = 3
#: A form entry: ``[form, first target, first answer, first call, batched]``.
_FORM = 5


class WorkState:
    """One session's memory of polls and batch forms (see the module docstring)."""

    __slots__ = ("acts", "polls", "forms")

    def __init__(self) -> None:
        #: tool steps so far that may have changed the world (writes, commands, acknowledged actions)
        self.acts = 0
        self.polls: array[int] = array("Q")
        self.forms: array[int] = array("Q")


def acts(step: Step) -> bool:
    """Whether a tool step may have changed what later reads see: a write or a command, or an action
    the tool acknowledged (``Saved``, ``queued``), whatever its result."""
    return step.tool_class in ("write", "exec") or bool(step.result_flags & ACK)


def _status(step: Step, key: int | None) -> bool:
    """A read that answered with something (no failure, not blank): what a poll answers."""
    return (key is not None and step.outcome != "error" and step.tool_class not in ("write", "exec")
            and not step.result_flags & (BLANK | FAILED | TRANSIENT | ACK))


def poll_wait(state: WorkState, step: Step, call: int, key: int | None, repeats: int) -> int:
    """Record a tool step's answer to ``call`` and return its ``Step.wait``: ``repeats`` when the call
    moved on its own before and this answer repeats its last one, else 0 (see the module docstring)."""
    polls = state.polls
    at = find_entry(polls, call, _POLL)
    if acts(step):
        state.acts += 1
    if not _status(step, key):
        if at >= 0:
            del polls[at:at + _POLL]
        return 0
    assert key is not None
    moving = False
    wait = 0
    if at >= 0:
        last, mark = polls[at + 1], polls[at + 2]
        moving = bool(mark & 1)
        if key != last and mark >> 1 == state.acts:
            moving = True  # it changed while the session did nothing that could change it
        elif key == last and moving:
            wait = repeats
        del polls[at:at + _POLL]
    polls.extend((call, key, (state.acts << 1 & _MASK64) | moving))
    if len(polls) > MAX_POLLS * _POLL:
        del polls[:_POLL]
    return wait


def batched(step: Step) -> bool:
    """Whether a step's answer can be one of a batch's: brief or empty, no failure, not a write (a
    write is identified by what it writes), about a target (``Step.target``)."""
    return (step.target != 0 and step.outcome != "error" and step.tool_class != "write"
            and bool(step.result_flags & (BLANK | TERSE)) and not step.result_flags & (FAILED | TRANSIENT))


def target_key(state: WorkState, step: Step, key: int, call: int) -> tuple[int, tuple[int, int] | None]:
    """The result key of a step that :func:`batched` accepts (``call``: its call's hash): ``key`` with its
    target folded in once its form has been seen with another target (a batch), else ``key``; and, when
    the form has just become a batch, the form's first call and its answer's folded key (that answer was
    about its own target too: the tracker sees it anew)."""
    forms = state.forms
    form = step.args_form
    at = find_entry(forms, form, _FORM)
    if at < 0:
        forms.extend((form, step.target, key, call, 0))
        if len(forms) > MAX_FORMS * _FORM:
            del forms[:_FORM]
        return key, None
    first = None
    if not forms[at + 4]:
        if forms[at + 1] == step.target:
            return key, None
        forms[at + 4] = 1
        first = (forms[at + 3], fold(forms[at + 2], forms[at + 1]))
    return fold(key, step.target), first


@functools.lru_cache(maxsize=4096)
def fold(key: int, target: int) -> int:
    """A result key with the call's target folded in (a stable hash: replicas agree on keys)."""
    return hash_text(f"target\x1f{key}\x1f{target}") & _MASK64
