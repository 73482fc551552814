"""Runs the enabled detectors on each step of a session, isolating failures, and folds their votes into the
session's verdict.

The engine lives beside the detectors package, not in it: it is what brings detectors and sessions
(`otelloop.state`) together, so that the detectors never import the session store.

**The novelty gate** (docs/architecture.md#the-novelty-gate). Every step is first judged by the
session's progress tracker (``otelloop.progress``, O(1)). A tool step that brought something new
(``Step.novel`` True) in a session no operator is watching is *calm*: a detector that declares itself
``gated`` gets :meth:`~otelloop.detectors.base.Detector.record` for it — the bookkeeping its later
judgements need and what it says about such a step — instead of its full
:meth:`~otelloop.detectors.base.Detector.observe`. Every other step (a repeat, a step that cannot be
judged, an LLM or agent step, any step of a watched session) runs every detector in full. ``record``
must leave the state and the context as ``observe`` would on that step, so the gate changes the cost,
never a verdict, finding or attribute; ``gate=False`` runs ``observe`` everywhere, and
``tests/test_gate.py`` holds both to the same output on the corpora and their variants.

**The hold** (docs/architecture.md#after-the-verdict). A session whose ``stop`` holds (only an operator's
resume lifts it) can no longer change its verdict, whatever its steps show. A step of such a session that
did not bring something new (a repeat: the loop going on; an LLM or agent step; a tool step with nothing
to judge) is *held*: a detector that declares ``holds`` gets
:meth:`~otelloop.detectors.base.Detector.hold` — what every span must carry, as it stands — instead of
a judgement, and the session counts the step in ``Session.held``. A step that brings something new is
calm as on any session, and a watched or paused session's steps are judged in full. The pipeline turns
the hold on as ``state.hold_stopped_sessions`` says (by default on, off under the seed profile): held
steps raise no finding, so with it off a stopped session keeps every later finding as evidence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, get_args

from otelloop import progress
from otelloop.detectors.base import Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import registered
from otelloop.model import Step, StepKind
from otelloop.state import Session, slot

log = logging.getLogger(__name__)

#: Minimum seconds between two log lines about the same failing detector.
ERROR_LOG_INTERVAL = 60.0
#: Seconds a session stays watched after an operator read its detail (``summaries``), and how many
#: sessions are watched at most (the oldest is forgotten beyond it).
WATCH_SECONDS = 300.0
MAX_WATCHED = 256


#: What the engine calls for one detector on a step: the method, the detector, and the place of its state
#: in a session's state list.
Call = tuple[Callable[..., None], Detector, int]


class Plan(dict[str, list[Call]]):
    """The calls of one plan (full, calm or held), per step kind: a detector that does nothing with a kind
    (``Detector.kinds``) is left out of that kind's calls. A kind no list was made for (none but
    ``Step.kind``'s three are mapped) gets the calls of the detectors that look at every kind."""

    def __init__(self, calls: list[Call], held: bool = False) -> None:
        super().__init__((kind, [c for c in calls if _looks_at(c[1], kind, held)]) for kind in get_args(StepKind))
        self.every_kind = [c for c in calls if c[1].kinds(held) is None]

    def __missing__(self, kind: str) -> list[Call]:
        return self.every_kind


def _looks_at(detector: Detector, kind: str, held: bool) -> bool:
    kinds = detector.kinds(held)
    return kinds is None or kind in kinds


class DetectorEngine:
    """The detectors in force and the loop that runs them.

    Args:
        configs: detector name → validated config (``Config.detectors``); missing names use defaults.
        only: restrict to these detector names (tests and benchmarks).
        on_error: called with the detector name when a detector raises (metrics).
        gate: let gated detectors only ``record`` calm steps (see above); False runs every detector in
            full on every step (the equal-output tests compare the two).
        hold: let detectors that hold only ``hold`` a stopped session's steps that bring nothing new
            (see above; the pipeline sets it from ``state.hold_stopped_sessions``); False (the engine's
            own default, for tests that judge every step) judges them (the gate off turns the hold off
            too).
        clock: monotonic clock for how long a session stays watched (injectable for tests).
        native_progress: run the native progress tracker (True) or the Python one (False); None: the
            native one where it is built (``otelloop.progress.tracker``; the equal-output tests run both).
    """

    def __init__(self, configs: Mapping[str, DetectorConfig] | None = None, only: Iterable[str] | None = None,
                 on_error: Callable[[str], None] | None = None, gate: bool = True, hold: bool = False,
                 clock: Callable[[], float] = time.monotonic, native_progress: bool | None = None) -> None:
        self._only = set(only) if only is not None else None
        self._on_error = on_error
        self._last_error_log: dict[str, float] = {}
        self.gate = gate
        self.hold = hold
        self._clock = clock
        self.progress = progress.tracker(native_progress)
        #: session id -> when its watch ends (monotonic), oldest first
        self._watched: dict[str, float] = {}
        self.detectors: list[Detector] = []
        self.reconfigure(configs or {})

    def reconfigure(self, configs: Mapping[str, DetectorConfig]) -> None:
        """Swap in detectors built from new configs; session states are kept and used from the next step."""
        detectors = []
        for name, cls in registered().items():
            if self._only is not None and name not in self._only:
                continue
            cfg = configs.get(name) or cls.Config()
            if cfg.enabled:
                detectors.append(cls(cfg))
        self.detectors = detectors
        #: What each detector is called with on a step run in full, on a calm step and on a held one, per
        #: step kind (:class:`Plan`)
        self._full = Plan([(det.observe, det, slot(det.name)) for det in detectors])
        self._calm = Plan([(det.record if det.gated else det.observe, det, slot(det.name)) for det in detectors])
        #: (a detector that holds with the base class's ``hold``, which gives nothing, is left out)
        self._held = Plan([(det.hold if det.holds else det.observe, det, slot(det.name)) for det in detectors
                           if not det.holds or type(det).hold is not Detector.hold], held=True)
        #: the length of a session's state list the detectors need
        self._width = max((slot(det.name) + 1 for det in detectors), default=0)

    def overwritten_keys(self) -> frozenset[str]:
        """Span attribute keys the detectors in force may overwrite."""
        return frozenset().union(*(det.overwritten_keys() for det in self.detectors))

    def observe(self, session: Session, step: Step) -> StepContext:
        """Run every detector on ``step`` (gated ones only ``record`` a calm step) and return what they
        said; sets ``otelloop.verdict``."""
        ctx = StepContext(session.id, step.agent or session.agent)
        tracker = self.progress
        if session.progress is None:
            session.progress = tracker.new_state()
        tracker.observe(session.progress, step)
        if step.novel is None and step.kind == "tool":  # progress.unjudged(step), without the call
            session.unjudged += 1
        states = session.states
        if len(states) < self._width:
            states.extend([None] * (self._width - len(states)))
        plan = self._plan(session, step)
        if plan is self._held:
            session.held += 1
        for run, det, place in plan[step.kind]:
            try:
                state = states[place]
                if state is None:
                    state = states[place] = det.new_state()
                run(state, step, ctx)
            except Exception:
                self._failed(det.name)
        if ctx.raised or (session.votes is not None and ctx.votes):
            # Votes of "continue" from detectors that hold no vote change nothing: most steps give only those.
            session.apply_votes(ctx.votes)
        for finding in ctx.findings:
            session.remember(finding, step)
        ctx.attributes["otelloop.verdict"] = session.verdict
        return ctx

    def _plan(self, session: Session, step: Step) -> Plan:
        """What each detector is called with on ``step``: the calm, held or full plan (see above)."""
        if not self.gate or session.paused or (self._watched and self._watching(session.id)):
            return self._full
        if step.novel:
            return self._calm
        return self._held if self.hold and session.stop_hold is not None else self._full

    def held(self, session: Session, step: Step) -> bool:
        """Whether detectors that hold only ``hold`` this step: the gate and the hold are on, the session's
        stop holds, the step brought nothing new, and no operator watches the session."""
        return self._plan(session, step) is self._held

    def calm(self, session: Session, step: Step) -> bool:
        """Whether gated detectors only ``record`` this step: the gate is on, the step brought something new
        (set by the progress tracker), and no operator watches the session (paused, or its detail read in
        the last :data:`WATCH_SECONDS`)."""
        return self._plan(session, step) is self._calm

    def watch(self, session_id: str) -> None:
        """Run every detector in full on the session's steps for the next :data:`WATCH_SECONDS`."""
        watched = self._watched
        watched.pop(session_id, None)
        watched[session_id] = self._clock() + WATCH_SECONDS
        if len(watched) > MAX_WATCHED:
            del watched[next(iter(watched))]

    def _watching(self, session_id: str) -> bool:
        watched = self._watched
        until = watched.get(session_id)
        if until is None:
            return False
        if until < self._clock():
            del watched[session_id]
            return False
        return True

    def _failed(self, name: str) -> None:
        if self._on_error is not None:
            self._on_error(name)
        now = time.monotonic()
        if now - self._last_error_log.get(name, -ERROR_LOG_INTERVAL) >= ERROR_LOG_INTERVAL:
            self._last_error_log[name] = now
            log.exception("detector %s failed on a step; the span is forwarded without its findings", name)

    def summaries(self, session: Session) -> dict[str, dict[str, Any]]:
        """Per-detector evidence for the sessions API; the session is watched from now on (:meth:`watch`)."""
        self.watch(session.id)
        out = {}
        for det in self.detectors:
            state = session.state(det.name)
            if state is not None:
                try:
                    out[det.name] = det.summary(state)
                except Exception:
                    self._failed(det.name)
        return out
