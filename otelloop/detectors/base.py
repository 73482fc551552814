"""The detector contract: per-session state, one call per step, findings out.

A detector is a class with a unique ``name`` (equal to its key under ``detectors:`` in the configuration
and to its ``detector`` metric label), a pydantic ``Config`` model with documented defaults (a
:class:`~otelloop.detector_config.DetectorConfig`: the configuration owns the base), and two
methods: ``new_state()`` returns a small per-session state object and ``observe(state, step, ctx)``
looks at one step and reports through ``ctx``. Detectors do no I/O and keep no global state; the
engine owns the states, their lifetime and eviction, and isolates a failing detector from the others.

A detector whose judgement compares windows, similarities, graphs or histories may opt into the novelty
gate (``otelloop.detection``): it sets ``gated = True`` and implements ``record(state, step, ctx)``, which
the engine calls instead of ``observe`` on a *calm* step — a tool step that brought something new
(``Step.novel`` True) in a session no operator watches. ``record`` keeps the bookkeeping later
judgements need and reports what ``observe`` would report on such a step, so the gate never changes a
verdict; it skips the judgement a step that brought something new cannot need.

A detector may also declare ``holds = True`` and implement ``hold(state, step, ctx)``, which the engine
calls instead of ``observe`` on a *held* step: a step that brought nothing new (``Step.novel`` not True: a
repeat, an LLM or agent step) of a session whose ``stop`` holds until an operator resumes it. No judgement
can change such a session's verdict, so ``hold`` gives the span what it must carry (a score, a level) and
raises nothing; it may keep cheap bookkeeping current (a window, a total), never judge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from otelloop.detector_config import DetectorConfig
from otelloop.model import AttrValue, Finding, Step, Verdict

__all__ = ["CONTINUE", "POLL_WAITS", "SYSTEM_STEPS", "TOOL_STEPS", "TRANSIENT_RETRIES", "Detector", "DetectorConfig",
           "Settings", "StepContext", "retrying"]


#: Default retry allowance of the detectors that judge failures (``transient_retries``): a healthy client
#: retries a call that gets 429 or 503 or times out, with backoff, a handful of times (OpenAI's and
#: Anthropic's Python SDKs 2 by default, botocore's standard mode 3 attempts, urllib3 ``Retry`` as set);
#: 7 leaves a loop of a permanently failing call stopped at its 8th attempt. The same allowance covers
#: the same answers in a row of a poll of something that moves on its own (``Step.wait``,
#: :mod:`otelloop.work`): a job's status read every few seconds until it is done.
TRANSIENT_RETRIES = 7
#: The most same answers in a row of a poll that moved which are waiting (``Step.wait``), whatever the retry
#: allowance: the loop window. A poll stuck after it moved is a loop from its first same answer, and a
#: loop is to be stopped within 6 tool calls of its start; no client convention says how long to poll (a
#: retry count is a client's setting, a poll's patience is not), so the window is the bound.
POLL_WAITS = 6


def retrying(step: Step, allowance: int) -> bool:
    """Whether ``step`` is a transient failure within the retry allowance (``Step.retry``), or a poll
    waiting within it and within :data:`POLL_WAITS` (``Step.wait``): a detector neither counts it as
    evidence of a loop nor lets it break a run; from attempt ``allowance + 1`` the whole row counts.

    Detectors test ``step.retry or step.wait`` before calling it: most steps are neither, and the call
    would cost more than the test on every step."""
    return 0 < step.retry <= allowance or 0 < step.wait <= min(allowance, POLL_WAITS)


#: What :meth:`Detector.kinds` returns for a detector that looks at tool steps only, and at agent (graph
#: node) steps only.
TOOL_STEPS: frozenset[str] = frozenset(("tool",))
SYSTEM_STEPS: frozenset[str] = frozenset(("system",))

#: What ``StepContext.vote(name, "continue")`` records: a detector that withdraws its vote on nearly every
#: step may write it into ``ctx.votes`` itself, without the call.
CONTINUE: tuple[Verdict, str, str] = ("continue", "", "")


class StepContext:
    """What a detector may say about the step it is observing.

    One context is created per step and shared by all detectors, in registration order.
    """

    __slots__ = ("session_id", "agent_id", "findings", "attributes", "overwrites", "votes", "raised")

    def __init__(self, session_id: str, agent_id: str) -> None:
        self.session_id = session_id
        self.agent_id = agent_id
        self.findings: list[Finding] = []
        #: Attributes added to the step's span (scores, cycle ids, …).
        self.attributes: dict[str, AttrValue] = {}
        #: Attributes that replace a value the span already carries (only applied when present).
        self.overwrites: dict[str, AttrValue] = {}
        #: detector name -> (verdict, reason, message); absent means "my vote is unchanged".
        self.votes: dict[str, tuple[Verdict, str, str]] = {}
        #: whether a vote of this step is more than ``continue`` (most steps give only those, which change
        #: nothing for a session that holds no vote)
        self.raised = False

    def report(self, finding: Finding) -> None:
        """Attach a finding (a span event) to this step's span."""
        self.findings.append(finding)

    def set_attribute(self, key: str, value: AttrValue) -> None:
        """Give this step's span an attribute (for attribute-only UIs)."""
        self.attributes[key] = value

    def overwrite_attribute(self, key: str, value: AttrValue) -> None:
        """Replace ``key`` on the span with ``value`` if the span carries it; the old value is dropped."""
        self.overwrites[key] = value

    def vote(self, detector: str, verdict: Verdict, reason: str = "", message: str = "") -> None:
        """Set this detector's current contribution to the session verdict (docs/detectors.md#verdicts).

        ``continue`` withdraws an earlier vote. A detector that does not vote on a step keeps its vote.
        """
        self.votes[detector] = (verdict, reason, message)
        if verdict != "continue":
            self.raised = True


class Settings:
    """A validated detector configuration's field values as plain attributes (``Detector.settings``)."""

    def __init__(self, config: DetectorConfig) -> None:
        self.__dict__.update(config.__dict__)


class Detector(ABC):
    """Base class of all detectors. Subclasses set ``name`` and ``Config`` and implement two methods."""

    name: ClassVar[str]
    Config: ClassVar[type[DetectorConfig]] = DetectorConfig
    #: Profile name → config values that differ from ``Config``'s defaults under that profile
    #: (``detectors.profile``); a value in the configuration file still wins.
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}
    #: Whether the engine calls :meth:`record` instead of :meth:`observe` on a calm step (see above).
    #: Default: False, so a detector that does not know the gate is observed on every step.
    gated: ClassVar[bool] = False
    #: Whether the engine calls :meth:`hold` instead of :meth:`observe` on a held step (see above).
    #: Default: False, so a detector that does not know the hold is observed on every step.
    holds: ClassVar[bool] = False

    def __init__(self, config: DetectorConfig) -> None:
        self.config = config
        #: The same values as plain attributes, for the per-step code: a read from the pydantic model goes
        #: through its ``__getattr__`` hook, which keeps CPython from specialising the read (three to five
        #: times a plain attribute's time, by ``timeit`` on two days). A reload builds new detectors, so
        #: the copy never goes stale. Subclasses annotate it with their ``Config`` type, as they do ``config``.
        self.settings: Any = Settings(config)

    @abstractmethod
    def new_state(self) -> Any:
        """Return the empty per-session state. It must stay bounded whatever the session's length."""

    @abstractmethod
    def observe(self, state: Any, step: Step, ctx: StepContext) -> None:
        """Look at one step of a session, update ``state``, and report through ``ctx``.

        Called synchronously on the hot path, once per step, in arrival order; must not block.
        """

    def record(self, state: Any, step: Step, ctx: StepContext) -> None:
        """Observe a calm step (a tool step that brought something new, ``step.novel`` True) of a gated
        detector: update ``state`` and report through ``ctx`` exactly as :meth:`observe` would on it,
        leaving out only the work whose result such a step cannot change. Default: :meth:`observe`."""
        self.observe(state, step, ctx)

    def hold(self, state: Any, step: Step, ctx: StepContext) -> None:
        """Give a held step (one that brought nothing new, in a session whose stop holds) what its span
        must carry, without judging it: no finding, no vote; ``state`` may take in the step where that
        is cheap bookkeeping (a window, a total). Default: nothing (the span carries nothing of this
        detector's; the engine then leaves the detector out of held steps)."""
        return None

    def kinds(self, held: bool = False) -> frozenset[str] | None:
        """The step kinds (``Step.kind``) this detector does anything with under its settings (with
        ``held``: on a held step, which a detector that ``holds`` gets as :meth:`hold`). The engine calls
        none of its methods on a step of another kind: most steps are model turns, and a call that
        returns at once still costs the step a call. Default: None, every kind."""
        return None

    def overwritten_keys(self) -> frozenset[str]:
        """Span attribute keys this detector may pass to ``ctx.overwrite_attribute``. Default: none.

        The reader keeps these keys, so the pipeline can tell whether a span carries one.
        """
        return frozenset()

    def summary(self, state: Any) -> dict[str, Any]:
        """Evidence for the sessions API (``GET /v1/sessions/{id}``). Default: nothing."""
        return {}
