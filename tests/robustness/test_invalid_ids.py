"""Probe: spans whose ids OTLP calls invalid are refused at the receiver, not acknowledged and then lost.

opentelemetry-proto's ``trace.proto`` requires a 16-byte ``trace_id`` and an 8-byte ``span_id`` ("An ID
with all zeroes OR of length other than 16 bytes is considered invalid"); the OpenTelemetry Collector
cannot even decode a request holding an id of another length (pdata's ``TraceID.Unmarshal``: "invalid
TraceID length") and refuses all of it. The upstream here behaves so.

Figures held, for a request of 6 valid spans and 4 with invalid ids (a 5-byte trace id, a 4-byte span id,
an all-zero trace id, a 3-byte parent span id), over gRPC, OTLP/HTTP protobuf and OTLP/HTTP JSON: the client
is told ``rejected_spans: 4`` with the reasons, ``otelloop_spans_refused_total{reason="invalid"}`` counts
4, the upstream receives exactly the 6 valid spans and refuses nothing (before, over gRPC and HTTP
protobuf: the client was told all 10 were accepted, nothing was counted as refused, and the upstream
refused the whole request: 10 spans acknowledged then dropped, the 6 valid ones with them; over JSON the
whole request was answered 400, the 6 valid spans refused too). A request of invalid spans only is refused whole
(gRPC ``INVALID_ARGUMENT``, HTTP 400), and a request large enough to be read in chunks loses exactly its
invalid spans.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from probes import NO_DETECTORS, export, identical_tool_spans, span_ids
from served import BackgroundLoop, http_call, wait_for
from sinks import GrpcSink
from spans import request, tool_span

from otelloop.otlp.json_codec import request_to_json


class CollectorLikeSink(GrpcSink):
    """A gRPC upstream that, like the OpenTelemetry Collector, cannot decode a request holding an id of
    the wrong length and refuses all of it with INVALID_ARGUMENT."""

    def __init__(self) -> None:
        super().__init__()
        self.refused_spans = 0

    async def _export(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        spans = [s for rs in ExportTraceServiceRequest.FromString(request).resource_spans
                 for ss in rs.scope_spans for s in ss.spans]
        if any(len(s.trace_id) not in (0, 16) or len(s.span_id) not in (0, 8)
               or len(s.parent_span_id) not in (0, 8) for s in spans):
            self.refused_spans += len(spans)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unmarshal: invalid TraceID length")
        return await super()._export(request, context)


def invalid_spans(first: int = 100) -> list[Span]:
    return [Span(name="short trace id", trace_id=b"\x01" * 5, span_id=first.to_bytes(8, "big")),
            Span(name="short span id", trace_id=b"\x01" * 16, span_id=b"\x02" * 4),
            Span(name="zero trace id", trace_id=bytes(16), span_id=(first + 1).to_bytes(8, "big")),
            Span(name="short parent", trace_id=b"\x01" * 16, span_id=(first + 2).to_bytes(8, "big"),
                 parent_span_id=b"\x03" * 3)]


def mixed_request() -> tuple[bytes, set[bytes]]:
    """6 valid tool spans of one looping session and 4 invalid spans between them; the valid span ids."""
    good = [tool_span(trace=11, i=i) for i in range(6)]
    bad = invalid_spans()
    data = request(good[0], bad[0], good[1], good[2], bad[1], bad[2], good[3], good[4], bad[3], good[5])
    return data, {s.span_id for s in good}


@pytest.fixture
def upstream(loop: BackgroundLoop) -> Any:
    sink = loop.run(CollectorLikeSink().start())
    yield sink
    loop.run(sink.stop())


def _otlp_http(o: Any, body: bytes, ctype: str) -> tuple[int, bytes]:
    return http_call("POST", f"http://{o.http}/v1/traces", body, {"Content-Type": ctype})


def _send(o: Any, transport: str, data: bytes) -> tuple[int, str]:
    """(rejected_spans, error_message) of the partial success otelloop answered."""
    if transport == "grpc":
        answer = export(o.grpc, data)
    elif transport == "http/protobuf":
        code, body = _otlp_http(o, data, "application/x-protobuf")
        assert code == 200, body
        answer = ExportTraceServiceResponse.FromString(body)
    else:
        code, body = _otlp_http(o, json.dumps(request_to_json(data)).encode(), "application/json")
        assert code == 200, body
        partial = json.loads(body).get("partialSuccess", {})
        return int(partial.get("rejectedSpans", 0)), partial.get("errorMessage", "")
    return answer.partial_success.rejected_spans, answer.partial_success.error_message


@pytest.mark.parametrize("transport", ["grpc", "http/protobuf", "http/json"])
def test_invalid_ids_are_refused_with_a_partial_success(serve: Any, upstream: CollectorLikeSink,
                                                         transport: str) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{upstream.port}"}})
    data, good = mixed_request()
    rejected, message = _send(o, transport, data)
    assert rejected == 4
    assert message.startswith("4 spans have invalid ids: ") and "trace_id of 5 bytes (1)" in message
    label = "grpc" if transport == "grpc" else "http"
    wait_for(lambda: o.metric("otelloop_spans_exported_total") == 6, what="the valid spans exported")
    assert o.metric("otelloop_spans_refused_total", {"transport": label, "reason": "invalid"}) == 4
    assert o.metric("otelloop_spans_received_total", {"transport": label}) == 10
    assert upstream.refused_spans == 0 and o.metric("otelloop_spans_export_failed_total") == 0
    delivered = [i for d in upstream.delivered for i in span_ids(d)]
    assert sorted(delivered) == sorted(good)
    assert "refused 4 spans to a client over " + label in o.stderr


def test_a_request_of_invalid_spans_only_is_refused_whole(serve: Any, upstream: CollectorLikeSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{upstream.port}"}})
    data = request(*invalid_spans())
    with pytest.raises(grpc.RpcError) as refused:
        export(o.grpc, data)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "4 spans have invalid ids" in (refused.value.details() or "")
    code, _ = _otlp_http(o, data, "application/x-protobuf")
    assert code == 400
    assert o.metric("otelloop_spans_refused_total", {"transport": "grpc", "reason": "invalid"}) == 4
    assert o.metric("otelloop_spans_refused_total", {"transport": "http", "reason": "invalid"}) == 4
    assert upstream.attempts == []


def test_a_large_request_read_in_chunks_loses_exactly_its_invalid_spans(serve: Any,
                                                                        upstream: CollectorLikeSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{upstream.port}"}, "detectors": NO_DETECTORS})
    big = ExportTraceServiceRequest.FromString(identical_tool_spans(30_000))  # 2.5 MB: read in 3 chunks
    spans = big.resource_spans[0].scope_spans[0].spans
    good = {s.span_id for s in spans}
    for k, bad in enumerate(invalid_spans(first=1 << 40) * 3):
        spans.insert(1 + k * 2_500, bad)  # spread over every chunk
    data = big.SerializeToString()
    assert len(data) > 2 << 20
    answer = export(o.grpc, data)
    assert answer.partial_success.rejected_spans == 12
    wait_for(lambda: o.metric("otelloop_spans_exported_total") == 30_000, what="the valid spans exported")
    delivered = [i for d in upstream.delivered for i in span_ids(d)]
    assert len(delivered) == 30_000 and set(delivered) == good
    assert upstream.refused_spans == 0
