"""What every driver shares: running a real tool and logging it, handoff/delegation bookkeeping."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ..capture import Capture
from ..script import Brain, Scenario, ToolLog, ToolRecord
from ..workspace import ToolError, Workspace


class ToolFailed(Exception):
    """Raised from a framework tool function when the real tool failed (the framework's error path)."""


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
        return text

    def note(self, name: str, args: dict[str, Any], text: str, turn: int | None = None,
             start: int | None = None) -> None:
        """Log a handoff/delegation tool call (it has a tool span but is not a workspace tool)."""
        self.extra_tools.add(name)
        self.log.add(ToolRecord(name, dict(args), text, False, {}, self.brain.current_turn if turn is None else turn,
                                start or time.time_ns(), time.time_ns()))


def handoff_tool_name(agent: str) -> str:
    return f"transfer_to_{agent}"
