"""Golden tests: each dialect's wrappers around a tool call's arguments and result are taken off.

- OpenLLMetry's LangChain instrumentation (``opentelemetry-instrumentation-langchain``,
  ``callback_handler.py``: ``on_tool_start`` writes ``traceloop.entity.input`` as
  ``{"input_str", "tags", "metadata", "inputs", "kwargs"}``, ``on_tool_end`` writes
  ``traceloop.entity.output`` as ``{"output", "kwargs"}``, serialising a message with its ``to_json()``
  through ``CallbackFilteredJSONEncoder``); LangGraph puts ``langgraph_step`` and checkpoint namespaces in
  the callback ``metadata``, different on every call.
- LangChain ``ToolMessage`` envelopes as ``to_json``/``dumpd``, ``messages_to_dict`` and ``model_dump``
  write them, built with the installed ``langchain_core``.
- LlamaIndex's ``ToolOutput`` (``llama_index/core/tools/types.py``: ``content``, ``tool_name``,
  ``raw_input``, ``raw_output``, ``is_error``), as OpenInference records it in ``output.value``; a
  hand-written fixture of that shape (LlamaIndex is not installed here).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import extras
import pytest
from spans import request, span

from otelloop import progress
from otelloop.model import Step
from otelloop.pipeline import map_request

extras.require("frameworks")  # langchain-core: skipped locally without it, a failure under .ci/run

from langchain_core import messages  # noqa: E402


def _openllmetry_tool(step: int, args: dict[str, Any], output: Any, i: int) -> Any:
    """A tool span as OpenLLMetry's LangChain callback handler writes it inside a LangGraph run."""
    ns = f"tools:{uuid.UUID(int=step * 7919, version=4)}"
    start = {"input_str": str(args), "tags": ["seq:step:1"], "inputs": args,
             "metadata": {"langgraph_step": step, "langgraph_node": "tools", "langgraph_triggers": ["branch:agent"],
                          "langgraph_path": ["__pregel_pull", "tools"], "langgraph_checkpoint_ns": ns,
                          "checkpoint_ns": ns},
             "kwargs": {"color": "green", "name": "search_docs"}}
    end = {"output": output, "kwargs": {"color": "green", "name": "search_docs", "tags": ["seq:step:1"]}}
    return span("search_docs.tool", {
        "traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
        "traceloop.entity.input": json.dumps(start),
        "traceloop.entity.output": json.dumps(end, default=lambda o: o.to_json())}, i=i)


def _tool_message(content: str, n: int) -> Any:
    return messages.ToolMessage(content=content, tool_call_id=f"call_{n:04d}", name="search_docs",
                                id=str(uuid.UUID(int=n, version=4)))


def test_openllmetry_langgraph_tool_calls_hash_by_their_inputs_and_content() -> None:
    """Identical calls at different graph steps hash equal; their ToolMessage results hash as their content."""
    spans = [_openllmetry_tool(step, {"query": "rotate api keys"}, _tool_message("No documents found.", step), i)
             for i, step in enumerate((2, 4, 6))]
    steps = map_request(request(*spans))
    assert [s.kind for s in steps] == ["tool"] * 3 and {s.name for s in steps} == {"search_docs"}
    assert len({s.args_hash for s in steps}) == 1
    assert len({s.output_hash for s in steps}) == 1
    assert steps[0].args_text == '{"query":"rotate api keys"}'
    plain = map_request(request(span("t", {"traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
                                           "traceloop.entity.input": '{"query": "rotate api keys"}',
                                           "traceloop.entity.output": "No documents found."})))[0]
    assert steps[0].args_hash == plain.args_hash and steps[0].output_hash == plain.output_hash
    assert steps[0].result_flags == plain.result_flags != 0


def test_openllmetry_other_inputs_stay_apart() -> None:
    a, b = map_request(request(_openllmetry_tool(2, {"query": "a"}, "x", 0),
                               _openllmetry_tool(2, {"query": "b"}, "x", 1)))
    assert a.args_hash != b.args_hash


@pytest.mark.parametrize("form", ["to_json", "messages_to_dict", "model_dump", "bare"])
def test_a_langchain_tool_message_is_its_content_in_every_serialisation(form: str) -> None:
    def serialise(msg: Any) -> str:
        if form == "to_json":
            return json.dumps(msg.to_json())
        if form == "messages_to_dict":
            return json.dumps(messages.messages_to_dict([msg])[0])
        if form == "model_dump":
            return json.dumps(msg.model_dump())
        return str(msg.content)
    results = [serialise(_tool_message("3 rows: alpha, beta, gamma", n)) for n in (1, 2)]
    other = serialise(_tool_message("2 rows: alpha, beta", 3))
    steps = map_request(request(*(span("t", {"openinference.span.kind": "TOOL", "tool.name": "sql",
                                             "input.value": '{"q": "select"}', "output.value": r}, i=i)
                                  for i, r in enumerate([*results, other, "3 rows: alpha, beta, gamma"]))))
    assert steps[0].output_hash == steps[1].output_hash == steps[3].output_hash != steps[2].output_hash


def test_a_tool_message_artifact_is_part_of_the_result() -> None:
    def with_artifact(rows: list[int], n: int) -> str:
        msg = messages.ToolMessage(content="rows fetched", artifact={"rows": rows}, tool_call_id=f"c{n}")
        return json.dumps(msg.model_dump())
    a, b, c = map_request(request(*(span("t", {"openinference.span.kind": "TOOL", "tool.name": "sql",
                                               "output.value": r}, i=i)
                                    for i, r in enumerate([with_artifact([1, 2], 1), with_artifact([1, 2], 2),
                                                           with_artifact([3], 3)]))))
    assert a.output_hash == b.output_hash != c.output_hash


def _llamaindex_output(order: str, status: str, error: bool = False) -> str:
    """A LlamaIndex ``ToolOutput`` as ``model_dump_json`` writes it (fields of
    ``llama_index.core.tools.types.ToolOutput``)."""
    raw = {"order_id": order, "status": status}
    return json.dumps({"content": str(raw) if not error else f"Error: order {order} not found",
                       "tool_name": "get_order", "raw_input": {"args": [], "kwargs": {"order_id": order}},
                       "raw_output": raw if not error else None, "is_error": error})


def _llamaindex_steps(*outputs: tuple[str, str]) -> list[Step]:
    return map_request(request(*(span("get_order", {"openinference.span.kind": "TOOL", "tool.name": "get_order",
                                                    "input.value": json.dumps({"order_id": order}),
                                                    "output.value": out}, i=i)
                                 for i, (order, out) in enumerate(outputs))))


def test_llamaindex_tool_output_is_its_raw_output_without_the_arguments_it_repeats() -> None:
    steps = _llamaindex_steps(("A-1", _llamaindex_output("A-1", "shipped")),
                              ("A-1", _llamaindex_output("A-1", "shipped")),
                              ("A-1", _llamaindex_output("A-1", "delivered")))
    plain = map_request(request(span("t", {"openinference.span.kind": "TOOL", "tool.name": "get_order",
                                           "input.value": '{"order_id": "A-1"}',
                                           "output.value": json.dumps({"order_id": "A-1", "status": "shipped"})})))[0]
    assert steps[0].output_hash == steps[1].output_hash == plain.output_hash != steps[2].output_hash


def test_llamaindex_orders_that_differ_only_in_their_id_are_different_results() -> None:
    steps = _llamaindex_steps(*((f"A-{n}", _llamaindex_output(f"A-{n}", "shipped")) for n in range(8)))
    state = progress.new_state()
    for s in steps:
        progress.observe(state, s)
        assert s.novel is True


def test_a_failed_llamaindex_call_is_read_by_its_content() -> None:
    (step,) = _llamaindex_steps(("Z-9", _llamaindex_output("Z-9", "", error=True)))
    other = _llamaindex_steps(("Z-8", _llamaindex_output("Z-8", "", error=True)))[0]
    assert step.output_hash != other.output_hash  # the error text names its order


def _adk_tool(result: str, i: int) -> Any:
    """A tool span as Google ADK's own tracing (ADK 2, content routed to spans) writes it."""
    return span("execute_tool get_order", {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_order",
                                           "gen_ai.tool.call.id": f"adk-{i}",
                                           "gen_ai.tool.call.arguments": '{"order_id": "A-1"}',
                                           "gen_ai.tool.call.result": result}, i=i)


def test_adk_wraps_a_tools_value_as_result_and_it_hashes_as_the_value() -> None:
    """ADK writes a tool's value that is not a dict as ``{"result": value}``: the same value hashes the same
    as a dialect that writes it plain, and a dict value (ADK writes it as it is) is untouched."""
    value = json.dumps({"order_id": "A-1", "status": "shipped"})
    wrapped, other, as_dict = map_request(request(
        _adk_tool(json.dumps({"result": value}), 0), _adk_tool(json.dumps({"result": "delivered"}), 1),
        _adk_tool(value, 2)))
    plain = map_request(request(span("t", {"openinference.span.kind": "TOOL", "tool.name": "get_order",
                                           "input.value": '{"order_id": "A-1"}', "output.value": value})))[0]
    assert wrapped.output_hash == plain.output_hash == as_dict.output_hash != other.output_hash
    text = map_request(request(_adk_tool(json.dumps({"result": "No orders found."}), 0)))[0]
    bare = map_request(request(_adk_tool("No orders found.", 0)))[0]
    assert text.output_hash == bare.output_hash and text.result_flags == bare.result_flags
