"""The ``entropy`` detector (docs/detectors.md#entropy): too few distinct recent actions in a session.

This module owns the uniqueness score over the last ``window`` ``(intent, tool_call, action_status)``
tuples, its LOOP / WARNING / NORMAL classification, the ``otelloop.entropy_alert`` event, the
authoritative overwrite of an agent's self-reported score, and this detector's share of the verdict.
"""

from __future__ import annotations

import sys
from typing import Any, ClassVar

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from otelloop.bounds import InternTable, Memo
from otelloop.detectors.base import CONTINUE, TRANSIENT_RETRIES, Detector, DetectorConfig, StepContext, retrying
from otelloop.detectors.registry import register
from otelloop.model import Finding, Step

#: (intent, tool_call, action_status) of one step, plus its result when progress-aware; compared by
#: exact equality.
Entry = tuple[str | int, ...]


class EntropyConfig(DetectorConfig):
    """``detectors.entropy``.

    Attributes:
        window: how many recent steps are scored. Default: 5.
        loop_threshold: a score strictly below it is LOOP (event and a ``nudge`` vote). Default: 0.25.
        warning_threshold: a score strictly below it is WARNING; at or above it NORMAL. Default: 0.50.
        authoritative_attribute: span attribute holding an agent's self-reported score, replaced by
            the computed one when present; null leaves spans alone. Default: ``cognition.entropy_score``.
        transient_retries: attempts of one call failing the same transient way (an HTTP 429 or 503, a
            timeout: by status code, see docs/detectors.md#transient-failures), sent back to back, that are
            a client's retry, not evidence of a loop; from the next attempt on, the whole row counts. Attempts
            the model re-sends after each failure, and a poll answering the same again after it moved on its
            own (docs/detectors.md#polls-and-batches), get at most this many, and never more than 6 (the loop window).
            With ``progress_aware`` only. Default: 7.
        progress_aware: the window holds the session's tool steps only, so a ReAct agent's model turns
            between its tool calls do not dilute it and chat turns never fill it; two steps count as the
            same action only when their results are the same too (the result or the file version they
            produced), so reading ten different files is ten different actions; a tool step whose span
            carries nothing to judge it by (no result, no error message) is left out. Steps left out
            still get the score as it stands. Default: true.
    """

    window: int = Field(5, ge=1)
    loop_threshold: float = Field(0.25, ge=0.0, le=1.0)
    warning_threshold: float = Field(0.50, ge=0.0, le=1.0)
    authoritative_attribute: str | None = "cognition.entropy_score"
    progress_aware: bool = True
    transient_retries: int = Field(TRANSIENT_RETRIES, ge=0)

    @model_validator(mode="after")
    def _loop_below_warning(self) -> EntropyConfig:
        """LOOP above WARNING would make WARNING unreachable; the error points at ``loop_threshold``."""
        if self.loop_threshold > self.warning_threshold:
            error = PydanticCustomError("value_error", "must be <= warning_threshold ({warning})",
                                        {"warning": self.warning_threshold})
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [InitErrorDetails(type=error, loc=("loop_threshold",), input=self.loop_threshold)])
        return self


class EntropyState:
    """The session's last ``window`` entries, oldest first.

    A tuple rebuilt on each step rather than a deque: for a handful of entries it costs about a tenth
    of the bytes per session, and slicing to the configured length applies a reloaded window size
    without any rebuild step.
    """

    __slots__ = ("window", "score")

    def __init__(self) -> None:
        self.window: tuple[Entry, ...] = ()
        #: :func:`score` of the window, or None after the window changed (computed again when the next
        #: step is scored: an LLM step leaves the window as it is, and most steps are LLM steps or new work)
        self.score: float | None = 1.0


#: Scores whose severity a detector remembers (a window of ``n`` entries has at most ``n`` scores).
MAX_SEVERITIES = 4096

#: One shared tuple per distinct entry: sessions repeat the same few, so windows share them.
_interned = InternTable(16384, 4 << 20, lambda e: 64 + sum(sys.getsizeof(s) for s in e))


def score(window: tuple[Entry, ...]) -> float:
    """Distinct entries / entries present, rounded to 4 decimals (1.0 for an empty window)."""
    if not window:
        return 1.0
    key = (len(set(window)), len(window))
    value: float | None = _ratios.get(key)
    if value is None:  # ``round`` to 4 places costs more than the rest of the score: done once per ratio
        value = _ratios.put(key, round(key[0] / key[1], 4), 150)
    return value


#: (distinct, present) → score: a window of ``n`` entries has at most ``n`` scores.
_ratios = Memo(4096, 1 << 20)


def most_frequent(window: tuple[Entry, ...]) -> tuple[Entry, int]:
    """The most frequent entry and its count; among equally frequent ones, the most recent."""
    counts: dict[Entry, int] = {}
    for entry in window:
        counts[entry] = counts.get(entry, 0) + 1
    best = max(counts.values())
    latest = next(e for e in reversed(window) if counts[e] == best)
    return latest, best


@register
class EntropyDetector(Detector):
    """Scores how varied a session's recent actions are and raises ``nudge`` while it is a LOOP.

    The score is recomputed from the window on every step with the thresholds in force, so a reload
    applies on the next step. The alert repeats on every LOOP step (unlike the one-shot warnings of
    other detectors) because each LOOP step is another iteration the agent should be told about, and a
    score back at WARNING or NORMAL withdraws the vote.
    """

    name: ClassVar[str] = "entropy"
    Config: ClassVar[type[DetectorConfig]] = EntropyConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"seed": {"progress_aware": False}}
    config: EntropyConfig
    settings: EntropyConfig

    def __init__(self, config: DetectorConfig) -> None:
        super().__init__(config)
        #: score -> severity under this detector's thresholds (a reload builds a new detector): every step
        #: classifies a score, and scores take few values
        self._severities: dict[float, str] = {}

    def new_state(self) -> EntropyState:
        return EntropyState()

    gated: ClassVar[bool] = True

    def observe(self, state: EntropyState, step: Step, ctx: StepContext) -> None:
        self._conclude(state, self._count(state, step), ctx)

    def _count(self, state: EntropyState, step: Step) -> bool:
        """Add the step's entry to the window if the step counts (progress-aware: a judged tool step
        outside a retry allowance; seed: every step); whether it did. A step not counted still cuts a
        window a reload shrank."""
        cfg = self.settings
        size = cfg.window
        if cfg.progress_aware and (step.kind != "tool" or step.novel is None
                                   or ((step.retry or step.wait) and retrying(step, cfg.transient_retries))):
            if len(state.window) > size:
                state.window, state.score = state.window[-size:], None
            return False
        entry: Entry = ((step.intent, step.name, step.outcome, step.result or 0) if cfg.progress_aware
                        else (step.intent, step.name, step.outcome))
        state.window, state.score = (*state.window, _interned[entry])[-size:], None
        return True

    def record(self, state: EntropyState, step: Step, ctx: StepContext) -> None:
        """A step that brought something new: its entry (progress-aware: with a result never seen in the
        session) is kept without interning, since no other step shares it; the rest is :meth:`observe`'s."""
        cfg = self.settings
        if not cfg.progress_aware or ((step.retry or step.wait) and retrying(step, cfg.transient_retries)):
            self.observe(state, step, ctx)
            return
        entry = (step.intent, step.name, step.outcome, step.result or 0)  # a tool step's result (0: unknown)
        state.window, state.score = (*state.window, entry)[-cfg.window:], None
        self._conclude(state, True, ctx)

    holds: ClassVar[bool] = True

    def hold(self, state: EntropyState, step: Step, ctx: StepContext) -> None:
        """A stopped session's repeat: kept in the window as :meth:`observe` keeps it, so the score stays
        current, but it raises no alert and changes no vote (the first half of :meth:`_conclude`, inline:
        nearly every step of a stopped session that keeps sending comes here)."""
        self._count(state, step)
        value = state.score
        if value is None:
            value = state.score = score(state.window)
        attributes = ctx.attributes
        attributes["otelloop.entropy_score"] = value
        attributes["otelloop.entropy_severity"] = self._severities.get(value) or self._severity(value)
        authority = self.settings.authoritative_attribute
        if authority:
            ctx.overwrites[authority] = value

    def _conclude(self, state: EntropyState, counted: bool, ctx: StepContext) -> None:
        """Score the window, set the span's score and severity, and alert or vote on a counted step."""
        value = state.score
        if value is None:
            value = state.score = score(state.window)
        severity = self._severities.get(value) or self._severity(value)
        attributes = ctx.attributes  # ctx.set_attribute, without a call per key on every step
        attributes["otelloop.entropy_score"] = value
        attributes["otelloop.entropy_severity"] = severity
        authority = self.settings.authoritative_attribute
        if authority:
            ctx.overwrites[authority] = value
        if not counted:  # the score as it stands; only a counted step alerts or changes the vote
            return
        if severity == "loop":
            self._alert(state.window, value, ctx)
        else:
            ctx.votes[self.name] = CONTINUE

    def _severity(self, value: float) -> str:
        """:meth:`classify`, remembered for the next step with the same score."""
        severity = self.classify(value)
        if len(self._severities) < MAX_SEVERITIES:
            self._severities[value] = severity
        return severity

    def overwritten_keys(self) -> frozenset[str]:
        key = self.settings.authoritative_attribute
        return frozenset((key,)) if key else frozenset()

    def classify(self, value: float) -> str:
        """``loop``, ``warning`` or ``normal`` under the thresholds in force."""
        if value < self.settings.loop_threshold:
            return "loop"
        if value < self.settings.warning_threshold:
            return "warning"
        return "normal"

    def _alert(self, window: tuple[Entry, ...], value: float, ctx: StepContext) -> None:
        (intent, tool_call, status, *_), count = most_frequent(window)
        ctx.report(Finding(
            detector=self.name,
            event="otelloop.entropy_alert",
            severity="loop",
            attributes={
                "otelloop.entropy_score": value,
                "otelloop.window_size": len(window),
                "otelloop.repeated_pattern.intent": intent,
                "otelloop.repeated_pattern.tool_call": tool_call,
                "otelloop.repeated_pattern.action_status": status,
                "otelloop.occurrence_count": count,
            },
            message=f"entropy {value:g}: {tool_call!r} ({intent}, {status}) is {count} of the last "
                    f"{len(window)} steps",
        ))
        ctx.vote(self.name, "nudge", "entropy loop",
                 f"You have repeated {tool_call!r} with outcome {status} {count} times in your last "
                 f"{len(window)} steps. Stop repeating it: read its last result, then change your "
                 "approach or arguments, or report what is blocking you.")

    def summary(self, state: EntropyState) -> dict[str, Any]:
        value = score(state.window)
        return {
            "window": [list(entry[:3]) for entry in state.window],
            "entropy_score": value,
            "entropy_severity": self.classify(value),
        }

