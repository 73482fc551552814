"""Span → step mapping for every convention docs/mapping.md lists, wrong types counted and ignored."""

from __future__ import annotations

import json
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from spans import kvs, request, span, tool_span

from otelloop.config import build_config
from otelloop.mapping.canonical import error_signature, normalise_error
from otelloop.model import Step
from otelloop.pipeline import Pipeline, map_request


def one(attrs: dict[str, Any], name: str = "span", config: dict | None = None, **kw: Any) -> Step | None:
    steps = map_request(request(span(name, attrs, **kw), resource=kw.pop("resource", None)),
                        build_config(config or {}, env={}))
    return steps[0] if steps else None


@pytest.mark.parametrize("attrs, kind", [
    ({"otelloop.step.kind": "tool"}, "tool"),
    ({"otelloop.step.kind": "ignore", "gen_ai.operation.name": "chat"}, None),
    ({"gen_ai.operation.name": "execute_tool"}, "tool"),
    ({"gen_ai.operation.name": "retrieval"}, "tool"),
    ({"gen_ai.operation.name": "search_memory"}, "tool"),
    ({"gen_ai.operation.name": "chat"}, "llm"),
    ({"gen_ai.operation.name": "text_completion"}, "llm"),
    ({"gen_ai.operation.name": "generate_content"}, "llm"),
    ({"gen_ai.operation.name": "embeddings"}, "llm"),
    ({"gen_ai.operation.name": "invoke_agent"}, "system"),
    ({"gen_ai.operation.name": "create_agent"}, "system"),
    ({"gen_ai.operation.name": "invoke_workflow"}, "system"),
    ({"gen_ai.operation.name": "plan"}, "system"),
    ({"gen_ai.operation.name": "chain"}, "system"),
    ({"gen_ai.operation.name": "execute_task"}, "system"),
    ({"openinference.span.kind": "TOOL"}, "tool"),
    ({"openinference.span.kind": "RETRIEVER"}, "tool"),
    ({"openinference.span.kind": "RERANKER"}, "tool"),
    ({"openinference.span.kind": "LLM"}, "llm"),
    ({"openinference.span.kind": "EMBEDDING"}, "llm"),
    ({"openinference.span.kind": "AGENT"}, "system"),
    ({"openinference.span.kind": "CHAIN"}, "system"),
    ({"openinference.span.kind": "GUARDRAIL"}, "system"),
    ({"openinference.span.kind": "EVALUATOR"}, "system"),
    ({"traceloop.span.kind": "tool"}, "tool"),
    ({"traceloop.span.kind": "workflow"}, "system"),
    ({"traceloop.span.kind": "task"}, "system"),
    ({"traceloop.span.kind": "agent"}, "system"),
    ({"llm.request.type": "chat"}, "llm"),
    ({"langsmith.span.kind": "tool"}, "tool"),
    ({"langsmith.span.kind": "retriever"}, "tool"),
    ({"langsmith.span.kind": "llm"}, "llm"),
    ({"langsmith.span.kind": "embedding"}, "llm"),
    ({"langsmith.span.kind": "chain"}, "system"),
    ({"langfuse.observation.type": "tool"}, "tool"),
    ({"langfuse.observation.type": "generation"}, "llm"),
    ({"langfuse.observation.type": "agent"}, "system"),
    ({"langfuse.observation.type": "chain"}, "system"),
    ({"gen_ai.tool.name": "x"}, "tool"),
    ({"gen_ai.tool.call.id": "call_1"}, "tool"),
    ({"gen_ai.request.model": "gpt-4o"}, "llm"),
    ({"llm.model_name": "gpt-4o"}, "llm"),
    ({"logfire.span_type": "pending_span", "gen_ai.operation.name": "chat"}, None),
    ({"http.method": "GET"}, None),
    ({}, None),
], ids=lambda v: json.dumps(v, sort_keys=True) if isinstance(v, dict) else str(v))
def test_kind(attrs: dict, kind: str | None) -> None:
    step = one(attrs)
    assert (step.kind if step else None) == kind


@pytest.mark.parametrize("attrs, span_name, expected", [
    ({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "a", "tool.name": "b"}, "x", "a"),
    ({"openinference.span.kind": "TOOL", "tool.name": "b"}, "x", "b"),
    ({"traceloop.span.kind": "tool", "traceloop.entity.name": "c"}, "c.tool", "c"),
    ({"gen_ai.operation.name": "execute_tool"}, "execute_tool search_web", "search_web"),
    ({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}, "chat m", "chat m"),
    ({"gen_ai.operation.name": "invoke_agent"}, "invoke_agent planner", "invoke_agent planner"),
], ids=["gen_ai", "openinference", "traceloop", "span-name", "llm", "system"])
def test_name(attrs: dict, span_name: str, expected: str) -> None:
    assert one(attrs, span_name).name == expected


def test_session_by_trace_is_32_hex_digits() -> None:
    step = one({"gen_ai.tool.name": "t", "session.id": "s-1"}, trace=0xABC, config={"state": {"group_by": "trace"}})
    assert step.session == format(0xABC, "032x")


def test_default_session_is_the_conversation_id_else_the_trace() -> None:
    assert one({"gen_ai.tool.name": "t", "gen_ai.conversation.id": "c-1"}, trace=0xABC).session == "c-1"
    assert one({"gen_ai.tool.name": "t"}, trace=0xABC).session == format(0xABC, "032x")


@pytest.mark.parametrize("attrs, resource, expected", [
    ({"gen_ai.conversation.id": "a", "session.id": "b"}, {}, "a"),
    ({"session.id": "b", "langfuse.session.id": "c"}, {}, "b"),
    ({"langfuse.session.id": "c"}, {}, "c"),
    ({"traceloop.association.properties.session_id": "d"}, {}, "d"),
    ({"langsmith.trace.session_id": "e"}, {}, "e"),
    ({}, {"session.id": "from-resource"}, "from-resource"),
    ({}, {}, format(7, "032x")),
], ids=["conversation", "session.id", "langfuse", "traceloop", "langsmith", "resource", "fallback-trace"])
@pytest.mark.parametrize("group_by", ["session", "auto"])
def test_session_by_session_attribute(attrs: dict, resource: dict, expected: str, group_by: str) -> None:
    s = span("t", {"gen_ai.tool.name": "t", **attrs}, trace=7)
    steps = map_request(request(s, resource=resource), build_config({"state": {"group_by": group_by}}, env={}))
    assert steps[0].session == expected


@pytest.mark.parametrize("attrs, resource, expected", [
    ({"gen_ai.agent.id": "id1", "gen_ai.agent.name": "n"}, {}, "id1"),
    ({"gen_ai.agent.name": "n", "agent.name": "m"}, {}, "n"),
    ({"agent.name": "m"}, {}, "m"),
    ({}, {"gen_ai.agent.name": "res-agent"}, "res-agent"),
    ({}, {}, "agent-svc"),
], ids=["agent.id", "agent.name", "openinference", "resource", "service.name"])
def test_agent(attrs: dict, resource: dict, expected: str) -> None:
    s = span("t", {"gen_ai.tool.name": "t", **attrs})
    assert map_request(request(s, resource=resource))[0].agent == expected


@pytest.mark.parametrize("attrs, expected", [
    ({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"}, "planner"),
    ({"openinference.span.kind": "AGENT", "graph.node.id": "coder"}, "coder"),
    ({"openinference.span.kind": "CHAIN", "metadata": json.dumps({"langgraph_node": "tools", "x": 1})}, "tools"),
    ({"traceloop.span.kind": "task", "traceloop.entity.name": "review"}, "review"),
    ({"openinference.span.kind": "CHAIN"}, "span"),
], ids=["gen_ai.agent.name", "graph.node.id", "langgraph-metadata", "traceloop", "span-name"])
def test_node_of_system_steps(attrs: dict, expected: str) -> None:
    assert one(attrs).node == expected


def test_args_hash_is_canonical_across_emitters() -> None:
    a = tool_span(args='{"query": "weather", "page": 1}')
    b = tool_span(args='{ "page": 1,\n "query": "weather" }')
    c = tool_span(args='{"query": "weather", "page": 2}')
    d = span("t", {"openinference.span.kind": "TOOL", "tool.name": "search_web",
                   "input.value": '{"page":1,"query":"weather"}'})
    steps = map_request(request(a, b, c, d))
    assert steps[0].args_hash == steps[1].args_hash == steps[3].args_hash != steps[2].args_hash
    assert steps[0].args_text == '{"page":1,"query":"weather"}'


def test_args_keep_identifier_keys_but_outputs_drop_per_call_ids() -> None:
    a = tool_span(args='{"id": 1}', result=json.dumps(
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
         "kwargs": {"content": "no results", "tool_call_id": "call_1", "id": "m1", "status": "success"}}))
    b = tool_span(args='{"id": 2}', result=json.dumps(
        {"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "ToolMessage"],
         "kwargs": {"content": "no results", "tool_call_id": "call_2", "id": "m2", "status": "success"}}))
    c = tool_span(args='{"id": 2}', result=json.dumps(
        {"kwargs": {"content": "3 results", "tool_call_id": "call_3", "status": "success"}}))
    s1, s2, s3 = map_request(request(a, b, c))
    assert s1.args_hash != s2.args_hash
    assert s1.output_hash == s2.output_hash != s3.output_hash


@pytest.mark.parametrize("result, status, expected", [
    ("ok", None, "success"),
    (None, None, "empty"),
    ("", None, "empty"),
    ("null", None, "empty"),
    ("[]", None, "empty"),
    ("{}", None, "empty"),
    ("ok", "boom", "error"),
], ids=["success", "absent", "empty-string", "null", "empty-list", "empty-object", "status-error"])
def test_outcome(result: str | None, status: str | None, expected: str) -> None:
    steps = map_request(request(tool_span(result=result, error=status)))
    assert steps[0].outcome == expected


def test_error_type_makes_an_error_and_signatures_ignore_volatile_parts() -> None:
    def failing(msg: str) -> Span:
        ev = Span.Event(name="exception", attributes=kvs({"exception.type": "FileNotFoundError",
                                                           "exception.message": msg}))
        return tool_span(error="failed", events=[ev], attrs={"error.type": "FileNotFoundError"})
    a, b, c = map_request(request(
        failing("No such file: /tmp/pytest-17/run_3f9a2b/out.txt at line 42 (id 0xdeadbeef)"),
        failing("No such file: /tmp/pytest-18/run_77aa00/out.txt at line 43 (id 0xfeedface)"),
        failing("Permission denied: /etc/shadow")))
    assert a.outcome == "error" and a.error_signature == b.error_signature != c.error_signature
    assert normalise_error("took 12.5s for 3 items, run 5b8efff7-9803-8103-d269-b633813fc60c") == \
        "took <n>s for <n> items, run <uuid>"
    assert error_signature("x 1") == error_signature("x 2")


def test_tokens_cost_and_price_table() -> None:
    cfg = build_config({"pricing": {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10}}}, env={})
    steps = map_request(request(
        span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                             "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 100}),
        span("llm", {"openinference.span.kind": "LLM", "llm.model_name": "other", "llm.token_count.prompt": 7,
                     "llm.token_count.completion": 3, "llm.cost.total": 0.25}),
        span("chat", {"gen_ai.operation.name": "chat", "gen_ai.usage.prompt_tokens": 5,
                      "gen_ai.usage.completion_tokens": 6, "gen_ai.usage.cost": 0.5, "operation.cost": 9.0}),
    ), cfg)
    assert (steps[0].input_tokens, steps[0].output_tokens) == (1000, 100)
    assert steps[0].cost_usd == pytest.approx(0.0035)
    assert (steps[1].input_tokens, steps[1].output_tokens, steps[1].cost_usd) == (7, 3, 0.25)
    assert (steps[2].input_tokens, steps[2].output_tokens, steps[2].cost_usd) == (5, 6, 0.5)


@pytest.mark.parametrize("attrs, field", [
    ({"gen_ai.usage.input_tokens": "12"}, "input_tokens"),
    ({"gen_ai.usage.input_tokens": -3}, "input_tokens"),
    ({"gen_ai.usage.output_tokens": float("nan")}, "output_tokens"),
    ({"gen_ai.usage.output_tokens": 1.5}, "output_tokens"),
    ({"gen_ai.usage.cost": -1.0}, "cost"),
    ({"gen_ai.usage.cost": float("inf")}, "cost"),
    ({"gen_ai.usage.cost": "cheap"}, "cost"),
    ({"gen_ai.tool.name": b"\x00bytes"}, "name"),
    ({"gen_ai.tool.call.arguments": b"\x01"}, "args"),
], ids=["tokens-string", "tokens-negative", "tokens-nan", "tokens-fraction", "cost-negative", "cost-inf",
        "cost-string", "name-bytes", "args-bytes"])
def test_wrong_types_are_ignored_and_counted(attrs: dict, field: str) -> None:
    pipeline = Pipeline()
    data = request(span("execute_tool t", {"gen_ai.operation.name": "execute_tool", **attrs}))
    processed = pipeline.process(pipeline.decode(data))
    assert processed.steps == 1
    step = map_request(data)[0]
    assert step.input_tokens == 0 and step.output_tokens == 0 and step.cost_usd == 0.0
    assert pipeline.metrics.registry.get_sample_value("otelloop_mapping_errors_total", {"field": field}) == 1


def test_huge_values_are_hashed_without_parsing() -> None:
    huge = json.dumps({"blob": "x" * 3_000_000})
    steps = map_request(request(tool_span(args=huge, result=huge), tool_span(args=huge, result=huge)))
    assert steps[0].args_hash == steps[1].args_hash and len(steps[0].args_text) <= 256


def test_progress_signals_and_intent() -> None:
    step = one({"gen_ai.operation.name": "invoke_agent", "otelloop.intent": "fix-tests",
                "otelloop.progress.diff_hash": "abc", "otelloop.progress.failing_tests": 4,
                "otelloop.progress.failure_signature": "sig", "otelloop.state_hash": "st"})
    assert (step.intent, step.diff_hash, step.failing_tests, step.failure_signature, step.state_hash) == (
        "fix-tests", "abc", 4, "sig", "st")
    assert one({"gen_ai.operation.name": "chat"}).intent == "chat"
    assert one({"openinference.span.kind": "TOOL"}).intent == "tool"


def test_file_and_command_from_tool_arguments() -> None:
    steps = map_request(request(
        tool_span("read_file", args='{"path": "src/app.py"}'),
        tool_span("write_file", args='{"file_path": "src/app.py", "content": "print(1)"}'),
        tool_span("run_command", args='{"command": "pytest -x"}'),
    ))
    assert [(s.tool_class, s.file_path, s.command) for s in steps] == [
        ("read", "src/app.py", None), ("write", "src/app.py", None), ("exec", None, "pytest -x")]
    assert steps[1].content_hash is not None


def test_mapping_rules_from_config() -> None:
    cfg = build_config({"mapping": {"rules": [
        {"match": {"app.kind": "browse"}, "kind": "tool", "name_attribute": "app.action",
         "args_attribute": "app.url"},
        {"span_name": "^healthcheck", "kind": "ignore"},
    ]}}, env={})
    steps = map_request(request(
        span("custom", {"app.kind": "browse", "app.action": "click", "app.url": "https://x"}),
        span("healthcheck ping", {"gen_ai.operation.name": "chat"}),
    ), cfg)
    assert len(steps) == 1 and (steps[0].kind, steps[0].name) == ("tool", "click")
    assert steps[0].args_hash is not None


def test_steps_processed_by_start_time_within_a_request() -> None:
    late, early = tool_span("b", i=20), tool_span("a", i=10)
    assert [s.name for s in map_request(request(late, early))] == ["a", "b"]


def test_step_kind_declared_in_openinference_metadata() -> None:
    meta = json.dumps({"langgraph_node": "otelloop_guard", "otelloop.step.kind": "ignore"})
    assert one({"openinference.span.kind": "CHAIN", "metadata": meta}) is None
    meta = json.dumps({"langgraph_node": "review", "otelloop.step.kind": "tool"})
    assert one({"openinference.span.kind": "CHAIN", "metadata": meta}).kind == "tool"


@pytest.mark.parametrize("tool, raw, expected", [
    ("run_command", "pytest -q tests/test_app.py", ("exec", None, "pytest -q tests/test_app.py")),
    ("run_command", '"pytest -q"', ("exec", None, "pytest -q")),
    ("read_file", "src/app.py", ("read", "src/app.py", None)),
    ("search_web", "weather in Paris", (None, None, None)),
], ids=["exec", "exec-json-string", "read", "not-a-file-tool"])
def test_bare_string_arguments_of_single_argument_tools(tool: str, raw: str, expected: tuple) -> None:
    s = span("t", {"openinference.span.kind": "TOOL", "tool.name": tool, "input.value": raw})
    step = map_request(request(s))[0]
    assert (step.tool_class, step.file_path, step.command) == expected


# -- dialects that carry content in span events or in wrappers ----------------------------------------


def _ev(name: str, **attrs: Any) -> Span.Event:
    return Span.Event(name=name, attributes=kvs(attrs))


def strands_tool(path: str, result: str, call: int, error: str | None = None) -> Span:
    """An execute_tool span as Strands Agents' tracer writes it by default: input and result in events."""
    return span("execute_tool read_file", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                                           "gen_ai.tool.call.id": f"tooluse_{call}"}, error=error, events=[
        _ev("gen_ai.tool.message", role="tool", content=json.dumps({"path": path}), id=f"tooluse_{call}"),
        _ev("gen_ai.choice", message=json.dumps([{"text": result}]), id=f"tooluse_{call}")])


def test_tool_input_and_result_carried_in_span_events() -> None:
    a1, b, a2, missing = map_request(request(
        strands_tool("a.txt", "alpha", 1), strands_tool("b.txt", "beta", 2), strands_tool("a.txt", "alpha", 3),
        strands_tool("missing.txt", "Error: FileNotFoundError", 4, error="No such file")))
    assert a1.args_hash is not None and a1.output_hash is not None
    assert a1.args_hash == a2.args_hash != b.args_hash and a1.output_hash == a2.output_hash != b.output_hash
    assert (a1.outcome, missing.outcome) == ("success", "error")
    assert (a1.tool_class, a1.file_path, b.file_path) == ("read", "a.txt", "b.txt")
    # the same call described by attributes hashes the same
    attrs = map_request(request(tool_span("read_file", args='{"path":"a.txt"}', result='[{"text":"alpha"}]')))[0]
    assert (attrs.args_hash, attrs.output_hash) == (a1.args_hash, a1.output_hash)


def test_span_attributes_win_over_event_values() -> None:
    s = tool_span("read_file", args='{"path": "from-attribute"}', result="attribute result", events=[
        _ev("gen_ai.tool.message", content='{"path": "from-event"}'), _ev("gen_ai.choice", message="event result")])
    step = map_request(request(s))[0]
    want = map_request(request(tool_span("read_file", args='{"path": "from-attribute"}', result="attribute result")))[0]
    assert (step.file_path, step.args_hash, step.output_hash) == ("from-attribute", want.args_hash, want.output_hash)


def test_first_event_carrying_an_attribute_wins() -> None:
    details = "gen_ai.client.inference.operation.details"
    s = span("chat m", {"gen_ai.operation.name": "chat"}, events=[
        _ev(details, **{"gen_ai.input.messages": "[]"}),
        _ev(details, **{"gen_ai.output.messages":
                        '[{"role": "assistant", "parts": [{"type": "text", "content": "a"}]}]'}),
        _ev(details, **{"gen_ai.output.messages": "[]"})])
    step = map_request(request(s))[0]
    assert step.outcome == "success" and step.output_hash is not None


@pytest.mark.parametrize("event, attribute", [
    ("gen_ai.choice", "message"), ("gen_ai.choice", "message.content"), ("gen_ai.choice", "content"),
    ("gen_ai.client.inference.operation.details", "gen_ai.output.messages"),
    ("gen_ai.content.completion", "gen_ai.completion"),
])
def test_outputs_carried_in_events(event: str, attribute: str) -> None:
    step = one({"gen_ai.operation.name": "chat"}, events=[_ev(event, **{attribute: "the answer"})])
    assert step.outcome == "success" and step.output_hash == one(
        {"gen_ai.operation.name": "chat", "gen_ai.completion": "the answer"}).output_hash
    assert one({"gen_ai.operation.name": "chat"}, events=[_ev(event, **{attribute: ""})]).outcome == "empty"


def test_message_history_events_are_not_a_model_calls_arguments() -> None:
    step = one({"gen_ai.operation.name": "chat"}, events=[
        _ev("gen_ai.user.message", content="read the notes"),
        _ev("gen_ai.tool.message", content='[{"toolResult": {"toolUseId": "t1", "content": [{"text": "x"}]}}]'),
        _ev("gen_ai.choice", finish_reason="tool_use", message='[{"toolUse": {"toolUseId": "t2", "name": "f"}}]')])
    assert step.args_hash is None and step.outcome == "success"


def test_outputs_drop_tool_use_ids() -> None:
    def chat(call: str) -> Span:
        return span("chat", {"gen_ai.operation.name": "chat"}, events=[_ev("gen_ai.choice", message=json.dumps(
            [{"toolUse": {"toolUseId": call, "name": "read_file", "input": {"path": "a.txt"}}}]))])
    a, b = map_request(request(chat("tooluse_1"), chat("tooluse_2")))
    c = map_request(request(tool_span(result=json.dumps({"type": "tool_result", "tool_use_id": "x", "content": "ok"})),
                            tool_span(result=json.dumps({"type": "tool_result", "tool_use_id": "y", "content": "ok"}))))
    assert a.output_hash == b.output_hash and c[0].output_hash == c[1].output_hash


def test_arguments_in_message_parts_hash_by_their_arguments() -> None:
    def part(call: str, args: Any) -> str:
        return json.dumps([{"role": "tool", "parts": [{"type": "tool_call", "id": call, "name": "read_file",
                                                       "arguments": args}]}])
    details = "gen_ai.client.inference.operation.details"
    from_event = span("execute_tool read_file", {"gen_ai.operation.name": "execute_tool"},
                      events=[_ev(details, **{"gen_ai.input.messages": part("t1", {"path": "a.txt"})})])
    from_attribute = span("execute_tool read_file", {"gen_ai.operation.name": "execute_tool",
                                                     "gen_ai.input.messages": part("t2", '{"path": "a.txt"}')})
    plain = tool_span("read_file", args='{"path": "a.txt"}')
    other = tool_span("read_file", args=part("t3", {"path": "b.txt"}))
    steps = map_request(request(from_event, from_attribute, plain, other))
    assert steps[0].args_hash == steps[1].args_hash == steps[2].args_hash != steps[3].args_hash
    assert [s.file_path for s in steps] == ["a.txt", "a.txt", "a.txt", "b.txt"]
    # on a model call, the input messages are not arguments
    assert one({"gen_ai.operation.name": "chat", "gen_ai.input.messages": part("t4", {})}).args_hash is None


def test_results_in_message_parts_hash_by_their_result() -> None:
    def response(call: str, result: Any) -> str:
        return json.dumps([{"role": "tool", "parts": [{"type": "tool_call_response", "id": call, "response": result}]}])
    steps = map_request(request(tool_span(result=response("t1", [{"text": "x"}])),
                                tool_span(result=response("t2", [{"text": "x"}])),
                                tool_span(result='[{"text": "x"}]'), tool_span(result=response("t3", []))))
    assert steps[0].output_hash == steps[1].output_hash == steps[2].output_hash
    assert steps[3].outcome == "empty"


def test_bound_call_arguments_hash_by_their_keyword_arguments() -> None:
    def smolagents(kwargs: dict, args: list | None = None) -> Span:
        payload = json.dumps({"args": args or [], "sanitize_inputs_outputs": True, "kwargs": kwargs})
        return span("SimpleTool", {"openinference.span.kind": "TOOL", "tool.name": "read_file", "input.value": payload})
    steps = map_request(request(smolagents({"path": "a.txt"}), tool_span("read_file", args='{"path": "a.txt"}'),
                                smolagents({"path": "b.txt"}), smolagents({}, ["a.txt"])))
    assert steps[0].args_hash == steps[1].args_hash != steps[2].args_hash
    assert [s.file_path for s in steps] == ["a.txt", "a.txt", "b.txt", None]
    assert steps[3].args_text.startswith('{"args":["a.txt"]')  # positional arguments: kept as they are


def test_system_steps_carry_no_usage() -> None:
    """An agent span's usage is the total of its model calls, which are steps of their own."""
    cfg = {"pricing": {"m": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}}
    agent = one({"gen_ai.operation.name": "invoke_agent", "gen_ai.request.model": "m",
                 "gen_ai.usage.input_tokens": 260, "gen_ai.usage.output_tokens": 35, "gen_ai.usage.cost": 1.0},
                config=cfg)
    oi_agent = one({"openinference.span.kind": "AGENT", "llm.token_count.prompt": 620,
                    "llm.token_count.completion": 45})
    chat = one({"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.output_tokens": 7}, config=cfg)
    assert (agent.input_tokens, agent.output_tokens, agent.cost_usd) == (0, 0, 0.0)
    assert (oi_agent.input_tokens, oi_agent.output_tokens) == (0, 0)
    assert (chat.input_tokens, chat.output_tokens, chat.cost_usd) == (50, 7, pytest.approx(57e-6))


@pytest.mark.parametrize("attrs, name, expected", [
    ({"langsmith.span.kind": "chain", "langsmith.metadata.langgraph_node": "agent"}, "route", "agent"),
    ({"openinference.span.kind": "CHAIN"}, "Step 12", "Step"),
    ({"openinference.span.kind": "CHAIN", "graph.node.id": "Step 3"}, "Step 3", "Step 3"),
    ({"openinference.span.kind": "CHAIN"}, "step_2", "step_2"),
    ({"openinference.span.kind": "CHAIN"}, "42", "42"),
], ids=["langsmith-langgraph-node", "numbered-span-name", "attribute-kept", "no-space", "only-a-number"])
def test_node_of_framework_spans(attrs: dict, name: str, expected: str) -> None:
    assert one(attrs, name).node == expected


def test_pydantic_ai_final_result_is_the_agent_output() -> None:
    step = one({"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "reader", "final_result": "done"})
    assert step.outcome == "success" and step.output_hash is not None
