"""Probe: nothing acknowledged is lost to an upstream's size limit.

A real ``otelloop serve`` forwards to real sinks that accept at most 4 MiB, the default of an
OpenTelemetry Collector: gRPC with ``grpc.max_receive_message_length`` (gRPC's own RESOURCE_EXHAUSTED on
the decompressed message) and HTTP with a body limit (413). The requests are under 4 MiB as sent and only
grow past it through enrichment (identical tool spans, every one of which gets findings). Every span the
client saw acknowledged must arrive exactly once, each upstream request within the limit.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from probes import delivered, export, identical_tool_spans, span_ids
from served import BackgroundLoop, wait_for
from sinks import GrpcSink, HttpSink
from spans import attrs_of, parse, request, tool_span

LIMIT = 4 << 20
SPANS = 20_000  # 2.1 MB as sent, about 14 MB once enriched


@pytest.fixture
def limited_grpc(loop: BackgroundLoop) -> Any:
    sink = loop.run(GrpcSink(max_receive_bytes=LIMIT).start())
    yield sink
    loop.run(sink.stop())


@pytest.fixture
def limited_http(loop: BackgroundLoop) -> Any:
    sink = loop.run(HttpSink(max_body_bytes=LIMIT).start())
    yield sink
    loop.run(sink.stop())


def drained(o: Any) -> bool:
    return o.metric("otelloop_export_queue_spans") == 0


def assert_exactly_once(o: Any, sink: Any, data: bytes) -> None:
    sent = span_ids(data)
    wait_for(lambda: drained(o), timeout=120, what="export queue drained")
    got = delivered(sink.delivered)
    assert len(got) == len(sent) and set(got) == set(sent), "every acknowledged span arrives"
    assert max(got.values()) == 1, "and only once"
    assert max(len(d) for d in sink.delivered) <= LIMIT
    assert o.metric("otelloop_spans_exported_total") == len(sent)
    assert sum(o.metric("otelloop_spans_export_failed_total", {"reason": r})
               for r in ("rejected", "partial_success", "too_large", "shutdown")) == 0


def test_grpc_upstream_of_4_mib_gets_every_enriched_span_once(serve: Any, limited_grpc: GrpcSink) -> None:
    # every step of the stopped session judged (the hold off): each span gains findings, past the limit
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{limited_grpc.port}"},
               "state": {"hold_stopped_sessions": False}})
    data = identical_tool_spans(SPANS)
    assert len(data) < LIMIT
    response = export(o.grpc, data)
    assert not response.HasField("partial_success")
    assert_exactly_once(o, limited_grpc, data)
    assert sum(len(d) for d in limited_grpc.delivered) > 2 * LIMIT, "enrichment took it past the limit"
    assert len(limited_grpc.delivered) >= 3
    first = parse(limited_grpc.delivered[0])[-1]
    assert "otelloop.verdict" in attrs_of(first) and first.events, "parts carry the enrichment"


@pytest.mark.parametrize("persistent", [False, True], ids=["memory-queue", "persistent-queue"])
def test_http_upstream_with_a_body_limit_gets_every_enriched_span_once(
        serve: Any, limited_http: HttpSink, tmp_path: Any, persistent: bool) -> None:
    exporter: dict[str, Any] = {"endpoint": limited_http.url, "compression": "none"}
    if persistent:
        exporter["persistent_dir"] = str(tmp_path / "queue")
    o = serve({"exporter": exporter})
    data = identical_tool_spans(SPANS)
    export(o.grpc, data)
    assert_exactly_once(o, limited_http, data)
    assert limited_http.too_large == 0, "nothing was sent over the limit"


def test_resources_and_scopes_travel_with_every_part(serve: Any, limited_grpc: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{limited_grpc.port}",
                            "max_request_mib": 0.25}})
    req = ExportTraceServiceRequest()
    for r in range(3):
        rs = req.resource_spans.add(schema_url=f"https://schema/{r}")
        rs.resource.attributes.add(key="service.name").value.string_value = f"svc-{r}"
        for s in range(2):
            ss = rs.scope_spans.add(schema_url=f"https://scope-schema/{s}")
            ss.scope.name = f"scope-{r}-{s}"
            first = 100_000 * r + 10_000 * s + 1
            ss.spans.extend(parse(identical_tool_spans(1500, first_id=first, trace=r + 1)))
    data = req.SerializeToString()
    export(o.grpc, data)
    wait_for(lambda: drained(o), timeout=120, what="export queue drained")
    where: dict[bytes, tuple[str, str, str, str]] = {}
    for part in limited_grpc.delivered:
        assert len(part) <= (1 << 20) // 4
        for rs in ExportTraceServiceRequest.FromString(part).resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    where[span.span_id] = (rs.resource.attributes[0].value.string_value, rs.schema_url,
                                           ss.scope.name, ss.schema_url)
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                assert where.pop(span.span_id) == (rs.resource.attributes[0].value.string_value,
                                                   rs.schema_url, ss.scope.name, ss.schema_url)
    assert not where


def big_span(trace: int, nbytes: int, i: int = 0) -> Any:
    return tool_span("read_file", args="x" * nbytes, trace=trace, i=i)


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_a_span_too_large_even_alone_is_refused_before_acknowledgement(serve: Any, grpc_sink: GrpcSink,
                                                                        transport: str) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}", "max_request_mib": 0.25}})
    small = [tool_span("search_web", trace=3, i=i) for i in range(5)]
    mixed = request(big_span(3, 300_000, i=9), *small)
    if transport == "grpc":
        response = export(o.grpc, mixed)
        partial = response.partial_success
    else:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
        from served import http_call

        code, body = http_call("POST", f"http://{o.http}/v1/traces", mixed,
                               {"Content-Type": "application/x-protobuf"})
        assert code == 200
        partial = ExportTraceServiceResponse.FromString(body).partial_success
    assert partial.rejected_spans == 1 and "too large for the upstream" in partial.error_message
    wait_for(lambda: drained(o) and len(delivered(grpc_sink.delivered)) == 5,
             what="the other spans delivered")
    assert set(delivered(grpc_sink.delivered)) == {s.span_id for s in small}
    assert o.metric("otelloop_spans_refused_total", {"transport": transport, "reason": "too_large"}) == 1
    assert "refused 1 spans" in o.stderr

    alone = request(big_span(4, 300_000))
    if transport == "grpc":
        with pytest.raises(grpc.RpcError) as refused:
            export(o.grpc, alone)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    else:
        code, _ = http_call("POST", f"http://{o.http}/v1/traces", alone,
                            {"Content-Type": "application/x-protobuf"})
        assert code == 413
    assert o.metric("otelloop_spans_refused_total", {"transport": transport, "reason": "too_large"}) == 2
    assert o.metric("otelloop_sessions_active") == 1, "refused spans changed no state"


def test_a_span_that_only_enrichment_makes_too_large_goes_without_it(serve: Any, grpc_sink: GrpcSink) -> None:
    limit = 64 * 1024
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}",
                            "max_request_mib": limit / (1 << 20)},
               "mapping": {"max_text_bytes": 1 << 20}})
    # identical calls: the later ones get findings; the args make each one just fit the limit as sent
    alone = len(request(big_span(5, 0)))
    spans = [big_span(5, limit - alone - 64, i=i) for i in range(6)]
    assert all(len(request(s)) <= limit for s in spans)
    data = request(*spans)
    response = export(o.grpc, data)
    assert not response.HasField("partial_success")
    wait_for(lambda: drained(o), what="export queue drained")
    got = [s for d in grpc_sink.delivered for s in parse(d)]
    assert sorted(s.span_id for s in got) == sorted(s.span_id for s in spans)
    assert max(len(d) for d in grpc_sink.delivered) <= limit
    plain = [s for s in got if not any(k.startswith("otelloop.") for k in attrs_of(s))]
    assert plain, "the spans whose findings did not fit went as they came"
    assert all(not s.events for s in plain)
    assert o.metric("otelloop_spans_enrichment_skipped_total", {"reason": "too_large"}) == len(plain)
    assert "without otelloop's events and attributes" in o.stderr
