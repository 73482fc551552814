"""Real LangGraph agents with scripted chat models, traced by OpenInference through the real OTel SDK.

Shared by the end-to-end framework tests (``test_e2e_*``). Nothing here talks to a model provider: the
chat model computes its reply from the conversation with a plain Python function, so every run is
deterministic and offline, while LangGraph, langchain-core, OpenInference and the OTel SDK are the real
libraries an operator runs.

``LangChainInstrumentor`` patches langchain-core globally, so a module instruments once (the
``instrumented`` fixture) with a :class:`SwitchTracerProvider`; each test then points it at its own SDK
``TracerProvider`` (:class:`Tracing`) with its own ``service.name`` and OTLP exporters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from opentelemetry import trace as trace_api
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import SpanKind

#: Steps per request when all spans of a run are exported at the end: far above any scenario here.
BATCH = 4096

# ---------------------------------------------------------------------------------------------------
# Instrumentation


class _SwitchTracer(trace_api.Tracer):
    """Starts spans on the tracer of whatever SDK provider the switch points at (no-op when none).

    OpenInference calls ``type(tracer).start_span(proxy, ...)`` through its ``OITracer`` proxy, so every
    attribute used here is reached through that proxy too; keep to plain attributes and methods.
    """

    def __init__(self, switch: SwitchTracerProvider, name: str, version: str | None) -> None:
        self._switch = switch
        self._scope = (name, version)

    def _target(self) -> trace_api.Tracer:
        provider = self._switch.current
        if provider is None:
            return trace_api.NoOpTracer()
        return provider.get_tracer(*self._scope)

    def start_span(self, name: str, context: Any = None, kind: SpanKind = SpanKind.INTERNAL,
                   attributes: Any = None, links: Any = None, start_time: int | None = None,
                   record_exception: bool = True, set_status_on_exception: bool = True) -> trace_api.Span:
        return self._target().start_span(name, context, kind, attributes, links, start_time, record_exception,
                                         set_status_on_exception)

    def start_as_current_span(self, name: str, context: Any = None, kind: SpanKind = SpanKind.INTERNAL,
                              attributes: Any = None, links: Any = None, start_time: int | None = None,
                              record_exception: bool = True, set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Any:
        return self._target().start_as_current_span(name, context, kind, attributes, links, start_time,
                                                    record_exception, set_status_on_exception, end_on_exit)


class SwitchTracerProvider(trace_api.TracerProvider):
    """The provider given to the instrumentor once; ``current`` is the real SDK provider of the test."""

    def __init__(self) -> None:
        self.current: TracerProvider | None = None

    def get_tracer(self, instrumenting_module_name: str, instrumenting_library_version: str | None = None,
                   schema_url: str | None = None, attributes: Any = None) -> trace_api.Tracer:
        return _SwitchTracer(self, instrumenting_module_name, instrumenting_library_version)


@pytest.fixture(scope="module")
def instrumented() -> Iterator[SwitchTracerProvider]:
    """OpenInference's LangChain instrumentation for one test module, removed at the module's end."""
    from openinference.instrumentation.langchain import LangChainInstrumentor

    switch = SwitchTracerProvider()
    instrumentor = LangChainInstrumentor()
    instrumentor.instrument(tracer_provider=switch)
    try:
        yield switch
    finally:
        instrumentor.uninstrument()


class Tracing:
    """One scenario's SDK ``TracerProvider``: its ``service.name`` and OTLP/gRPC exporters.

    Args:
        switch: the module's instrumented switch, pointed at this provider until :meth:`finish`.
        service: the resource's ``service.name``.
        endpoints: ``host:port`` of each OTLP/gRPC receiver that gets every span.
        live: export each span as it ends (an agent that polls its verdict needs otelloop to have seen
            its steps); otherwise all spans go in one request at :meth:`finish`, in start-time order.
    """

    def __init__(self, switch: SwitchTracerProvider, service: str, endpoints: Sequence[str],
                 live: bool = False) -> None:
        self.provider = TracerProvider(resource=Resource.create({"service.name": service}))
        for endpoint in endpoints:
            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
            if live:
                self.provider.add_span_processor(SimpleSpanProcessor(exporter))
            else:
                self.provider.add_span_processor(BatchSpanProcessor(
                    exporter, max_queue_size=BATCH, max_export_batch_size=BATCH,
                    schedule_delay_millis=60_000))
        self._switch = switch
        switch.current = self.provider

    @property
    def tracer(self) -> trace_api.Tracer:
        return self.provider.get_tracer("otelloop.tests.app")

    def finish(self) -> None:
        """Deliver every span, then detach the provider from the instrumentation."""
        try:
            assert self.provider.force_flush(30_000), "the SDK could not flush its spans"
        finally:
            self._switch.current = None
            self.provider.shutdown()


# ---------------------------------------------------------------------------------------------------
# A scripted chat model and the graphs


Policy = Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A langchain-core chat model whose answer is ``policy(conversation)``; tools are bound by the script.

    Traced by OpenInference like any chat model (an LLM span named after the class).
    """

    policy: Policy

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self.policy(list(messages)))])

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def ai_calls(*calls: dict[str, Any], content: str = "") -> AIMessage:
    return AIMessage(content=content, tool_calls=list(calls))


def agent_node(model: BaseChatModel) -> Callable[[MessagesState], dict[str, Any]]:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    return agent


def route(state: MessagesState) -> str:
    """ReAct routing: to the tools while the model asks for them, else done."""
    return "tools" if state["messages"][-1].tool_calls else END


def react_builder(model: BaseChatModel, tools: Sequence[Any]) -> StateGraph:
    """``agent → tools → …`` with a conditional edge; the caller closes ``tools →`` (edge or guard)."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent_node(model))
    builder.add_node("tools", ToolNode(list(tools)))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    return builder


def react_graph(model: BaseChatModel, tools: Sequence[Any]) -> Any:
    builder = react_builder(model, tools)
    builder.add_edge("tools", "agent")
    return builder.compile()


def ask(graph: Any, question: str, recursion_limit: int = 60) -> list[BaseMessage]:
    """Run the graph on one user question; returns the final message list."""
    out = graph.invoke({"messages": [HumanMessage(question)]}, {"recursion_limit": recursion_limit})
    return out["messages"]


def assert_valid_order(messages: Sequence[BaseMessage]) -> None:
    """Chat APIs' rule: an assistant turn with tool calls is followed by exactly its tool results."""
    for i, message in enumerate(messages):
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = [c["id"] for c in message.tool_calls]
            following = messages[i + 1:i + 1 + len(ids)]
            assert [getattr(m, "tool_call_id", None) for m in following] == ids, messages
            assert all(isinstance(m, ToolMessage) for m in following)


# ---------------------------------------------------------------------------------------------------
# Reading forwarded OpenInference spans


def oi_kind(attrs: dict[str, Any]) -> str | None:
    """The step kind (docs/mapping.md) of an OpenInference span (the only convention these tests emit)."""
    return {"TOOL": "tool", "RETRIEVER": "tool", "LLM": "llm", "CHAIN": "system", "AGENT": "system"}.get(
        attrs.get("openinference.span.kind", ""))


def oi_node(attrs: dict[str, Any], span_name: str) -> str:
    """The LangGraph node of a CHAIN/AGENT span: ``langgraph_node`` inside the ``metadata`` JSON."""
    try:
        return json.loads(attrs.get("metadata") or "{}").get("langgraph_node") or span_name
    except ValueError:
        return span_name


def node_span() -> trace_api.Span:
    """The span of the LangGraph node (or tool) running now, as OpenInference traced it.

    OpenInference never attaches its spans to the OTel context (callbacks may not detach them), so
    ``opentelemetry.trace.get_current_span()`` inside a node is not the node's span; OpenInference's
    own ``get_current_span`` finds it from LangChain's run context.
    """
    from openinference.instrumentation.langchain import get_current_span

    span = get_current_span()
    assert span is not None, "not inside a traced LangGraph node"
    return span
