"""Sessions as users mean them: by default a conversation id joins traces, and a trace joins the
conversation it was seen with (``state.group_by: auto``, docs/mapping.md#sessions)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from spans import request, span, tool_span

from otelloop.admin import AdminAPI
from otelloop.client import acheck_verdict
from otelloop.config import build_config
from otelloop.joins import TraceJoins
from otelloop.pipeline import Pipeline, run

CONV = "conv-7"


def trace_hex(trace: int) -> str:
    return format(trace, "032x")


def agent_span(trace: int, i: int, conversation: str | None = CONV) -> Any:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "helper"}
    if conversation is not None:
        attrs["gen_ai.conversation.id"] = conversation
    return span("invoke_agent helper", attrs, trace=trace, i=i)


def feed(p: Pipeline, *requests: bytes) -> None:
    for data in requests:
        p.process(p.decode(data))


def test_spans_of_a_trace_without_the_id_join_the_conversation_of_their_request() -> None:
    p = Pipeline()
    feed(p, request(tool_span(trace=1, i=1), tool_span("read_file", trace=1, i=2), agent_span(1, i=0)))
    assert [s.id for s in p.store] == [CONV] and p.store.get(CONV).steps == 3


def test_a_later_request_of_a_joined_trace_joins_too() -> None:
    p = Pipeline()
    feed(p, request(agent_span(2, i=0)), request(tool_span(trace=2, i=1)), request(tool_span(trace=2, i=2)))
    assert [s.id for s in p.store] == [CONV] and p.store.get(CONV).steps == 3


def test_steps_before_the_id_become_the_conversations_when_it_is_new() -> None:
    p = Pipeline()
    feed(p, request(tool_span(trace=3, i=1)), request(tool_span(trace=3, i=2)))
    assert [s.id for s in p.store] == [trace_hex(3)]
    feed(p, request(agent_span(3, i=0)))
    assert [s.id for s in p.store] == [CONV]
    session = p.store.get(CONV)
    assert session.steps == 3 and session.id == CONV and p.session_for(trace_hex(3)) is session


def test_a_later_traces_early_steps_stay_apart_when_the_conversation_exists() -> None:
    """The documented limit: two sessions' detector state is never merged."""
    p = Pipeline()
    feed(p, request(agent_span(4, i=0)), request(tool_span(trace=5, i=1)), request(agent_span(5, i=2)),
         request(tool_span(trace=5, i=3)))
    assert {s.id: s.steps for s in p.store} == {CONV: 3, trace_hex(5): 1}


def test_one_trace_per_call_joined_by_conversation_id_is_one_looping_session() -> None:
    calls = [request(tool_span(trace=100 + i, i=i, attrs={"gen_ai.conversation.id": CONV})) for i in range(10)]
    joined, by_trace = Pipeline(), Pipeline(build_config({"state": {"group_by": "trace"}}, env={}))
    feed(joined, *calls)
    feed(by_trace, *calls)
    assert joined.store.get(CONV).steps == 10 and joined.store.get(CONV).verdict == "stop"
    assert len(by_trace.store) == 10 and all(s.verdict == "continue" for s in by_trace.store)


def test_group_by_session_does_not_join_by_trace() -> None:
    p = Pipeline(build_config({"state": {"group_by": "session"}}, env={}))
    feed(p, request(agent_span(6, i=0), tool_span(trace=6, i=1)))
    assert {s.id: s.steps for s in p.store} == {CONV: 1, trace_hex(6): 1}
    assert p.joins is None


def test_a_request_read_in_chunks_names_the_renamed_trace_among_its_sessions() -> None:
    p = Pipeline()
    feed(p, request(tool_span(trace=7, i=1)))
    decoded = p.decode(request(agent_span(7, i=0, conversation="c-9")))
    assert trace_hex(7) in decoded.sessions() and "c-9" in decoded.sessions()
    chunked = run(p.decode_steps(request(*[tool_span(trace=8, i=i) for i in range(40)], agent_span(8, i=50)),
                                 chunk_bytes=1024))
    assert chunked.chunks is not None and set(chunked.sessions()) >= {CONV}


def test_the_join_table_is_bounded_and_forgets_the_least_recently_seen() -> None:
    joins = TraceJoins(max_traces=3)
    p = Pipeline()
    p.joins = joins
    for t in range(10, 15):
        p.decode(request(agent_span(t, i=0, conversation=f"c{t}")))
    assert len(joins) == 3 and joins.get(trace_hex(10)) is None and joins.get(trace_hex(14)) == "c14"
    assert joins.nbytes > 0
    joins.clear()
    assert len(joins) == 0 and joins.nbytes == 0


class _Requests(SpanExporter):
    """Encodes each batch the SDK exports as the OTLP request an exporter would send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.sent.append(encode_spans(list(spans)).SerializeToString())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def test_real_sdk_spans_one_trace_per_turn_id_on_the_agent_span_only() -> None:
    """An OTel SDK agent: each turn is a trace whose root ``invoke_agent`` span carries the conversation
    id and whose tool span does not; the batch processor exports a turn as one request."""
    exporter = _Requests()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    for _ in range(8):
        with tracer.start_as_current_span("invoke_agent helper") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            root.set_attribute("gen_ai.conversation.id", "sdk-conversation")
            with tracer.start_as_current_span("execute_tool search_web") as tool:
                tool.set_attribute("gen_ai.operation.name", "execute_tool")
                tool.set_attribute("gen_ai.tool.name", "search_web")
                tool.set_attribute("gen_ai.tool.call.arguments", json.dumps({"query": "weather"}))
                tool.set_attribute("gen_ai.tool.call.result", "no results")
        provider.force_flush()
    provider.shutdown()
    p = Pipeline()
    feed(p, *exporter.sent)
    assert len(exporter.sent) == 8
    assert [s.id for s in p.store] == ["sdk-conversation"]
    session = p.store.get("sdk-conversation")
    assert session.steps == 16 and session.verdict == "stop"


async def test_check_verdict_by_trace_id_finds_the_conversation() -> None:
    p = Pipeline()
    calls = [request(tool_span(trace=200, i=0, attrs={"gen_ai.conversation.id": CONV}))]
    calls += [request(tool_span(trace=200 + i, i=i, attrs={"gen_ai.conversation.id": CONV})) for i in range(1, 8)]
    feed(p, *calls)
    assert p.store.get(CONV).verdict == "stop"
    runner = web.AppRunner(AdminAPI(p, lambda: (True, "")).app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        assert (await acheck_verdict(url, trace_id=207)).verdict == "stop"
        assert (await acheck_verdict(url, session_id=CONV)).verdict == "stop"
        assert (await acheck_verdict(url, trace_id=999)).reason.endswith("unknown session")
    finally:
        await runner.cleanup()
