"""Builders of OTLP requests for the tests (the generated protobuf classes, as a client would)."""

from __future__ import annotations

import itertools
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

T0 = 1_700_000_000_000_000_000
_ids = itertools.count(1)


def any_value(v: Any) -> AnyValue:
    if isinstance(v, AnyValue):
        return v
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, bytes):
        return AnyValue(bytes_value=v)
    if isinstance(v, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[any_value(x) for x in v]))
    return AnyValue(string_value=str(v))


def kvs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def span(name: str, attrs: dict[str, Any] | None = None, *, trace: int = 1, i: int | None = None,
         error: str | None = None, events: list[Span.Event] | None = None) -> Span:
    """A span of trace ``trace``; ``i`` orders it in time (one second per step)."""
    n = next(_ids) if i is None else i
    s = Span(name=name, trace_id=trace.to_bytes(16, "big"), span_id=next(_ids).to_bytes(8, "big"),
             start_time_unix_nano=T0 + n * 1_000_000_000, end_time_unix_nano=T0 + n * 1_000_000_000 + 5 * 10**8,
             attributes=kvs(attrs or {}), events=events or [])
    if error is not None:
        s.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
    return s


def tool_span(tool: str = "search_web", args: Any = '{"query": "weather"}', result: Any = "no results",
              **kw: Any) -> Span:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool}
    if args is not None:
        attrs["gen_ai.tool.call.arguments"] = args
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    attrs.update(kw.pop("attrs", {}))
    return span(f"execute_tool {tool}", attrs, **kw)


def request(*spans: Span, service: str = "agent-svc", resource: dict[str, Any] | None = None) -> bytes:
    res = {"service.name": service, **(resource or {})}
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])
    rs.resource.attributes.extend(kvs(res))
    return ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()


def parse(data: bytes) -> list[Span]:
    req = ExportTraceServiceRequest.FromString(data)
    return [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def attrs_of(s: Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in s.attributes:
        which = kv.value.WhichOneof("value")
        v = getattr(kv.value, which) if which else None
        if which == "array_value":
            v = [getattr(x, x.WhichOneof("value")) for x in kv.value.array_value.values]
        out[kv.key] = v
    return out


def events_of(s: Span) -> list[tuple[str, dict[str, Any]]]:
    return [(e.name, attrs_of(e)) for e in s.events]  # type: ignore[arg-type]
