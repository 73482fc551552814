"""Bytes of one session's state, short and long: what a change of a state layout costs per session.

    python benchmarks/bench_state_bytes.py

In-process, every detector on, the store's own estimate (``SessionStore.session_bytes``: the deep size of a
session, see ``otelloop.bounds.deep_size``). Two sessions, each alone in a fresh pipeline:

- **short**: 3 steps (a chat turn, a tool call with a text result, a chat turn);
- **long**: 200 tool steps with structured (JSON) results over 7 tools, the second half over 3: reads of
  different files, a paged listing whose cursor and request id change, a job polled until it is done, searches that find
  nothing, and a status call repeating the same answer but for the replica that served it (learned as
  noise), each result carrying a request id, so every bounded memory (results, calls, tools, learned noise) is full.

Reports the whole session and its progress state (``Session.progress``) separately. The figures are
deterministic for one build: compare before and after a change, not across Python versions.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from otelloop.bounds import deep_size
from otelloop.config import build_config
from otelloop.pipeline import Pipeline

T0 = 1_764_000_000_000_000_000


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=str(value)))


def _span(i: int, name: str, attrs: dict[str, object]) -> Span:
    return Span(name=name, trace_id=(7).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                start_time_unix_nano=T0 + i * 10**9, end_time_unix_nano=T0 + i * 10**9 + 5 * 10**8,
                attributes=[_kv(k, v) for k, v in attrs.items()])


def chat(i: int) -> Span:
    return _span(i, "chat gpt-4o-mini", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
                                         "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80})


def tool(i: int, name: str, args: dict[str, object], result: object) -> Span:
    return _span(i, f"execute_tool {name}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": f"call_{i:08d}", "gen_ai.tool.call.arguments": json.dumps(args),
        "gen_ai.tool.call.result": result if isinstance(result, str) else json.dumps(result)})


def _rid(rnd: random.Random) -> str:
    return "req_" + "".join(rnd.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(20))


def long_steps(n: int = 200) -> list[Span]:
    """``n`` tool steps with structured results (see the module docstring)."""
    rnd = random.Random(5)
    spans = []
    for i in range(n):
        kind = i % 6 if i < n // 2 else 2 + i % 3  # later, three tools only: each is remembered between calls
        if kind == 0:
            args: dict[str, object] = {"path": f"src/module_{i // 6}.py"}
            result: object = {"path": args["path"], "lines": 40 + i, "content": f"def f{i}(): return {i}",
                              "request_id": _rid(rnd)}
            spans.append(tool(i, "read_file", args, result))
        elif kind == 1:
            cursor = f"c{rnd.getrandbits(64):016x}"
            spans.append(tool(i, "list_items", {"cursor": cursor} if i > 1 else {},
                              {"items": [{"id": j, "name": f"item {j}"} for j in range(3)],
                               "next_cursor": f"c{rnd.getrandbits(64):016x}", "request_id": _rid(rnd)}))
        elif kind == 2:
            state = "done" if i > 150 else "running"
            spans.append(tool(i, "job_status", {"job": "build-42"},
                              {"job": "build-42", "state": state, "progress": min(100, i // 2),
                               "request_id": _rid(rnd), "served_at": T0 // 10**6 + i * 1000}))
        elif kind == 3:
            spans.append(tool(i, "search_docs", {"query": f"how to configure option {i}"},
                              {"results": [], "total": 0, "index": f"v{rnd.randint(10, 99)}",
                               "request_id": _rid(rnd)}))
        elif kind == 4:
            spans.append(tool(i, "service_status", {"service": "api"},
                              {"service": "api", "healthy": False, "error": "connection refused",
                               "served_by": f"r{rnd.randint(10, 99)}", "request_id": _rid(rnd)}))
        else:
            spans.append(tool(i, f"fetch_{i % 4}", {"url": f"https://example.com/page/{i}"},
                              {"status": 200, "title": f"Page {i}", "etag": f"W/\"{rnd.getrandbits(48):012x}\""}))
    return spans


def short_steps() -> list[Span]:
    return [chat(0), tool(1, "search_web", {"query": "weather in Paris"}, "Sunny, 21 °C"), chat(2)]


def session_bytes(spans: list[Span], per_request: int = 16) -> tuple[int, int]:
    """(bytes of the session, bytes of its progress state) after ``spans``, sent ``per_request`` at a time."""
    pipeline = Pipeline(build_config({"state": {"idle_timeout": "1h"}}, env={}))
    for at in range(0, len(spans), per_request):
        rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans[at:at + per_request])])
        rs.resource.attributes.append(_kv("service.name", "agent-svc"))
        pipeline.process(pipeline.decode(ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()))
    [session] = list(pipeline.store)
    return pipeline.store.session_bytes(), deep_size(session.progress)


def main() -> int:
    for name, spans in (("short (3 steps)", short_steps()), ("long (200 tool steps)", long_steps())):
        whole, progress = session_bytes(spans)
        print(f"{name:24} session {whole:7,} B   progress state {progress:6,} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
