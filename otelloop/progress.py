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

from otelloop.mapping.canonical import LEARNABLE, MAX_LEAVES, MAX_TOKENS, SAYS, hash_bytes, hash_text
from otelloop.mapping.noise import ClockTable, without_clocks
from otelloop.mapping.results import ACK, BLANK, FAILED, TRANSIENT
from otelloop.model import Step
from otelloop.work import WorkState, batched, poll_wait, target_key

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


#: A session's progress state is made of flat arrays of unsigned 64-bit integers, so that it costs a few
#: small objects per session. ``keys``: ``[count, stale, n, seen_1 … seen_n, call_1, result_1, …]`` —
#: the steps that brought something new, the tool steps in a row since the last one that did, the result
#: keys remembered (oldest first, at most :data:`MAX_RESULTS`), then the recent calls (and tools) with
#: their last result, its run length in the low bits (oldest first, at most :data:`MAX_CALLS`).
#: ``tools`` (None until a tool returns a structured result or takes a token): one slot per recent tool
#: (at most :data:`MAX_TOOLS`, see :func:`_slot`).
class ProgressState:
    """The progress tracker's state of one session (see above)."""

    __slots__ = ("keys", "tools", "clocks", "work")

    def __init__(self) -> None:
        self.keys: array[int] = array("Q", (0, 0, 0))
        self.tools: array[int] | None = None
        self.clocks: ClockTable | None = None  # counters that track the span clock, per tool (_mask_clocks)
        #: polls and batch forms (``otelloop.work``); None until a tool step is judged
        self.work: WorkState | None = None


_COUNT, _STALE, _SEEN, _HEADER = 0, 1, 2, 3

#: Recent tools whose last structured result and learned noise are remembered per session.
MAX_TOOLS = 4
#: Paths learned as noise remembered per tool (the most often seen changing are kept).
MAX_NOISY = 4
#: A path is noise for its tool once its value has changed this many times between two results of the
#: same call while the rest of the result stayed the same.
LEARN_AFTER = 2
#: A tool slot: ``[tool, call, sizes, leaves … (MAX_LEAVES), tokens … (MAX_TOKENS), noisy … (MAX_NOISY)]``
#: — the tool's name hash, its last call, the sizes of the three lists (8 bits each; 255 leaves: the
#: result was not compared as a structure), its last result's leaves and noise-shaped values, and the
#: paths that behaved like noise with how often (``path CRC << 8 | count``).
_LEAVES = 3
_TOKENS = _LEAVES + MAX_LEAVES
_NOISY = _TOKENS + MAX_TOKENS
_SLOT = _NOISY + MAX_NOISY
_NO_LEAVES = 255
_PATH_SHIFT = 32


def new_state() -> ProgressState:
    """An empty progress state."""
    return ProgressState()


def observe(progress: ProgressState, step: Step) -> None:
    """Judge ``step`` against the session's history and record it (sets ``novel``, ``repeats``,
    ``tool_repeats``, ``progress``, ``stale``; a call that only hands back the cursor its tool's last
    result gave gets ``args_hash`` of the call it continues)."""
    state = progress.keys
    if step.kind == "tool":
        output = step.output_hash
        args = step.args_hash
        if step.leaves is not None or step.arg_tokens or step.result_tokens:
            output = _compare_structure(progress, step)
        if step.numbers and output is not None:
            output = _mask_clocks(progress, step, output)
        key = step.result = result_key(step, output)
        call = hash((step.name, step.args_hash)) & _MASK64
        if key is not None:
            plain = key
            key, of_batch = _batch_key(progress, step, key, call, paged=step.args_hash != args)
            step.novel = _remember_result(state, key) and (of_batch or not step.result_flags & BLANK)
            step.repeats = _remember_call(state, call, key)
            step.wait = _poll_wait(progress, step, call, plain)  # a call's target is constant: compared unfolded
            if step.result_flags & TRANSIENT:
                step.retry = step.repeats
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
            _poll_wait(progress, step, call, None)
            state[_STALE] = 0
    step.progress = state[_COUNT]
    step.stale = state[_STALE]


def _work(progress: ProgressState) -> WorkState:
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
        _remember_result(progress.keys, first_key)
        _rekey_call(progress.keys, first_call, first_key)
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
    return progress.keys[_SEEN]


def calls_kept(progress: ProgressState) -> int:
    """How many calls (and tools) the state remembers the last result of."""
    state = progress.keys
    return (len(state) - _HEADER - state[_SEEN]) // 2


def tools_kept(progress: ProgressState) -> int:
    """How many tools the state remembers the last structured result of."""
    return 0 if progress.tools is None else len(progress.tools) // _SLOT


def learned_noise(progress: ProgressState, tool: str) -> list[int]:
    """The path CRCs learned as noise for ``tool`` in this session (see :func:`_compare_structure`)."""
    tools = progress.tools
    at = -1 if tools is None else _find_slot(tools, _tool_hash(tool))
    if tools is None or at < 0:
        return []
    sizes = tools[at + 2]
    return [e >> 8 for e in tools[at + _NOISY:at + _NOISY + (sizes >> 16 & 0xFF)] if e & 0xFF >= LEARN_AFTER]


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
    tools = progress.tools
    if tools is None:
        tools = progress.tools = array("Q")
    tool = _tool_hash(step.name)
    at = _find_slot(tools, tool)
    paging = False
    if at >= 0 and step.arg_tokens and step.args_key is not None:
        sizes = tools[at + 2]
        handed = tools[at + _TOKENS:at + _TOKENS + (sizes >> 8 & 0xFF)]
        if all(t in handed for t in step.arg_tokens):
            paging = True
            step.args_hash = step.args_key
    call = step.args_hash or 0
    leaves = step.leaves
    echo = 0 if paging else step.echo
    output = step.output_hash
    if at >= 0:
        noisy = _learn(tools, at, call, leaves)
        if noisy and leaves is not None:
            output = _without(leaves, noisy)
            old = _old_leaves(tools, at)
            if old is not None and tools[at + 1] == call:  # the last result, seen as it is now seen
                _remember_result(progress.keys, _with_echo(_without(old, noisy), echo))
    _store(tools, at, tool, call, leaves, step.result_tokens)
    return None if output is None else _with_echo(output, echo)


def _mask_clocks(progress: ProgressState, step: Step, output: int) -> int:
    """A tool result's hash with its counters that track the span clock left out (learned per tool:
    :class:`~otelloop.mapping.noise.ClockTable`); ``output`` as it is while none is learned.

    When a counter is learned at this step, the tool's previous result of the same call is judged again
    without it: remembered as seen, and the call's run continues from it, so the first repetition of a
    call whose only change is a server's uptime already counts as a repetition.
    """
    table = progress.clocks
    if table is None:
        table = progress.clocks = ClockTable()
    call = hash((step.name, step.args_hash)) & _MASK64
    clocks, before = table.observe(_tool_hash(step.name), call, step.start_ns, step.numbers, step.numbers_free,
                                   output)
    if not clocks:
        return output
    masked = _with_echo(_stable("clocks", *without_clocks(step.numbers_free, step.numbers, clocks)), step.echo)
    table.tools[-1].output = masked
    if before is not None and before.call == call:
        old = _with_echo(_stable("clocks", *without_clocks(before.free, before.numbers, clocks)), step.echo)
        _remember_result(progress.keys, old)
        _rekey_call(progress.keys, call, old, only_if=before.output)
    return masked


def _with_echo(output: int, echo: int) -> int:
    """A result's hash with the CRC of the argument values it echoes folded in (none: as it is)."""
    return _stable("echo", output, echo) & _MASK64 if echo else output


def _tool_hash(name: str) -> int:
    return _stable("tool", name) | 1  # never 0: an empty slot array holds no zero tool


def _find_slot(tools: array[int], tool: int) -> int:
    for at in range(0, len(tools), _SLOT):
        if tools[at] == tool:
            return at
    return -1


def _old_leaves(tools: array[int], at: int) -> list[int] | None:
    n = tools[at + 2] & 0xFF
    return None if n == _NO_LEAVES else list(tools[at + _LEAVES:at + _LEAVES + n])


def _learn(tools: array[int], at: int, call: int, leaves: tuple[int, ...] | None) -> set[int]:
    """Count the paths that changed between the tool's last result and this one of the same call; the
    paths learned as noise so far."""
    sizes = tools[at + 2]
    n_noisy = sizes >> 16 & 0xFF
    noisy_at = at + _NOISY
    old = _old_leaves(tools, at)
    if leaves is not None and old is not None and tools[at + 1] == call and len(old) == len(leaves):
        changed = [new for prev, new in zip(old, leaves, strict=True) if prev != new]
        same_paths = all(prev >> _PATH_SHIFT == new >> _PATH_SHIFT for prev, new in zip(old, leaves, strict=True))
        # something the result says stayed the same: what changed is beside it, not the result itself
        kept = any(prev == new and new & SAYS for prev, new in zip(old, leaves, strict=True))
        if same_paths and kept and 0 < len(changed) <= 2:
            for new in changed:
                if not new & LEARNABLE:
                    continue
                path = new >> _PATH_SHIFT
                entries = tools[noisy_at:noisy_at + n_noisy]
                i = next((j for j, e in enumerate(entries) if e >> 8 == path), -1)
                if i >= 0:
                    tools[noisy_at + i] = (path << 8) | min((entries[i] & 0xFF) + 1, 0xFF)
                elif n_noisy < MAX_NOISY:
                    tools[noisy_at + n_noisy] = (path << 8) | 1
                    n_noisy += 1
                else:  # full: the path seen changing least often gives way
                    j = min(range(n_noisy), key=lambda k: entries[k] & 0xFF)
                    tools[noisy_at + j] = (path << 8) | 1
            tools[at + 2] = (sizes & 0xFFFF) | (n_noisy << 16)
    return {e >> 8 for e in tools[noisy_at:noisy_at + n_noisy] if e & 0xFF >= LEARN_AFTER}


def _without(leaves: tuple[int, ...] | list[int], noisy: set[int]) -> int:
    """A stable hash of a result's leaves, the values at the ``noisy`` paths left out."""
    kept = array("Q", (leaf if leaf >> _PATH_SHIFT not in noisy else (leaf >> _PATH_SHIFT) << _PATH_SHIFT
                       for leaf in leaves))
    return hash_bytes(b"leaves" + kept.tobytes())


def _store(tools: array[int], at: int, tool: int, call: int, leaves: tuple[int, ...] | None,
           tokens: tuple[int, ...]) -> None:
    """Remember this result as the tool's last one (its slot moves to the end: the most recent)."""
    if at >= 0:
        slot = tools[at:at + _SLOT]
        del tools[at:at + _SLOT]
    else:
        slot = array("Q", bytes(8 * _SLOT))
        if len(tools) >= MAX_TOOLS * _SLOT:
            del tools[:_SLOT]
    n = _NO_LEAVES if leaves is None else len(leaves)
    slot[0], slot[1] = tool, call
    slot[2] = (slot[2] & ~0xFFFF) | n | (len(tokens) << 8)
    if leaves is not None:
        slot[_LEAVES:_LEAVES + n] = array("Q", leaves)
    if tokens:
        slot[_TOKENS:_TOKENS + len(tokens)] = array("Q", tokens)
    tools.extend(slot)


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


def _rekey_call(state: array[int], call: int, key: int, only_if: int | None = None) -> None:
    """Give ``call``'s remembered last result the key ``key`` (the same result seen anew), its run kept;
    with ``only_if``, only while that is the key it remembers."""
    start = _HEADER + state[_SEEN]
    i = _find(state, call, start, len(state), 2)
    if i >= 0 and (only_if is None or state[i + 1] & ~_RUN_MASK == only_if & _MASK64 & ~_RUN_MASK):
        state[i + 1] = (key & _MASK64 & ~_RUN_MASK) | (state[i + 1] & _RUN_MASK)


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
