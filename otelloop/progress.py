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
- ``Step.retry``: for a transient failure (by its status: HTTP 429 or 503, a timeout; see
  :func:`otelloop.mapping.results.transient_failure`), its ``repeats``: the attempt it is in a row of
  the same call failing the same way. Detectors give such a row a retry allowance before they count it.
  When a model step came between the attempt and the one before, the model chose to send the call
  again: the attempt is counted as ``Step.wait`` instead, bounded by the loop window like a poll's same
  answers (``otelloop.detectors.base.POLL_WAITS``); a retry allowance is a client's retry policy, whose
  attempts follow each other with no model step between.
- ``Step.progress``: how many steps of the session have brought something new so far, and
  ``Step.stale``: how many tool steps in a row, up to this one, brought nothing new (an unjudged step
  ends the row: nothing says it brought nothing).

State per session is one :class:`ProgressState` record, bounded whatever the session's length: the two
counts above, the result keys seen (the last :data:`MAX_RESULTS`; a result forgotten would count as new
again), the recent calls with their last result and its run (:data:`MAX_CALLS`), and per recent tool a
:class:`ToolMemory` (:data:`MAX_TOOLS`): its last call and structured result, the cursor values that
result handed back, and the paths it has seen changing as noise; besides, the counters learned to track
the span clock per tool (:class:`~otelloop.mapping.noise.ClockTable`) and the session's polls and batch
forms (:class:`~otelloop.work.WorkState`). Keys are 64-bit hashes kept in typed arrays, one array per
meaning, so that a session costs a few small objects rather than an int object per key.
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

from otelloop import native
from otelloop.keys import find_entry
from otelloop.mapping import fragments
from otelloop.mapping.canonical import LEARNABLE, SAYS, hash_bytes, hash_text
from otelloop.mapping.noise import ClockTable, without_clocks
from otelloop.mapping.results import ACK, BLANK, FAILED, TRANSIENT, normalise_result
from otelloop.model import Step
from otelloop.work import WorkState, batched, poll_wait, target_key

#: Distinct results (and written file versions) remembered per session.
MAX_RESULTS = 48
#: Distinct recent calls (and tools) whose last result is remembered per session.
MAX_CALLS = 16
#: Longest run a remembered call counts (a run length is one byte): a call repeating its result more
#: often than this stays at it, which every threshold is far below.
MAX_RUN = 255
#: Recent tools whose last structured result and learned noise are remembered per session.
MAX_TOOLS = 4
#: Paths learned as noise remembered per tool (the most often seen changing are kept).
MAX_NOISY = 4
#: A path is noise for its tool once its value has changed this many times between two results of the
#: same call while the rest of the result stayed the same.
LEARN_AFTER = 2
#: Times a path is counted changing at most (one byte each).
MAX_CHANGES = 255
_MASK64 = (1 << 64) - 1
#: A leaf of a structured result (``Step.leaves``) is ``path CRC << 32 | value CRC`` (see
#: :mod:`otelloop.mapping.canonical`): the path is its high half.
_PATH_SHIFT = 32


def _keys() -> array[int]:
    """An empty array of 64-bit keys (hashes as unsigned integers: 8 bytes each, no int objects)."""
    return array("Q")


class ToolMemory:
    """What a session remembers of one recent tool, to compare its next structured result with.

    Kept for the last :data:`MAX_TOOLS` tools that returned a structured result or took a cursor, so that
    pagination (a call handing back the cursor the last result gave) and noise (a path whose value changes
    between results of the same call while the rest stays) can be recognised; see
    :func:`_compare_structure`.
    """

    __slots__ = ("call", "changes", "leaves", "noisy", "tokens", "tool")

    def __init__(self, tool: int) -> None:
        #: the tool's name hash (:func:`_tool_hash`)
        self.tool = tool
        #: the arguments hash of its last call (0: no arguments known)
        self.call = 0
        #: its last result's leaves (``Step.leaves``), or None when that result was not compared as a
        #: structure (not structured, or too large)
        self.leaves: array[int] | None = None
        #: the noise-shaped values its last result held (``Step.result_tokens``: a cursor it handed
        #: back), or None for none
        self.tokens: array[int] | None = None
        #: paths (CRCs) seen changing between results of the same call, and how often each (parallel,
        #: at most :data:`MAX_NOISY`); None until the first is seen
        self.noisy: array[int] | None = None
        self.changes: bytearray | None = None


class Failure:
    """The session's last failing step that failed with a text (:func:`_echoed_failure`)."""

    __slots__ = ("call", "error", "key", "name", "text", "clock_s", "text_hash")

    def __init__(self, call: int, name: str, text: str, clock_s: float, error: bool, text_hash: int) -> None:
        #: the call's hash, its tool's name, its text (the step's ``output_text``: at most an excerpt),
        #: the span clock the text was normalised near, whether it was an error (else a failing result)
        self.call, self.name, self.text, self.clock_s, self.error = call, name, text, clock_s, error
        #: the hash its text was judged by (``Step.error_hash`` or the output hash): the excerpt stands
        #: for the text only when it hashes to it
        self.text_hash = text_hash
        #: its result key (None: not yet set)
        self.key: int | None = None


class ProgressState:
    """The progress tracker's state of one session (see the module docstring).

    The recent calls are three parallel sequences, oldest first: ``calls[i]`` (a call's hash, or a tool's
    for the runs counted whatever the arguments), ``results[i]`` its last result key (0: unjudged) and
    ``runs[i]`` how many times in a row it has given it.
    """

    __slots__ = ("calls", "clocks", "count", "edit", "failure", "paced", "results", "runs", "seen", "stale", "tools",
                 "work")

    def __init__(self) -> None:
        #: steps of the session that brought something new
        self.count = 0
        #: tool steps in a row, up to the last one, that brought nothing new
        self.stale = 0
        #: result keys seen, oldest first (at most :data:`MAX_RESULTS`)
        self.seen = _keys()
        #: recent calls (at most :data:`MAX_CALLS`) with their last result and its run (see above)
        self.calls = _keys()
        self.results = _keys()
        self.runs = bytearray()
        #: the recent tools' memories, least recently used first; None until a tool returns a structured
        #: result or takes a cursor
        self.tools: list[ToolMemory] | None = None
        #: counters that track the span clock, per tool (:func:`_mask_clocks`); None until a tool step
        #: carries numbers
        self.clocks: ClockTable | None = None
        #: polls and batch forms (:mod:`otelloop.work`); None until a tool step is judged
        self.work: WorkState | None = None
        #: a model step came since the last tool step: the next call is the model's choice
        self.paced = False
        #: what the session's last write put into its file and took out (``Step.edit_fragments``); None
        #: until a replace-style edit, and after a write that is not one
        self.edit: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        #: the session's last failing text result or error (:func:`_echoed_failure`); None until one
        self.failure: Failure | None = None


def new_state() -> ProgressState:
    """An empty progress state."""
    return ProgressState()


def observe(progress: ProgressState, step: Step) -> None:
    """Judge ``step`` against the session's history and record it (sets ``novel``, ``repeats``,
    ``tool_repeats``, ``progress``, ``stale``; a call that only hands back the cursor its tool's last
    result gave gets ``args_hash`` of the call it continues)."""
    if step.kind == "tool":
        output = step.output_hash
        args = step.args_hash
        if step.leaves is not None or step.arg_tokens or step.result_tokens:
            output = _compare_structure(progress, step)
        if step.numbers:
            if step.outcome == "error" and step.error_hash is not None:  # counters in the error's text
                step.error_hash = _mask_clocks(progress, step, step.error_hash, _ERROR)
            elif output is not None:
                output = _mask_clocks(progress, step, output)
        call = hash((step.name, step.args_hash)) & _MASK64
        if step.tool_class == "write":
            progress.edit = step.edit_fragments if step.edit_fragments[0] else None
        elif step.leaves is None and (step.outcome == "error" or step.result_flags & FAILED):
            output = _echoed_failure(progress, step, call, output)
        key = step.result = result_key(step, output)
        if progress.failure is not None and progress.failure.key is None:
            progress.failure.key = key
        if key is not None:
            plain = key
            key, of_batch = _batch_key(progress, step, key, call, paged=step.args_hash != args)
            step.novel = _remember_result(progress, key) and (of_batch or not step.result_flags & BLANK)
            step.repeats = _remember_call(progress, call, key)
            step.wait = _poll_wait(progress, step, call, plain)  # a call's target is constant: compared unfolded
            if step.result_flags & TRANSIENT:
                if progress.paced:  # the model chose to send the call again: bounded like a poll
                    step.wait = step.repeats
                else:  # attempts back to back: a client's or a framework's retry policy
                    step.retry = step.repeats
            if step.result_flags & (BLANK | FAILED) or step.outcome == "error":
                # Only results that say nothing or fail count for a tool whatever its arguments: a batch
                # of different calls acknowledged alike ("ok", "sent") is work.
                step.tool_repeats = _remember_call(progress, hash(step.name) & _MASK64, key)
            if step.novel:
                progress.count += 1
                progress.stale = 0
            else:
                progress.stale += 1
        else:
            # Unjudged: what came back is unknown, so this call's run and its tool's run start again.
            step.repeats = _remember_call(progress, call, 0)
            _forget_call(progress, hash(step.name) & _MASK64)
            _poll_wait(progress, step, call, None)
            progress.stale = 0
        progress.paced = False
    elif step.kind == "llm":
        progress.paced = True
    step.progress = progress.count
    step.stale = progress.stale


def _work(progress: ProgressState) -> WorkState:
    """The session's work state, made on first use (most sessions' tools never poll or batch)."""
    work = progress.work
    if work is None:
        work = progress.work = WorkState()
    return work


def _batch_key(progress: ProgressState, step: Step, key: int, call: int, paged: bool) -> tuple[int, bool]:
    """The result key of a judged tool step (``call``: its call's hash), its target folded in when it is
    one of a batch of calls on different targets answering alike or with nothing
    (:func:`otelloop.work.target_key`); and whether it is. A call that only continues its tool's
    pagination is never one (its cursor is no target)."""
    if paged or not batched(step):
        return key, False
    folded, first = target_key(_work(progress), step, key, call)
    if first is not None:  # the batch's first call was about its own target too: seen, and its call's last
        first_call, first_key = first
        _remember_result(progress, first_key)
        _rekey_call(progress, first_call, first_key)
    if folded == key:
        return key, False
    step.result = folded
    return folded, True


def _poll_wait(progress: ProgressState, step: Step, call: int, key: int | None) -> int:
    """``Step.wait`` of a tool step (:func:`otelloop.work.poll_wait`; ``key`` None: unjudged).

    None once its tool has learned noise (:func:`_compare_structure`): the changes that made the call
    look as if it moved may have been that noise, before it was learned.
    """
    wait = poll_wait(_work(progress), step, call, key, step.repeats if key is not None else 0)
    return 0 if wait and learned_noise(progress, step.name) else wait


def unjudged(step: Step) -> bool:
    """A tool step whose span said nothing to judge it by (see :func:`observe`); set once observed."""
    return step.kind == "tool" and step.novel is None


def results_kept(progress: ProgressState) -> int:
    """How many result keys the state remembers."""
    return len(progress.seen)


def calls_kept(progress: ProgressState) -> int:
    """How many calls (and tools) the state remembers the last result of."""
    return len(progress.calls)


def tools_kept(progress: ProgressState) -> int:
    """How many tools the state remembers the last structured result of."""
    return 0 if progress.tools is None else len(progress.tools)


def learned_noise(progress: ProgressState, tool: str) -> list[int]:
    """The path CRCs learned as noise for ``tool`` in this session (see :func:`_compare_structure`)."""
    memory = _tool_memory(progress, _tool_hash(tool))
    if memory is None or memory.noisy is None or memory.changes is None:
        return []
    return [path for path, times in zip(memory.noisy, memory.changes, strict=True) if times >= LEARN_AFTER]


def result_key(step: Step, output: int | None = None) -> int | None:
    """The result key of a tool step as an unsigned 64-bit integer (see :func:`_result_key`); ``output``
    stands for the step's output hash when given."""
    key = _result_key(step, step.output_hash if output is None else output)
    return None if key is None else key & _MASK64


def _result_key(step: Step, output: int | None) -> int | None:
    """What a tool step's effect is identified by, or None when its span does not say.

    A write is identified by the file version it produces (or by its arguments when its content is
    unknown), a failure by its normalised error text, a result that says nothing by its tool, a result
    that only acknowledges the action by the call's arguments, and any other result by its canonical
    hash (``output``: what :func:`_compare_structure` makes of it), whichever tool returned it. Keys are
    stable hashes (they are shown on findings, and replicas and replays must agree on them).

    None — the step is unjudged — when only the tool's name would be left to identify it: no result, a
    write or an acknowledgement whose arguments are unknown, an error that names only its type (an
    ``error.type``, a bare error status) and has no result either. An error with a message (a status
    description, an exception message) is identified by it: instrumentations record those whether or
    not they capture content.
    """
    if step.outcome == "error":
        if step.error_hash is not None:
            return _stable("error", step.name, step.error_hash)
        return output
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
    return output


def _compare_structure(progress: ProgressState, step: Step) -> int | None:
    """Compare a tool step's structured result with its tool's last one; the output hash to judge it by.

    - **Pagination**: when every noise-shaped argument value of the call (``Step.arg_tokens``) is a value
      the tool's last result held (``Step.result_tokens``: the cursor it handed back), the call is the
      call it continues: its ``args_hash`` becomes the hash of its arguments with those values masked,
      so a page whose items repeat while its cursor changes is the same call giving the same result.
    - **Echoes**: otherwise the argument values the result echoes (``Step.echo``) are part of its
      identity: eight orders whose results differ only in the order id they repeat are eight results.
    - **Learned noise**: between two results of the same call, a path whose value changed while the rest
      stayed the same (something the result says among it), :data:`LEARN_AFTER` times, and whose values
      are short tokens mixing letters and digits (not counts, fractions, percentages, state words or
      sentences: those are progress or content) is noise for that tool in this session; results of the
      tool are then compared without the values at those paths.
    """
    tool = _tool_hash(step.name)
    memory = _tool_memory(progress, tool)
    paging = False
    if memory is not None and step.arg_tokens and step.args_key is not None:
        handed = memory.tokens or ()
        paging = all(map(handed.__contains__, step.arg_tokens))  # no generator for one or two tokens
        if paging:
            step.args_hash = step.args_key
    call = step.args_hash or 0
    leaves = step.leaves
    echo = 0 if paging else step.echo
    output = step.output_hash
    if memory is not None:
        noisy = _learn(memory, call, leaves)
        if noisy and leaves is not None:
            output = _without(leaves, noisy)
            if memory.leaves is not None and memory.call == call:  # the last result, seen as it is now seen
                _remember_result(progress, _with_echo(_without(memory.leaves, noisy), echo))
    _store(progress, memory, tool, call, leaves, step.result_tokens)
    return None if output is None else _with_echo(output, echo)


#: The tag under which a failed step's error text is compared with the tool's previous one (its
#: counters learned apart from those of its results): the hash of the tool's name with it.
_ERROR = "error"


def _mask_clocks(progress: ProgressState, step: Step, output: int, kind: str = "") -> int:
    """A tool result's hash (or, ``kind`` :data:`_ERROR`, its error text's) with its counters that track
    the span clock or count calls left out (learned per tool: :class:`~otelloop.mapping.noise.ClockTable`);
    ``output`` as it is while none is learned.

    When a counter is learned at this step, the tool's previous result of the same call is judged again
    without it: remembered as seen, and the call's run continues from it, so the first repetition of a
    call whose only change is a server's uptime already counts as a repetition.
    """
    table = progress.clocks
    if table is None:
        table = progress.clocks = ClockTable()
    call = hash((step.name, step.args_hash)) & _MASK64
    clocks, before = table.observe(_stable("tool", step.name, kind) if kind else _tool_hash(step.name), call,
                                   step.start_ns, step.numbers, step.numbers_free, output)
    if not clocks:
        return output
    echo = 0 if kind else step.echo
    masked = _with_echo(_stable("clocks", *without_clocks(step.numbers_free, step.numbers, clocks)), echo)
    table.tools[-1].output = masked
    if before is not None:  # seen as it is now seen (whatever its call: results are compared across calls)
        old = _with_echo(_stable("clocks", *without_clocks(before.free, before.numbers, clocks)), echo)
        if kind:  # an error's text: its result key is the failure's (see _result_key)
            old, previous = _stable("error", step.name, old), _stable("error", step.name, before.output)
        else:
            previous = before.output
        _remember_result(progress, old)
        if before.call == call:
            _rekey_call(progress, call, old, only_if=previous)
    return masked


def _echoed_failure(progress: ProgressState, step: Step, call: int, output: int | None) -> int | None:
    """The output hash to judge a failing step by (setting ``step.error_hash`` when it is an error), with
    the fragments the session's last edit put into its file masked in its text.

    A check that fails after an edit and whose text names what the edit just wrote (a link target, a
    name, a value) says the edit changed nothing but its own echo. Its identity is its text with those
    fragments masked; when the call's last failure, before the edit, named what the edit took out at the
    same place, that failure is judged again with those masked: the same failure, and the call's run
    goes on. A failure whose text changed in any other way stays a new one. Only a text the step's
    excerpt holds whole is masked (its normal form hashes to the hash it was judged by); bounded by the
    excerpt's length and :data:`~otelloop.mapping.fragments.MAX_FRAGMENTS`.
    """
    error = step.outcome == "error"
    judged = step.error_hash if error else output
    text = step.output_text
    previous, progress.failure = progress.failure, None
    if judged is None or text is None or step.result_flags & (BLANK | ACK):
        return output
    clock_s = step.start_ns / 1e9
    failure = Failure(call, step.name, text, clock_s, error, judged)
    edit = progress.edit
    masked = None if edit is None else fragments.mask(text, edit[0])
    if masked is not None and _failure_hash(failure, text) == judged:
        judged = _failure_hash(failure, masked)
        if previous is not None and previous.call == call and previous.key is not None and edit is not None:
            was = fragments.mask(previous.text, edit[1])
            if was is not None and _failure_hash(previous, previous.text) == previous.text_hash:
                old = _failure_key(previous, _failure_hash(previous, was))
                _remember_result(progress, old)
                _rekey_call(progress, call, old, only_if=previous.key)
                _rekey_call(progress, hash(step.name) & _MASK64, old, only_if=previous.key)
        if error:
            step.error_hash = judged
        else:
            output = judged
    progress.failure = failure
    return output


def _failure_hash(failure: Failure, text: str) -> int:
    """The hash a failure's ``text`` is judged by, as the mapper forms it (``Canonicalizer.error`` and
    ``Canonicalizer.output`` of a text)."""
    return hash_text(normalise_result(text) if failure.error else normalise_result(text, failure.clock_s))


def _failure_key(failure: Failure, text_hash: int) -> int:
    """The result key of a failure whose text hashes to ``text_hash`` (see :func:`_result_key`)."""
    return _stable("error", failure.name, text_hash) & _MASK64 if failure.error else text_hash


def _with_echo(output: int, echo: int) -> int:
    """A result's hash with the CRC of the argument values it echoes folded in (none: as it is)."""
    return _stable("echo", output, echo) & _MASK64 if echo else output


def _tool_hash(name: str) -> int:
    """A tool's name as a 64-bit key: what its memory is found by (an int costs less than the name)."""
    return _stable("tool", name)


def _tool_memory(progress: ProgressState, tool: int) -> ToolMemory | None:
    """The memory of the tool whose name hashes to ``tool``, if it is among the recent ones."""
    for memory in progress.tools or ():
        if memory.tool == tool:
            return memory
    return None


def _learn(memory: ToolMemory, call: int, leaves: tuple[int, ...] | None) -> set[int]:
    """Count the paths that changed between the tool's last result and this one of the same call; the
    paths learned as noise so far."""
    old = memory.leaves
    if leaves is not None and old is not None and memory.call == call and len(old) == len(leaves):
        changed = [new for prev, new in zip(old, leaves, strict=True) if prev != new]
        same_paths = all(prev >> _PATH_SHIFT == new >> _PATH_SHIFT for prev, new in zip(old, leaves, strict=True))
        # something the result says stayed the same: what changed is beside it, not the result itself
        kept = any(prev == new and new & SAYS for prev, new in zip(old, leaves, strict=True))
        if same_paths and kept and 0 < len(changed) <= 2:
            for new in changed:
                if new & LEARNABLE:
                    _count_change(memory, new >> _PATH_SHIFT)
    if memory.noisy is None or memory.changes is None:
        return set()
    return {path for path, times in zip(memory.noisy, memory.changes, strict=True) if times >= LEARN_AFTER}


def _count_change(memory: ToolMemory, path: int) -> None:
    """Count one more change of the value at ``path``; a new path takes a free place, or, when all
    :data:`MAX_NOISY` are taken, the place of the path seen changing least often (the first of those)."""
    if memory.noisy is None or memory.changes is None:
        memory.noisy, memory.changes = array("L"), bytearray()
    noisy, changes = memory.noisy, memory.changes
    if path in noisy:
        i = noisy.index(path)
        changes[i] = min(changes[i] + 1, MAX_CHANGES)
    elif len(noisy) < MAX_NOISY:
        noisy.append(path)
        changes.append(1)
    else:
        j = min(range(len(changes)), key=changes.__getitem__)
        noisy[j], changes[j] = path, 1


def _without(leaves: tuple[int, ...] | array[int], noisy: set[int]) -> int:
    """A stable hash of a result's leaves, the values at the ``noisy`` paths left out."""
    kept = array("Q", (leaf if leaf >> _PATH_SHIFT not in noisy else (leaf >> _PATH_SHIFT) << _PATH_SHIFT
                       for leaf in leaves))
    return hash_bytes(b"leaves" + kept.tobytes())


def _store(progress: ProgressState, memory: ToolMemory | None, tool: int, call: int,
           leaves: tuple[int, ...] | None, tokens: tuple[int, ...]) -> None:
    """Remember this result as the tool's last one (its memory becomes the most recent; a new tool's
    takes the place of the least recently used when :data:`MAX_TOOLS` are remembered)."""
    tools = progress.tools
    if tools is None:
        tools = progress.tools = []
    if memory is not None:
        tools.remove(memory)
    else:
        memory = ToolMemory(tool)
        if len(tools) >= MAX_TOOLS:
            del tools[0]
    tools.append(memory)
    memory.call = call
    memory.leaves = None if leaves is None else array("Q", leaves)
    memory.tokens = array("Q", tokens) if tokens else None


@functools.lru_cache(maxsize=4096)
def _stable(*parts: object) -> int:
    """A stable hash of the parts; memoised, since a stuck session produces the same few keys."""
    return hash_text("\x1f".join(map(str, parts)))


def _remember_result(progress: ProgressState, key: int) -> bool:
    """Record a result key; True when it was not seen before (the oldest is forgotten beyond
    :data:`MAX_RESULTS`)."""
    seen = progress.seen
    if find_entry(seen, key) >= 0:
        return False
    if len(seen) >= MAX_RESULTS:
        del seen[0]  # before the append, so that a full array keeps its size (no regrowth)
    seen.append(key)
    return True


def _remember_call(progress: ProgressState, call: int, key: int) -> int:
    """Record that ``call`` gave result ``key`` (0: unjudged) and return how many times in a row it now
    has (up to :data:`MAX_RUN`); the call becomes the most recent, the oldest is forgotten beyond
    :data:`MAX_CALLS`."""
    calls, results, runs = progress.calls, progress.results, progress.runs
    run = 1
    i = find_entry(calls, call)
    if i >= 0:
        if key and results[i] == key:
            run = min(runs[i] + 1, MAX_RUN)
        del calls[i], results[i], runs[i]
    elif len(calls) >= MAX_CALLS:
        del calls[0], results[0], runs[0]  # before the append: a full array keeps its size
    calls.append(call)
    results.append(key)
    runs.append(run)
    return run


def _rekey_call(progress: ProgressState, call: int, key: int, only_if: int | None = None) -> None:
    """Give ``call``'s remembered last result the key ``key`` (the same result seen anew), its run kept;
    with ``only_if``, only while that is the key it remembers."""
    i = find_entry(progress.calls, call)
    if i >= 0 and (only_if is None or progress.results[i] == only_if & _MASK64):
        progress.results[i] = key & _MASK64


def _forget_call(progress: ProgressState, call: int) -> None:
    """Drop ``call``'s remembered result, if any: its next result starts a new run."""
    i = find_entry(progress.calls, call)
    if i >= 0:
        del progress.calls[i], progress.results[i], progress.runs[i]


class Tracker(NamedTuple):
    """A progress tracker: how a session's state is made, and the judgement of one step on it."""

    new_state: Callable[[], Any]
    observe: Callable[[Any, Step], None]
    #: the native tracker (``otelloop._progress``) rather than this module's functions
    native: bool


_native: Any = native.load("_progress")
#: The native tracker is in use.
NATIVE = _native is not None


def tracker(native: bool | None = None) -> Tracker:
    """The tracker the engine runs: the native one (``otelloop/_progress.c``: the same judgement, every
    rule of this module, kept on C records; a tenth of the CPU per tool step) where it is built, else this
    module's :func:`new_state` and :func:`observe`. ``native`` True or False asks for one of them (the
    equal-output tests run both); True where it is not built is an error."""
    if native is None:
        native = NATIVE
    if not native:
        return Tracker(new_state, observe, False)
    if _native is None:
        raise RuntimeError("the native progress tracker otelloop._progress is not built")
    return Tracker(_native.State, _native.observe, True)
