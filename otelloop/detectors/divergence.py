"""The ``divergence`` detector (docs/detectors.md): the same ``(kind, name)`` step repeated back to back.

This module owns the consecutive-repeat check, its configuration and its per-session state. It fires
early and cheaply on the commonest stuck loop (``search, search, search``); alternating and
near-duplicate patterns are left to the ``trajectory`` and ``stall`` detectors. Progress-aware (the
default profile) it counts among the session's tool steps only — a ReAct agent's model turns between
its tool calls are not in the way, and chat turns are never counted.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, field_validator

from otelloop.detectors.base import TOOL_STEPS, TRANSIENT_RETRIES, Detector, DetectorConfig, StepContext, retrying
from otelloop.detectors.registry import register
from otelloop.model import Finding, Step

#: Threshold of a step kind that ``thresholds`` does not name: larger than any sensible window, so never.
OTHER_KINDS_THRESHOLD = 999
DEFAULT_THRESHOLDS: dict[str, int] = {"tool": 4, "llm": 5, "system": OTHER_KINDS_THRESHOLD}
#: The seed profile's thresholds: three identical tool steps in a row.
SEED_THRESHOLDS: dict[str, int] = {"tool": 3, "llm": 5, "system": OTHER_KINDS_THRESHOLD}
#: Signatures remembered as already reported in one session. Beyond it the oldest is forgotten, which
#: at worst repeats one event for a session that has already diverged on this many distinct steps.
MAX_EMITTED = 64


class DivergenceConfig(DetectorConfig):
    """``detectors.divergence``.

    Attributes:
        window: how many recent step signatures are looked at; a repeat run longer than this counts as
            ``window``, so a threshold above it can never fire. Default: 8.
        thresholds: step kind → consecutive identical steps that fire. Kinds you do not list keep their
            default; kinds that have none use 999. Progress-aware, the first step of a run may have
            brought something new, so ``tool: 4`` is a result seen three times more. Default:
            ``{tool: 4, llm: 5, system: 999}``.
        transient_retries: attempts of one call failing the same transient way (an HTTP 429 or 503, a
            timeout: by status code, see docs/detectors.md#transient-failures) that are a retry, not
            evidence of a loop; from the next attempt on, the whole row counts. The same allowance
            covers a poll answering the same again after it moved on its own (see
            docs/detectors.md#polls-and-batches). With ``progress_aware`` only. Default: 7.
        progress_aware: repeats are counted among the session's tool steps only, and only those that
            brought nothing new: a step of another kind between two tool calls (the model's turn in a
            ReAct agent) neither counts nor breaks the run, so LLM turns — conversations with a person
            answering in between — never make one; a tool step that brought something new (a result not
            seen before in the session) starts the run afresh, so a batch of reads of different files
            or a polled status that keeps changing is not a repeat; a tool step whose span carries
            nothing to judge it by (no result, no error message) ends the run, since its name alone
            says nothing. Default: true.
    """

    window: int = Field(8, ge=1)
    thresholds: dict[str, Annotated[int, Field(ge=1)]] = DEFAULT_THRESHOLDS
    progress_aware: bool = True
    transient_retries: int = Field(TRANSIENT_RETRIES, ge=0)

    @field_validator("thresholds")
    @classmethod
    def _keep_unlisted_defaults(cls, v: dict[str, int]) -> dict[str, int]:
        """Setting only ``tool: 4`` must not silently turn the ``llm`` check off."""
        return {**DEFAULT_THRESHOLDS, **v}


class DivergenceState:
    """The trailing run of one signature and the signatures already reported.

    A ring buffer's suffix count of the newest signature equals the length of the current run of that
    signature capped at the buffer size, so the run is all that is kept: a few dozen bytes per session
    instead of a buffer of tuples.
    """

    __slots__ = ("kind", "name", "run", "emitted")

    def __init__(self) -> None:
        self.kind = ""
        self.name = ""
        #: length of the current run of (kind, name), capped at the window
        self.run = 0
        #: hashes of the signatures reported in this session, oldest first; None until the first one
        self.emitted: dict[int, None] | None = None


@register
class DivergenceDetector(Detector):
    """Warns once per signature per session when a step repeats ``threshold`` times in a row.

    Advisory only (severity ``warn``, no vote): three identical tool calls are often legitimate
    polling, so this detector informs dashboards early and leaves verdicts to the scoring detectors.
    """

    name: ClassVar[str] = "divergence"
    #: A stopped session's repeats are not counted: its verdict is already the most severe.
    holds: ClassVar[bool] = True
    Config: ClassVar[type[DetectorConfig]] = DivergenceConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"seed": {"progress_aware": False,
                                                              "thresholds": SEED_THRESHOLDS}}
    config: DivergenceConfig
    settings: DivergenceConfig

    def new_state(self) -> DivergenceState:
        return DivergenceState()

    gated: ClassVar[bool] = True

    def record(self, state: DivergenceState, step: Step, ctx: StepContext) -> None:
        """A step that brought something new starts a run of its own, one step long (progress-aware): it is
        kept as the run, and reported only under a threshold of 1, where :meth:`observe` judges it."""
        cfg = self.settings
        if (not cfg.progress_aware or cfg.thresholds.get(step.kind, OTHER_KINDS_THRESHOLD) <= 1
                or ((step.retry or step.wait) and retrying(step, cfg.transient_retries))):
            self.observe(state, step, ctx)
            return
        state.kind, state.name, state.run = step.kind, step.name, 1

    def kinds(self, held: bool = False) -> frozenset[str] | None:
        """Progress-aware, tool steps only (a model turn is neither evidence nor a break of a run)."""
        return TOOL_STEPS if self.settings.progress_aware else None

    def observe(self, state: DivergenceState, step: Step, ctx: StepContext) -> None:
        cfg = self.settings
        if cfg.progress_aware and (step.kind != "tool"
                                   or ((step.retry or step.wait) and retrying(step, cfg.transient_retries))):
            return
        count = self._extend_run(state, step)
        threshold = cfg.thresholds.get(step.kind, OTHER_KINDS_THRESHOLD)
        if count < threshold:
            return
        key = hash((step.kind, step.name))
        if state.emitted is not None and key in state.emitted:
            return
        _remember(state, key)
        ctx.report(Finding(
            detector=self.name,
            event="otelloop.divergence_suspected",
            severity="warn",
            attributes={
                "otelloop.signature.kind": step.kind,
                "otelloop.signature.name": step.name,
                "otelloop.repeat_count": count,
            },
            message=f"{step.kind} step {step.name!r} repeated {count} times in a row",
        ))

    def _extend_run(self, state: DivergenceState, step: Step) -> int:
        """Add ``step`` to the run and return the suffix count within the configured window."""
        cfg = self.settings
        if cfg.progress_aware and step.novel is None:  # unjudged: no evidence, the run ends
            state.kind, state.name, state.run = "", "", 0
            return 0
        if step.kind == state.kind and step.name == state.name and not (cfg.progress_aware and step.novel):
            # Capping here also applies a window shrunk by a reload to a run counted under the old one.
            state.run = min(state.run + 1, cfg.window)
        else:
            state.kind, state.name, state.run = step.kind, step.name, 1
        return state.run

    def summary(self, state: DivergenceState) -> dict[str, Any]:
        return {
            "last_signature": {"kind": state.kind, "name": state.name},
            "repeat_count": state.run,
            "emitted_signatures": len(state.emitted or ()),
        }


def _remember(state: DivergenceState, key: int) -> None:
    """Mark a signature as reported, forgetting the oldest beyond :data:`MAX_EMITTED`."""
    if state.emitted is None:
        state.emitted = {}
    state.emitted[key] = None
    if len(state.emitted) > MAX_EMITTED:
        del state.emitted[next(iter(state.emitted))]
