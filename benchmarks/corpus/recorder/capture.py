"""Capture of the OTLP export requests exactly as the SDK sent them, and the corpus file format.

An in-process OTLP/gRPC server on 127.0.0.1 answers ``TraceService/Export`` with a raw-bytes handler
and keeps each request's bytes. The real OpenTelemetry SDK exports to it through a
``BatchSpanProcessor`` (SDK defaults: 5 s schedule, 512 spans per batch) and the gRPC
``OTLPSpanExporter``, as an agent in production would export to a Collector.

A run is stored as the Collector file exporter's ``proto`` format: every request preceded by its length
as a 4-byte big-endian integer.
"""

from __future__ import annotations

import struct
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from opentelemetry.sdk.trace import SpanProcessor

EXPORT_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


def frame(requests: list[bytes]) -> bytes:
    """The file exporter's ``proto`` format: ``len(request)`` as 4 bytes big-endian, then the request."""
    return b"".join(struct.pack(">I", len(r)) + r for r in requests)


def unframe(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError(f"truncated length prefix at offset {pos}")
        (n,) = struct.unpack_from(">I", data, pos)
        if pos + 4 + n > len(data):
            raise ValueError(f"truncated request at offset {pos}: {n} bytes announced")
        out.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    return out


class RawOtlpReceiver:
    """A gRPC server that answers TraceService/Export and keeps each request's exact bytes."""

    def __init__(self) -> None:
        import grpc

        self.requests: list[bytes] = []
        self._lock = threading.Lock()
        handler = grpc.method_handlers_generic_handler(EXPORT_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(self._export, request_deserializer=None,
                                                          response_serializer=None)})
        self._server = grpc.server(ThreadPoolExecutor(max_workers=1))
        self._server.add_generic_rpc_handlers((handler,))
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _export(self, request: bytes, context: Any) -> bytes:
        with self._lock:
            self.requests.append(request)
        return b""  # an empty ExportTraceServiceResponse: full success

    def stop(self) -> None:
        self._server.stop(0)


class Capture:
    """A TracerProvider exporting to a :class:`RawOtlpReceiver`; ``finish`` flushes and returns the requests."""

    def __init__(self, service_name: str, set_global: bool = False) -> None:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.receiver = RawOtlpReceiver()
        self.ended = 0
        self._lock = threading.Lock()
        self.provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        self.provider.add_span_processor(_EndCounter(self))
        self.provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"127.0.0.1:{self.receiver.port}", insecure=True)))
        if set_global:
            trace.set_tracer_provider(self.provider)

    def finish(self) -> list[bytes]:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        if not self.provider.force_flush(60_000):
            raise RuntimeError("force_flush timed out")
        requests = list(self.receiver.requests)
        self.provider.shutdown()
        self.receiver.stop()
        spans = sum(len(ss.spans) for r in requests for rs in ExportTraceServiceRequest.FromString(r).resource_spans
                    for ss in rs.scope_spans)
        if spans == 0 or spans != self.ended:
            raise RuntimeError(f"{self.ended} spans ended but {spans} received")
        return requests


class _EndCounter(SpanProcessor):
    """Span processor counting ended spans, to check that every one of them was received."""

    def __init__(self, cap: Capture) -> None:
        self._cap = cap

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: Any) -> None:
        with self._cap._lock:
            self._cap.ended += 1

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def _on_ending(self, span: Any) -> None:  # newer SDKs call this
        pass


# -- reading spans back (independent of otelloop) --------------------------------------------------------


def any_value(v: Any) -> Any:
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def spans_of(requests: list[bytes]) -> list[dict[str, Any]]:
    """Every span as a plain dict (name, start, end, trace, attributes, events), in start-time order."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    out = []
    for r in requests:
        for rs in ExportTraceServiceRequest.FromString(r).resource_spans:
            for ss in rs.scope_spans:
                for sp in ss.spans:
                    out.append({
                        "name": sp.name, "scope": ss.scope.name, "start": sp.start_time_unix_nano,
                        "end": sp.end_time_unix_nano, "trace": sp.trace_id.hex(), "span_id": sp.span_id.hex(),
                        "parent": sp.parent_span_id.hex(), "status": sp.status.code,
                        "attrs": {kv.key: any_value(kv.value) for kv in sp.attributes},
                        "events": [(e.name, {kv.key: any_value(kv.value) for kv in e.attributes})
                                   for e in sp.events]})
    out.sort(key=lambda s: s["start"])
    return out


def is_tool_span(span: dict[str, Any]) -> bool:
    """A tool execution as the instrumentation declares it (OpenInference TOOL kind or GenAI execute_tool)."""
    a = span["attrs"]
    return bool(a.get("openinference.span.kind") == "TOOL" or a.get("gen_ai.operation.name") == "execute_tool")
