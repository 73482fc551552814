"""End to end: a LangGraph agent obeying otelloop through ``add_verdict_guard``.

The ReAct graph is ``agent → tools → otelloop_guard → agent``; the guard asks the real ``otelloop serve``
(admin API on 127.0.0.1) for the verdict of the session, which is the trace id of the application span
the graph runs in (otelloop's default ``group_by: trace``, the guard's default session key). Spans are
exported as they end, so otelloop has seen a round's tool call when the guard asks.

The scripted model varies its wording each turn and the search tool numbers its answers, as real ones
do, so that the only loop to find is the repeated call itself: under the seed profile ``trajectory``
nudges at the 3rd identical ``search_web`` call (score 2.0) and stops at the 4th (5.0). The looping query
finds nothing; other queries find something new each time, which the default profile counts as progress.

The guard's own spans opt out of step mapping (``otelloop.step.kind: ignore`` in its node metadata), so its
constant ``{"goto": "agent"}`` answer is never mistaken for a stalled agent turn.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import extras
import pytest
from served import BackgroundLoop, Served, wait_for
from sinks import GrpcSink
from spans import attrs_of, events_of, parse

from otelloop.langgraph import NOTE_NAME, add_verdict_guard

extras.require("frameworks")

from agent_graphs import (  # noqa: E402, F401 (instrumented is a fixture)
    ScriptedChatModel,
    SwitchTracerProvider,
    Tracing,
    ai_calls,
    ask,
    assert_valid_order,
    instrumented,
    react_builder,
    tool_call,
)
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

pytestmark = pytest.mark.frameworks

QUERY = "weather in Paris"
ANSWER = "It is 21 °C and sunny in Paris."
#: Calls the looping model would make before giving up on its own.
SCRIPT_LENGTH = 10


def is_nudge(message: BaseMessage) -> bool:
    return isinstance(message, HumanMessage) and message.name == NOTE_NAME


@dataclass
class Agent:
    """A scripted model; ``plan(agent)`` gives this turn's search, or None to answer.

    ``probe`` is called the first time the model reads a nudge (the test reads the session there).
    """

    plan: Callable[[Agent], str | None]
    probe: Callable[[], Any] = lambda: None
    inputs: list[list[BaseMessage]] = field(default_factory=list)
    nudged_at: int | None = None
    at_nudge: Any = None

    @property
    def turn(self) -> int:
        return len(self.inputs)

    def __call__(self, messages: list[BaseMessage]) -> AIMessage:
        self.inputs.append(messages)
        if self.nudged_at is None and any(is_nudge(m) for m in messages):
            self.nudged_at = self.turn
            self.at_nudge = self.probe()
        query = self.plan(self)
        if query is None:
            return AIMessage(ANSWER)
        return ai_calls(tool_call("search_web", {"query": query}, f"call_{self.turn}"),
                        content=f"Searching the web (attempt {self.turn}).")


def looping(agent: Agent) -> str | None:
    """Ignores any nudge: the same search until its script runs out."""
    return QUERY if agent.turn <= SCRIPT_LENGTH else None


#: Searches of an agent that took the hint: nothing like the one it repeated.
NEW_COURSE = ["Paris forecast today site:meteofrance.com", "current temperature France capital celsius"]
#: Searches of an agent that never loops.
VARIED = ["weather in Paris", "Paris forecast today site:meteofrance.com",
          "current temperature France capital", "Ile-de-France rain radar", "Paris humidity wind speed"]


def changing_course(agent: Agent) -> str | None:
    """The same search until nudged, then the new course, then the answer."""
    if agent.nudged_at is None:
        return QUERY
    k = agent.turn - agent.nudged_at
    return NEW_COURSE[k] if k < len(NEW_COURSE) else None


def varied(agent: Agent) -> str | None:
    """A different search every turn, then the answer: nothing for otelloop to stop."""
    return VARIED[agent.turn - 1] if agent.turn <= len(VARIED) else None


@dataclass
class Outcome:
    """The graph's final messages and what otelloop knew at the end."""

    messages: list[BaseMessage]
    spans: list[Any]
    verdict: dict[str, Any]
    session: dict[str, Any]

    def searches(self) -> list[Any]:
        return [s for s in self.spans if s.name == "search_web"]

    def tool_results(self) -> int:
        return sum(isinstance(m, ToolMessage) for m in self.messages)


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


@pytest.fixture
def guarded(instrumented: SwitchTracerProvider,  # noqa: F811
            bg: BackgroundLoop, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``guarded(agent, service)``: runs the guarded graph against a fresh otelloop; returns an Outcome.

    otelloop runs under the seed profile (nudge at the 3rd identical call, stop at the 4th) unless the
    test is parametrised indirectly with another profile."""
    sink = bg.run(GrpcSink().start())
    profile = getattr(request, "param", "seed")
    served = Served(tmp_path, {"exporter": {"endpoint": f"grpc://127.0.0.1:{sink.port}"},
                               "detectors": {"profile": profile}})

    def run(agent: Agent, service: str) -> Outcome:
        numbers = iter(range(1, 100))

        @tool
        def search_web(query: str) -> str:
            """Search the web."""
            if query == QUERY:
                return f"No results for {query!r} (search #{next(numbers)})."
            return f"Top result for {query!r}: Paris, {len(query) % 7 + 18} °C, sunny, light wind."

        builder = react_builder(ScriptedChatModel(policy=agent), [search_web])
        add_verdict_guard(builder, after="tools", next_node="agent", base_url=f"http://{served.admin}",
                          timeout=2)
        tracing = Tracing(instrumented, service, [served.grpc], live=True)
        try:
            with tracing.tracer.start_as_current_span("weather request") as root:
                session = format(root.get_span_context().trace_id, "032x")
                agent.probe = lambda: _get(served, f"/v1/sessions/{session}")
                messages = ask(builder.compile(), "What's the weather in Paris?")
        finally:
            tracing.finish()
        wait_for(lambda: any(s.name == "weather request" for d in list(sink.delivered) for s in parse(d)),
                 what="the application span forwarded")
        spans = [s for d in sink.delivered for s in parse(d)]
        return Outcome(messages, spans, _get(served, f"/v1/sessions/{session}/verdict"),
                       _get(served, f"/v1/sessions/{session}"))

    try:
        yield run
    finally:
        served.stop()
        bg.run(sink.stop())


def _get(served: Served, path: str) -> dict[str, Any]:
    status, body = served.get(path)
    assert status == 200, body
    return json.loads(body)


def nudge_message_at(outcome: Outcome, n: int) -> str:
    """The ``otelloop.nudge_message`` of the intervention on the n-th ``search_web`` span."""
    span = outcome.searches()[n - 1]
    [(action, message)] = [(a["otelloop.action"], a["otelloop.nudge_message"])
                           for name, a in events_of(span) if name == "otelloop.intervention"]
    assert action == "nudge"
    return message


# ---------------------------------------------------------------------------------------------------


def test_looping_agent_is_nudged_then_stopped(guarded: Any) -> None:
    agent = Agent(looping)
    out = guarded(agent, "guarded-looping-agent")
    # Human, 3 × (AI call, tool result), the nudge, the 4th call and its result; then END on stop
    assert [type(m).__name__ for m in out.messages] == (
        ["HumanMessage"] + ["AIMessage", "ToolMessage"] * 3 + ["HumanMessage", "AIMessage", "ToolMessage"])
    nudge = out.messages[7]
    assert is_nudge(nudge) and nudge.content == nudge_message_at(out, 3)
    assert "search_web" in nudge.content
    assert_valid_order(out.messages)
    assert agent.turn == 4 < SCRIPT_LENGTH  # ended long before the model would have given up
    assert agent.nudged_at == 4  # the model did read the nudge before its 4th call
    assert out.verdict["verdict"] == "stop"
    assert out.verdict["reason"].startswith("trajectory loop score 5")
    actions = [a["otelloop.action"] for s in out.searches()
               for name, a in events_of(s) if name == "otelloop.intervention"]
    assert actions == ["nudge", "stop"]


def test_agent_that_changes_course_runs_to_its_end(guarded: Any) -> None:
    agent = Agent(changing_course)
    out = guarded(agent, "guarded-recovering-agent")
    assert out.messages[-1].content == ANSWER
    assert [is_nudge(m) for m in out.messages].count(True) == 1
    assert is_nudge(out.messages[7])
    assert_valid_order(out.messages)
    assert out.tool_results() == 3 + len(NEW_COURSE)
    # loop score: 2.0 when the nudge was read (stutter at the 3rd call), halved by each new search
    assert agent.at_nudge["loop_score"] == 2.0
    assert out.session["loop_score"] == 0.5 < agent.at_nudge["loop_score"]
    assert [attrs_of(s)["otelloop.loop_score"] for s in out.searches()] == [0.0, 0.0, 2.0, 1.0, 0.5]
    assert out.verdict["verdict"] == "continue"


def test_agent_that_never_loops_is_never_stopped(guarded: Any) -> None:
    agent = Agent(varied)
    out = guarded(agent, "guarded-healthy-agent")
    assert out.verdict["verdict"] == "continue", out.verdict
    assert out.messages[-1].content == ANSWER
    assert out.tool_results() == len(VARIED)
    assert out.verdict["verdict"] == "continue"


@pytest.mark.parametrize("guarded", ["default"], indirect=True)
def test_default_profile_stops_the_looping_agent_at_its_fourth_empty_search(guarded: Any) -> None:
    """The default profile sees four identical searches that found nothing and, with no progress in
    between, stops the agent there: the guard routes to END before a fifth call."""
    agent = Agent(looping)
    out = guarded(agent, "guarded-looping-agent-default")
    assert agent.turn == 4
    assert out.tool_results() == 4
    assert out.verdict["verdict"] == "stop"
    [event] = [a for s in out.searches() for name, a in events_of(s) if name == "otelloop.intervention"]
    assert event["otelloop.action"] == "stop" and "stutter" in event["otelloop.loop_types"]
    assert event["otelloop.steps_without_progress"] == 4
