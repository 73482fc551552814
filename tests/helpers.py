"""Builders shared by the tests."""

from __future__ import annotations

from typing import Any

from otelloop.config import build_config
from otelloop.detection import DetectorEngine
from otelloop.detectors.base import StepContext
from otelloop.model import Step
from otelloop.state import Session

_T0 = 1_700_000_000_000_000_000


def make_step(name: str = "search_web", kind: str = "tool", i: int = 0, session: str = "s1", **kw: Any) -> Step:
    """A step starting ``i`` seconds after a fixed epoch and lasting 0.5 s unless told otherwise."""
    kw.setdefault("start_ns", _T0 + i * 1_000_000_000)
    kw.setdefault("end_ns", kw["start_ns"] + 500_000_000)
    kw.setdefault("agent", "agent-1")
    kw.setdefault("intent", kind)
    return Step(session=session, kind=kind, name=name, **kw)  # type: ignore[arg-type]


class DetectorRun:
    """Feeds steps through the engine restricted to some detectors, like the pipeline does.

    ``profile`` is ``detectors.profile``: ``default``, or ``seed`` for the strict rules. ``hold``: hold a
    stopped session's steps as the pipeline does (``otelloop.detection``); off by default, so that a
    detector's tests see it judge every step, past a stop too.
    """

    profile = "default"

    def __init__(self, *names: str, detectors: dict[str, Any] | None = None, hold: bool = False) -> None:
        cfg = build_config({"detectors": {"profile": self.profile, **(detectors or {})}}, env={})
        self.engine = DetectorEngine(cfg.detectors, only=names, hold=hold)
        self.sessions: dict[str, Session] = {}

    def reconfigure(self, detectors: dict[str, Any]) -> None:
        cfg = build_config({"detectors": {"profile": self.profile, **detectors}}, env={})
        self.engine.reconfigure(cfg.detectors)

    def session(self, sid: str = "s1") -> Session:
        return self.sessions.setdefault(sid, Session(sid, 0.0))

    def step(self, step: Step) -> StepContext:
        session = self.session(step.session)
        session.steps += 1
        return self.engine.observe(session, step)

    def run(self, steps: list[Step]) -> list[StepContext]:
        return [self.step(s) for s in steps]


class SeedRun(DetectorRun):
    """A :class:`DetectorRun` under ``detectors.profile: seed`` (the strict rules)."""

    profile = "seed"
