"""The LangGraph guard: a tiny ReAct-shaped StateGraph driven by a fake verdict source."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import extras
import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from otelloop.client import Verdict
from otelloop.langgraph import (
    DEFAULT_NUDGE,
    NOTE_NAME,
    VerdictGuard,
    add_verdict_guard,
    has_pending_tool_calls,
    trace_session_key,
)

extras.require("frameworks")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

pytestmark = pytest.mark.frameworks


class Script:
    """Verdicts handed out in order (then ``continue``), and the session keys they were asked for."""

    def __init__(self, *verdicts: Verdict) -> None:
        self._verdicts: Iterator[Verdict] = iter(verdicts)
        self.keys: list[str | int] = []

    def __call__(self, key: str | int) -> Verdict:
        self.keys.append(key)
        return next(self._verdicts, Verdict())


def agent(state: MessagesState) -> dict[str, Any]:
    """Calls the search tool every turn; it never finishes on its own (a looping agent)."""
    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    call = {"name": "search", "args": {"q": "x"}, "id": f"call-{turn}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def tools(state: MessagesState) -> dict[str, Any]:
    last = state["messages"][-1]
    return {"messages": [ToolMessage(content="no results", tool_call_id=c["id"]) for c in last.tool_calls]}


def build(script: Script, **options: Any) -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    options.setdefault("session_key", lambda state, config: config["configurable"]["thread_id"])
    add_verdict_guard(builder, after="tools", next_node="agent", verdict_source=script, **options)
    return builder.compile()


def invoke(graph: Any) -> list[Any]:
    config = {"configurable": {"thread_id": "conv-1"}, "recursion_limit": 50}
    return graph.invoke({"messages": [HumanMessage(content="find x")]}, config)["messages"]


def assert_valid_order(messages: list[Any]) -> None:
    """Every assistant turn with tool calls is followed by exactly its tool results before anything else."""
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = [c["id"] for c in message.tool_calls]
            following = messages[i + 1:i + 1 + len(ids)]
            assert [getattr(m, "tool_call_id", None) for m in following] == ids


def test_stop_routes_to_end() -> None:
    script = Script(Verdict(), Verdict(), Verdict("stop", "trajectory loop score 4"))
    messages = invoke(build(script))
    assert sum(isinstance(m, AIMessage) for m in messages) == 3  # three agent turns, then END
    assert isinstance(messages[-1], ToolMessage)
    assert script.keys == ["conv-1"] * 3


def test_nudge_is_injected_after_the_tool_results() -> None:
    script = Script(Verdict("nudge", "stutter", "Do not call search again."), Verdict("stop"))
    messages = invoke(build(script))
    notes = [m for m in messages if isinstance(m, HumanMessage) and m.name == NOTE_NAME]
    assert [n.content for n in notes] == ["Do not call search again."]
    i = messages.index(notes[0])
    assert isinstance(messages[i - 1], ToolMessage) and isinstance(messages[i + 1], AIMessage)
    assert_valid_order(messages)


def test_nudge_without_message_uses_the_default() -> None:
    messages = invoke(build(Script(Verdict("nudge"), Verdict("stop"))))
    assert any(isinstance(m, HumanMessage) and m.content == DEFAULT_NUDGE for m in messages)


def test_paused_waits_until_resumed() -> None:
    script = Script(Verdict("paused"), Verdict("paused"), Verdict("stop"))
    messages = invoke(build(script, pause_poll_interval=0.0))
    assert sum(isinstance(m, AIMessage) for m in messages) == 1
    assert len(script.keys) == 3


def test_no_session_key_continues_without_asking() -> None:
    script = Script(Verdict("stop"))
    guard = VerdictGuard(next_node="agent", verdict_source=script, session_key=lambda state, config: None)
    assert guard({"messages": []}, {}).goto == "agent"
    assert script.keys == []


def test_pending_tool_calls_defer_the_nudge() -> None:
    calls = [{"name": name, "args": {}, "id": name, "type": "tool_call"} for name in ("a", "b")]
    pending = [HumanMessage(content="q"), AIMessage(content="", tool_calls=calls),
               ToolMessage(content="r", tool_call_id="a")]
    assert has_pending_tool_calls(pending)
    assert not has_pending_tool_calls([*pending, ToolMessage(content="r", tool_call_id="b")])
    assert not has_pending_tool_calls([HumanMessage(content="q"), AIMessage(content="done")])
    guard = VerdictGuard(next_node="agent", verdict_source=Script(Verdict("nudge", "", "m")),
                         session_key=lambda state, config: "s")
    command = guard({"messages": pending}, {})
    assert command.goto == "agent" and not command.update


def test_default_session_key_is_the_current_trace_id() -> None:
    assert trace_session_key({}, None) is None
    span = NonRecordingSpan(SpanContext(trace_id=0xABC, span_id=1, is_remote=False))
    with trace.use_span(span):
        assert trace_session_key({}, None) == 0xABC


def test_guard_needs_a_verdict_source() -> None:
    with pytest.raises(ValueError, match="base_url"):
        VerdictGuard(next_node="agent")


def test_unreachable_otelloop_lets_the_graph_run() -> None:
    guard = VerdictGuard(next_node="agent", base_url="http://127.0.0.1:9", timeout=0.2,
                         session_key=lambda state, config: "s")
    assert guard({"messages": []}, {}).goto == "agent"
