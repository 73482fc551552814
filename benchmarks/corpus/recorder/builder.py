"""A small vocabulary for writing scenarios: pick tool variants, make calls, add turns."""

from __future__ import annotations

from typing import Any

from .script import OK, Call, Expect, Scenario, Turn
from .workspace import BoundTool, make_tool


class Builder:
    """Collects a scenario's tools and turns.

    ``variant`` picks how each tool kind is exposed (name, parameter names, description), so the same
    story is told with different tool vocabularies across runs.
    """

    def __init__(self, sid: str, cls: str, label: str, variant: int, agent: str = "assistant") -> None:
        self.sid, self.cls, self.label, self.variant = sid, cls, label, variant
        self.agent = agent
        self.tools: dict[str, BoundTool] = {}
        self.kinds: dict[str, BoundTool] = {}
        self.turns: list[Turn] = []
        self.options: dict[str, Any] = {}
        self.agents: dict[str, str] = {}
        self._loop_marked = False

    def tool(self, kind: str) -> BoundTool:
        t = self.kinds.get(kind)
        if t is None:
            t = make_tool(kind, self.variant + len(kind))  # offset per kind: not every run uses index 0
            self.kinds[kind] = t
            self.tools[t.spec.name] = t
        return t

    def call(self, kind: str, expect: Expect = OK, **kw: Any) -> Call:
        """A call of the ``kind`` tool; ``kw`` uses the workspace's parameter names (path, content, old,
        new, query, target, command, job_id, record_id, pattern)."""
        t = self.tool(kind)
        inverse = {v: k for k, v in t.mapping.items()}
        return Call(t.spec.name, {inverse[k]: v for k, v in kw.items()}, expect)

    def turn(self, *calls: Call, text: str = "", loop_start: bool = False, agent: str | None = None) -> None:
        if loop_start:
            assert not self._loop_marked, "one loop start per scenario"
            self._loop_marked = True
        self.turns.append(Turn(agent or self.agent, tuple(calls), text, None, loop_start))

    def handoff(self, to: str, text: str, agent: str | None = None, loop_start: bool = False) -> None:
        if loop_start:
            self._loop_marked = True
        self.turns.append(Turn(agent or self.agent, (), text, to, loop_start))

    def final(self, text: str, agent: str | None = None) -> None:
        self.turns.append(Turn(agent or self.agent, (), text))

    def build(self, description: str, task: str) -> Scenario:
        if self.label == "loop":
            assert self._loop_marked, f"{self.sid}: a loop run must mark its loop start"
        else:
            assert not self._loop_marked, f"{self.sid}: a healthy run has no loop start"
        assert self.turns and self.turns[-1].final, f"{self.sid}: the run must end with a final answer"
        agents = self.agents or {self.agent: "You are a careful software assistant. Use the tools to do the task."}
        return Scenario(self.sid, self.cls, self.label, description, task, list(self.turns),
                        {n: t for n, t in self.tools.items()}, dict(self.options), agents)
