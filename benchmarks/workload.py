"""Realistic GenAI agent spans for the benchmarks: 512-span batches, about 10 attributes per span.

Every span is an agent step (tool calls, chat turns and agent turns, in the ratio an agent produces
them); each batch carries several sessions so the detectors see interleaved traffic.
"""

from __future__ import annotations

import json
import os
import random
import time

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TOOLS = ["search_web", "read_file", "write_file", "run_shell", "http_get"]


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def build_batch(n: int = 512, sessions: int = 16, seed: int = 1, session_base: int = 0) -> bytes:
    """One serialised request of ``n`` step spans spread over ``sessions`` traces."""
    rnd = random.Random(seed)
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.extend([_kv("service.name", "agent-svc"), _kv("service.version", "1.4.2")])
    ss = rs.scope_spans.add()
    ss.scope.name = "opentelemetry.instrumentation.genai"
    t0 = time.time_ns()
    traces = [(session_base + s + 1).to_bytes(16, "big") for s in range(sessions)]
    for i in range(n):
        sp = ss.spans.add()
        sp.trace_id = traces[i % sessions]
        sp.span_id = os.urandom(8)
        sp.start_time_unix_nano = t0 + i * 2_000_000
        sp.end_time_unix_nano = sp.start_time_unix_nano + 1_500_000
        turn = (i // sessions) % 3
        common = [_kv("gen_ai.provider.name", "openai"), _kv("gen_ai.agent.name", "researcher"),
                  _kv("gen_ai.conversation.id", f"conv-{i % sessions}")]
        if turn == 0:
            sp.name = "chat gpt-4o-mini"
            sp.attributes.extend([
                *common, _kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", "gpt-4o-mini"),
                _kv("gen_ai.response.model", "gpt-4o-mini-2024-07-18"), _kv("gen_ai.response.id", f"chatcmpl-{i}"),
                _kv("gen_ai.usage.input_tokens", rnd.randint(400, 4000)),
                _kv("gen_ai.usage.output_tokens", rnd.randint(10, 400)),
                _kv("gen_ai.response.finish_reasons", "tool_calls")])
        else:
            tool = TOOLS[(i // 7) % 5]
            sp.name = f"execute_tool {tool}"
            sp.attributes.extend([
                *common, _kv("gen_ai.operation.name", "execute_tool"), _kv("gen_ai.tool.name", tool),
                _kv("gen_ai.tool.call.id", f"call_{rnd.getrandbits(48):012x}"), _kv("gen_ai.tool.type", "function"),
                _kv("gen_ai.tool.call.arguments", json.dumps({"query": f"weather in city {i % 11}", "page": i % 3})),
                _kv("gen_ai.tool.call.result", f"{i % 5} results"),
                _kv("gen_ai.usage.input_tokens", 0)])
    data: bytes = req.SerializeToString()
    return data
