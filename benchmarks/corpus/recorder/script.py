"""The framework-neutral story of one run: tool calls, what each must return, and the scripted LLM.

A :class:`Scenario` lists the LLM's turns (tool calls, possibly parallel; handoffs; a final answer). Each
:class:`Call` declares what the real tool must return (:class:`Expect`). Drivers run the scenario in a
framework; every real tool execution lands in the :class:`ToolLog`; :func:`check_story` then compares the
log with the script, and the recording fails on any difference.

The scripted LLM (:class:`Brain`) hands out the turns in order, reports token usage derived from the text
it has seen and produced (about 4 characters per token), and tells the driver how long the call should
take: ``FIRST_TOKEN_S`` plus the output tokens at ``TOKENS_PER_S`` (so 30–80 output tokens take about
0.4–0.8 s, as a hosted model's tool-call turn would).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

#: Seconds before the first output token of every scripted LLM call.
FIRST_TOKEN_S = 0.15
#: Output speed of the scripted LLM, tokens per second.
TOKENS_PER_S = 100.0
#: Characters per token when estimating usage from text.
CHARS_PER_TOKEN = 4


class StoryError(AssertionError):
    """The run did not follow its script: the recording is discarded."""


@dataclass(frozen=True)
class Expect:
    """What the real tool must return for one call.

    kind: ``ok`` (no error), ``contains`` (the text contains ``value``), ``exact``, ``empty`` (no hits /
    empty output), ``hits`` (at least ``value`` hits), ``error`` (the tool failed; ``value`` is part of the
    message), ``failing`` (a test run with exactly ``value`` failing tests), ``status`` (a polled status).
    """

    kind: str = "ok"
    value: Any = None

    def problem(self, rec: ToolRecord) -> str | None:
        k, v = self.kind, self.value
        if k == "error":
            if not rec.is_error:
                return f"expected an error containing {v!r}, got {rec.text[:120]!r}"
            return None if v is None or v in rec.text else f"error {rec.text[:160]!r} lacks {v!r}"
        if rec.is_error:
            return f"expected {k} {v!r}, the tool failed: {rec.text[:160]!r}"
        if k == "ok":
            return None
        if k == "contains":
            return None if v in rec.text else f"result {rec.text[:160]!r} lacks {v!r}"
        if k == "exact":
            return None if rec.text == v else f"result {rec.text[:160]!r} is not {v[:160]!r}"
        if k == "empty":
            return None if rec.meta.get("hits", -1) == 0 else f"expected no hits, got {rec.text[:160]!r}"
        if k == "hits":
            return None if rec.meta.get("hits", 0) >= v else f"expected >= {v} hits, got {rec.text[:160]!r}"
        if k == "failing":
            got = rec.meta.get("failed")
            return None if got == v else f"expected {v} failing tests, got {got} ({rec.text[-200:]!r})"
        if k == "status":
            got = rec.meta.get("status")
            return None if got == v else f"expected status {v!r}, got {got!r}"
        return f"unknown expectation {k!r}"


OK = Expect()


def contains(text: str) -> Expect:
    return Expect("contains", text)


def failing(n: int) -> Expect:
    return Expect("failing", n)


def status(s: str) -> Expect:
    return Expect("status", s)


def error(text: str | None = None) -> Expect:
    return Expect("error", text)


EMPTY = Expect("empty")


def hits(n: int = 1) -> Expect:
    return Expect("hits", n)


@dataclass(frozen=True)
class Call:
    """One tool call the scripted LLM makes: the tool's exposed name, its arguments, the expected result."""

    tool: str
    args: dict[str, Any]
    expect: Expect = OK

    def key(self) -> tuple[str, str]:
        return self.tool, json.dumps(self.args, sort_keys=True)


@dataclass(frozen=True)
class Turn:
    """One LLM response: tool calls (several = parallel), a handoff, or a final answer (no calls).

    ``text`` is the assistant's prose (a short thought before calls, the answer of a final turn, the
    message passed on with a handoff). ``loop_start`` marks the turn whose first call starts the loop.
    """

    agent: str
    calls: tuple[Call, ...] = ()
    text: str = ""
    handoff: str | None = None
    loop_start: bool = False

    @property
    def final(self) -> bool:
        return not self.calls and self.handoff is None


@dataclass
class Scenario:
    """A run's story: workspace, tools (kind → exposed name/params/description), agents and turns."""

    id: str
    cls: str
    label: str  # "loop" or "healthy"
    description: str
    task: str
    turns: list[Turn]
    tools: dict[str, Any]  # exposed name -> recorder.workspace.ToolSpec
    setup: dict[str, Any] = field(default_factory=dict)  # workspace options
    agents: dict[str, str] = field(default_factory=dict)  # agent name -> instructions
    dialect: str = ""

    @property
    def multi_agent(self) -> bool:
        return len({t.agent for t in self.turns}) > 1

    @property
    def first_agent(self) -> str:
        return self.turns[0].agent

    def delegated(self, supervisor: str, tool_prefix: str = "ask_") -> Scenario:
        """The same story for frameworks where agents are called as tools: a ``supervisor`` calls each
        segment's agent (``<tool_prefix><agent>``, argument ``task``), the segment's handoff turn becomes
        that agent's answer, and the supervisor answers at the end."""
        turns: list[Turn] = []
        message = self.task
        i = 0
        while i < len(self.turns):
            agent = self.turns[i].agent
            j = i
            while j < len(self.turns) and self.turns[j].agent == agent and self.turns[j].handoff is None \
                    and not self.turns[j].final:
                j += 1
            segment = list(self.turns[i:j])
            end = self.turns[j] if j < len(self.turns) else None
            loop = any(t.loop_start for t in segment) or (end is not None and end.loop_start)
            turns.append(Turn(supervisor, (Call(f"{tool_prefix}{agent}", {"task": message}, OK),),
                              text=f"Asking {agent}.", loop_start=loop))
            turns.extend(replace(t, loop_start=False) for t in segment)
            closing = end.text if end is not None else "Done."
            turns.append(Turn(agent, (), text=closing))
            message = closing
            i = j + 1
            if end is not None and end.final:
                break
        turns.append(Turn(supervisor, (), text=self.turns[-1].text))
        return replace(self, turns=turns, agents={supervisor: "Coordinate the specialists; delegate the "
                                                              "work and report the outcome.", **self.agents})


@dataclass
class ToolRecord:
    """One real tool execution."""

    tool: str
    args: dict[str, Any]
    text: str
    is_error: bool
    meta: dict[str, Any]
    turn: int
    start_ns: int
    end_ns: int


class ToolLog:
    """Every tool execution of a run, in completion order (thread-safe: frameworks run calls in parallel)."""

    def __init__(self) -> None:
        self.records: list[ToolRecord] = []
        self._lock = threading.Lock()

    def add(self, rec: ToolRecord) -> None:
        with self._lock:
            self.records.append(rec)

    def chars(self) -> int:
        with self._lock:
            return sum(len(r.text) for r in self.records)


@dataclass(frozen=True)
class Plan:
    """The scripted LLM's answer for one call: the turn, its usage and how long the call takes."""

    index: int
    turn: Turn
    input_tokens: int
    output_tokens: int
    delay_s: float
    call_ids: tuple[str, ...]


class Brain:
    """The scripted LLM shared by every agent of a run: hands out the turns in order."""

    def __init__(self, scenario: Scenario, log: ToolLog, base_tokens: int = 0) -> None:
        self.scenario = scenario
        self.log = log
        self.index = -1
        self.taken_ns: list[int] = []
        self.base_tokens = base_tokens or (180 + len(scenario.task) // CHARS_PER_TOKEN
                                           + 45 * len(scenario.tools))
        self._produced_chars = 0
        self._lock = threading.Lock()

    @property
    def current_turn(self) -> int:
        return self.index

    def take(self, agent: str | None = None) -> Plan:
        """The next turn; ``agent`` (when the framework says who is asking) must be the turn's agent."""
        with self._lock:
            if self.index + 1 >= len(self.scenario.turns):
                raise StoryError(f"the LLM was called {self.index + 2} times; the script has "
                                 f"{len(self.scenario.turns)} turns")
            self.index += 1
            turn = self.scenario.turns[self.index]
            if agent is not None and agent != turn.agent:
                raise StoryError(f"turn {self.index}: the script has {turn.agent!r} speak, the framework "
                                 f"asked {agent!r}")
            self.taken_ns.append(time.time_ns())
            out_chars = len(turn.text) + sum(len(c.tool) + len(json.dumps(c.args)) + 12 for c in turn.calls)
            if turn.handoff:
                out_chars += 30
            output_tokens = max(12, out_chars // CHARS_PER_TOKEN + 6)
            input_tokens = self.base_tokens + (self._produced_chars + self.log.chars()) // CHARS_PER_TOKEN
            self._produced_chars += out_chars
            delay = FIRST_TOKEN_S + output_tokens / TOKENS_PER_S
            ids = tuple(f"call_{self.index:03d}_{i}" for i in range(len(turn.calls)))
            return Plan(self.index, turn, input_tokens, output_tokens, delay, ids)

    def finished(self) -> bool:
        return self.index == len(self.scenario.turns) - 1


def check_story(scenario: Scenario, brain: Brain, log: ToolLog, extra_tools: frozenset[str] = frozenset()
                ) -> list[str]:
    """Differences between what the script says and what really happened (empty: the story holds).

    ``extra_tools``: tool names that are not workspace tools (delegation/handoff tools the framework runs),
    checked for being called as scripted but not for their results.
    """
    problems: list[str] = []
    if not brain.finished():
        problems.append(f"the LLM took {brain.index + 1} of {len(scenario.turns)} turns")
    by_turn: dict[int, list[ToolRecord]] = {}
    for rec in log.records:
        by_turn.setdefault(rec.turn, []).append(rec)
    for i, turn in enumerate(scenario.turns):
        recs = by_turn.pop(i, [])
        want = Counter(c.key() for c in turn.calls if c.tool not in extra_tools)
        got = Counter((r.tool, json.dumps(r.args, sort_keys=True)) for r in recs if r.tool not in extra_tools)
        if want != got:
            problems.append(f"turn {i} ({turn.agent}): scripted calls {sorted(want)} but the tools ran "
                            f"{sorted(got)}")
            continue
        pending = list(recs)
        for call in turn.calls:
            if call.tool in extra_tools:
                continue
            rec = next(r for r in pending if (r.tool, json.dumps(r.args, sort_keys=True)) == call.key())
            pending.remove(rec)
            problem = call.expect.problem(rec)
            if problem:
                problems.append(f"turn {i} ({turn.agent}) {call.tool}({json.dumps(call.args)[:80]}): {problem}")
    for i, recs in by_turn.items():
        problems.append(f"tools ran outside any scripted turn ({i}): {[r.tool for r in recs]}")
    return problems
