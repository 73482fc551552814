"""Runs the enabled detectors on each step of a session, isolating failures, and folds their votes into the
session's verdict.

The engine lives beside the detectors package, not in it: it is what brings detectors and sessions
(`otelloop.state`) together, so that the detectors never import the session store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from otelloop import progress
from otelloop.detectors.base import Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import registered, slot
from otelloop.model import Step
from otelloop.state import Session

log = logging.getLogger(__name__)

#: Minimum seconds between two log lines about the same failing detector.
ERROR_LOG_INTERVAL = 60.0


class DetectorEngine:
    """The detectors in force and the loop that runs them.

    Args:
        configs: detector name → validated config (``Config.detectors``); missing names use defaults.
        only: restrict to these detector names (tests and benchmarks).
        on_error: called with the detector name when a detector raises (metrics).
    """

    def __init__(self, configs: Mapping[str, DetectorConfig] | None = None, only: Iterable[str] | None = None,
                 on_error: Callable[[str], None] | None = None) -> None:
        self._only = set(only) if only is not None else None
        self._on_error = on_error
        self._last_error_log: dict[str, float] = {}
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
        #: (detector, place of its state in a session's state list), and the list length they need
        self._placed = [(det, slot(det.name)) for det in detectors]
        self._width = max((place + 1 for _, place in self._placed), default=0)

    def overwritten_keys(self) -> frozenset[str]:
        """Span attribute keys the detectors in force may overwrite."""
        return frozenset().union(*(det.overwritten_keys() for det in self.detectors))

    def observe(self, session: Session, step: Step) -> StepContext:
        """Run every detector on ``step`` and return what they said; sets ``otelloop.verdict``."""
        ctx = StepContext(session.id, step.agent or session.agent)
        if session.progress is None:
            session.progress = progress.new_state()
        progress.observe(session.progress, step)
        if progress.unjudged(step):
            session.unjudged += 1
        states = session.states
        if len(states) < self._width:
            states.extend([None] * (self._width - len(states)))
        for det, place in self._placed:
            try:
                state = states[place]
                if state is None:
                    state = states[place] = det.new_state()
                det.observe(state, step, ctx)
            except Exception:
                self._failed(det.name)
        if ctx.votes:
            session.apply_votes(ctx.votes)
        for finding in ctx.findings:
            session.remember(finding, step)
        ctx.attributes["otelloop.verdict"] = session.verdict
        return ctx

    def _failed(self, name: str) -> None:
        if self._on_error is not None:
            self._on_error(name)
        now = time.monotonic()
        if now - self._last_error_log.get(name, -ERROR_LOG_INTERVAL) >= ERROR_LOG_INTERVAL:
            self._last_error_log[name] = now
            log.exception("detector %s failed on a step; the span is forwarded without its findings", name)

    def summaries(self, session: Session) -> dict[str, dict[str, Any]]:
        """Per-detector evidence for the sessions API."""
        out = {}
        for det in self.detectors:
            state = session.state(det.name)
            if state is not None:
                try:
                    out[det.name] = det.summary(state)
                except Exception:
                    self._failed(det.name)
        return out
