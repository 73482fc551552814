"""What every driver shares: the capture, running a real tool and logging it, handoff bookkeeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..capture import Capture
from ..script import Brain, Scenario, ToolLog, ToolRecord
from ..workspace import ToolError, Workspace


class ToolFailed(Exception):
    """Raised from a framework tool function when the real tool failed (the framework's error path)."""


def instrumented_capture(service: str, instrumentor: Any = None, set_global: bool = False,
                         finish: Callable[[], None] | None = None) -> tuple[Capture, Callable[[], None]]:
    """What a driver's ``setup`` returns: a :class:`Capture` for ``service`` and the hook to call after the
    run, before the capture is flushed (``finish``; by default nothing to wait for).

    ``instrumentor``: an instrumentor class (OpenInference, OpenTelemetry contrib) that traces the framework
    to the capture's provider; ``set_global``: for frameworks that trace through the global
    ``TracerProvider``.
    """
    cap = Capture(service, set_global=set_global)
    if instrumentor is not None:
        instrumentor().instrument(tracer_provider=cap.provider)
    return cap, finish or (lambda: None)


@dataclass
class RunContext:
    scenario: Scenario
    ws: Workspace
    brain: Brain
    log: ToolLog
    capture: Capture
    #: tool names that are the framework's handoff/delegation tools (tool spans, not workspace tools)
    extra_tools: set[str] = field(default_factory=set)

    def execute(self, name: str, args: dict[str, Any]) -> str:
        """Run the real tool ``name``; log it; return its text or raise :class:`ToolFailed`."""
        turn = self.brain.current_turn
        start = time.time_ns()
        tool = self.scenario.tools[name]
        try:
            text, meta = tool.run(self.ws, dict(args))
            failed = False
        except ToolError as e:
            text, meta, failed = str(e), {}, True
        self.log.add(ToolRecord(name, dict(args), text, failed, meta, turn, start, time.time_ns()))
        if failed:
            raise ToolFailed(text)
        out: str = text
        return out

    def tool_function(self, name: str, failure: type[Exception] = RuntimeError) -> Callable[..., str]:
        """``fn(**kwargs)`` running the real tool ``name`` (:meth:`execute`); a failed tool raises ``failure``
        with the tool's error text, which is how most frameworks learn that a tool failed."""

        def fn(**kwargs: Any) -> str:
            try:
                return self.execute(name, kwargs)
            except ToolFailed as e:
                raise failure(str(e)) from None
        return fn

    def note(self, name: str, args: dict[str, Any], text: str, turn: int | None = None,
             start: int | None = None) -> None:
        """Log a handoff/delegation tool call (it has a tool span but is not a workspace tool)."""
        self.extra_tools.add(name)
        self.log.add(ToolRecord(name, dict(args), text, False, {}, self.brain.current_turn if turn is None else turn,
                                start or time.time_ns(), time.time_ns()))


def handoff_tool_name(agent: str) -> str:
    return f"transfer_to_{agent}"
