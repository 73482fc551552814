"""``otelloop serve`` end to end: real OTel SDK exporters → otelloop (subprocess) → real sinks on 127.0.0.1."""

from __future__ import annotations

import gzip
import json
import signal
import socket
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from served import BackgroundLoop, Served, free_port, http_call, http_response, wait_for
from sinks import GrpcSink, HttpSink
from spans import attrs_of, parse, request, span, tool_span

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

#: The tests marked with it run with either setting of ``receiver.acknowledge``: a client answered on
#: receipt sees the same service as one answered once its request is processed.
BOTH_ACKNOWLEDGEMENTS = pytest.mark.parametrize("acknowledge", ["processed", "received"])
PROTOBUF = {"Content-Type": "application/x-protobuf"}


def delivered_spans(sink: Any) -> list[Any]:
    return [s for data in list(sink.delivered) for s in parse(data)]


def grpc_export(target: str, data: bytes, metadata: tuple = (), timeout: float = 10) -> None:
    with grpc.insecure_channel(target) as ch:
        ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)(
            data, timeout=timeout, metadata=metadata)


def grpc_error(target: str, data: bytes, **kw: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as e:
        grpc_export(target, data, **kw)
    return e.value


def sdk_provider(transport: str, endpoint: str, service: str):  # type: ignore[no-untyped-def]
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if transport == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter
        exporter = HTTPExporter(endpoint=f"http://{endpoint}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64))
    return provider


@BOTH_ACKNOWLEDGEMENTS
@pytest.mark.parametrize("client", ["grpc", "http"])
@pytest.mark.parametrize("upstream", ["grpc", "http"])
def test_sdk_exporters_through_otelloop_deliver_every_span(serve: Any, grpc_sink: GrpcSink, http_sink: HttpSink,
                                                          client: str, upstream: str, acknowledge: str) -> None:
    sink = grpc_sink if upstream == "grpc" else http_sink
    url = f"grpc://127.0.0.1:{grpc_sink.port}" if upstream == "grpc" else f"http://127.0.0.1:{http_sink.port}"
    o = serve({"exporter": {"endpoint": url, "compression": "gzip"}, "receiver": {"acknowledge": acknowledge}})
    provider = sdk_provider(client, o.grpc if client == "grpc" else o.http, "e2e-agent")
    tracer = provider.get_tracer("e2e")
    sent: set[str] = set()
    for i in range(120):
        with tracer.start_as_current_span("invoke_agent" if i % 4 == 0 else "execute_tool search_web") as sp:
            if i % 4 == 0:
                sp.set_attribute("gen_ai.operation.name", "invoke_agent")
            elif i % 4 == 3:
                sp.set_attribute("http.method", "GET")  # not an agent step
            else:
                sp.set_attribute("gen_ai.operation.name", "execute_tool")
                sp.set_attribute("gen_ai.tool.name", "search_web")
                sp.set_attribute("gen_ai.tool.call.arguments", json.dumps({"q": i % 3}))
            sent.add(format(sp.get_span_context().span_id, "016x"))
    provider.force_flush()
    provider.shutdown()
    wait_for(lambda: {s.span_id.hex() for s in delivered_spans(sink)} >= sent, what="every span at the sink")
    got = delivered_spans(sink)
    assert len(got) == len(sent)
    for s in got:
        a = attrs_of(s)
        assert ("otelloop.verdict" in a) == ("http.method" not in a)
    assert o.metric("otelloop_spans_received_total", {"transport": client}) == 120
    wait_for(lambda: o.metric("otelloop_spans_exported_total") == 120, what="exported counter")


@BOTH_ACKNOWLEDGEMENTS
@pytest.mark.parametrize("client", ["grpc", "http"])
def test_unchanged_requests_arrive_byte_identical(serve: Any, grpc_sink: GrpcSink, client: str,
                                                  acknowledge: str) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}", "compression": "none"},
               "receiver": {"acknowledge": acknowledge}})
    data = request(span("GET /health", {"http.method": "GET"}), span("SELECT", {"db.system": "postgresql"}))
    if client == "grpc":
        grpc_export(o.grpc, data)
    else:
        assert http_call("POST", f"http://{o.http}/v1/traces", data, PROTOBUF)[0] == 200
    wait_for(lambda: len(grpc_sink.delivered) == 1, what="delivery")
    assert grpc_sink.delivered[0] == data


def test_otlp_json_with_hex_ids_and_gzip_both_ways(serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"}})
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "j"}}]},
                              "scopeSpans": [{"spans": [{
                                  "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
                                  "name": "execute_tool search_web", "kind": 1,
                                  "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
                                  "attributes": [{"key": "gen_ai.tool.name", "value": {"stringValue": "search_web"}}],
                              }]}]}]}
    status, headers, body = http_response(
        "POST", f"http://{o.http}/v1/traces", gzip.compress(json.dumps(doc).encode()),
        {"Content-Type": "application/json", "Content-Encoding": "gzip", "Accept-Encoding": "gzip"})
    assert status == 200 and headers.get("Content-Encoding") == "gzip"
    assert json.loads(gzip.decompress(body)) == {}
    wait_for(lambda: len(grpc_sink.delivered) == 1, what="delivery")
    got = delivered_spans(grpc_sink)[0]
    assert got.trace_id.hex() == "5b8efff798038103d269b633813fc60c" and got.span_id.hex() == "eee19b7ec3c1b174"
    assert attrs_of(got)["otelloop.verdict"] == "continue"


def _status(body: bytes, content_type: str = "protobuf") -> status_pb2.Status:
    if content_type == "json":
        from google.protobuf import json_format
        return json_format.Parse(body, status_pb2.Status())
    return status_pb2.Status.FromString(body)


@BOTH_ACKNOWLEDGEMENTS
def test_bad_input_gets_clear_errors_and_the_service_stays_healthy(serve: Any, grpc_sink: GrpcSink,
                                                                   acknowledge: str) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"},
               "receiver": {"grpc": {"max_request_mib": 1}, "http": {"max_request_mib": 1},
                            "acknowledge": acknowledge}})
    url = f"http://{o.http}/v1/traces"
    # malformed protobuf
    err = grpc_error(o.grpc, b"\x0a\xff\xff\xff\xff\x0f")
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "cannot decode" in err.details()
    code, body = http_call("POST", url, b"\x0a\xff\xff\xff\xff\x0f", PROTOBUF)
    assert code == 400 and "cannot decode" in _status(body).message and _status(body).code == 3
    # malformed JSON, wrong ids
    code, body = http_call("POST", url, b'{"resourceSpans": [', {"Content-Type": "application/json"})
    assert code == 400 and "not valid JSON" in _status(body, "json").message
    # wrong content type and encoding
    assert http_call("POST", url, b"x", {"Content-Type": "text/plain"})[0] == 415
    assert http_call("POST", url, b"x", {**PROTOBUF, "Content-Encoding": "br"})[0] == 415
    # oversize: 2 MiB against a 1 MiB limit
    big = request(tool_span(args=json.dumps({"blob": "x" * (2 << 20)})))
    err = grpc_error(o.grpc, big)
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert http_call("POST", url, big, PROTOBUF)[0] == 413
    # gzip bomb: 512 MiB of zeros in ~0.5 MiB, must be cut off at 1 MiB
    bomb = gzip.compress(b"\x00" * (512 << 20), compresslevel=9)
    rss_before = o.rss_mib()
    code, body = http_call("POST", url, bomb, {**PROTOBUF, "Content-Encoding": "gzip"})
    assert code == 413 and "after decompression" in _status(body).message
    assert o.rss_mib() < rss_before + 64
    # the service is still healthy and still accepts good data
    assert o.get("/healthz")[0] == 200 and o.get("/readyz")[0] == 200
    grpc_export(o.grpc, request(tool_span()))
    wait_for(lambda: len(grpc_sink.delivered) == 1, what="good request delivered")
    assert o.metric("otelloop_spans_refused_total", {"transport": "http", "reason": "invalid"}) == 2
    assert o.metric("otelloop_spans_refused_total", {"transport": "grpc", "reason": "invalid"}) == 1
    assert o.metric("otelloop_spans_refused_total", {"transport": "http", "reason": "too_large"}) == 2


def test_wrong_attribute_types_are_counted_not_fatal(serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"}})
    grpc_export(o.grpc, request(span("chat", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": "lots",
                                              "gen_ai.usage.output_tokens": float("nan"),
                                              "gen_ai.usage.cost": -4.0})))
    wait_for(lambda: len(grpc_sink.delivered) == 1, what="delivery")
    assert o.metric("otelloop_mapping_errors_total", {"field": "input_tokens"}) == 1
    assert o.metric("otelloop_mapping_errors_total", {"field": "output_tokens"}) == 1
    assert o.metric("otelloop_mapping_errors_total", {"field": "cost"}) == 1


def _fill_until_refused(o: Served, batch: int, trace_base: int) -> tuple[list[str], grpc.RpcError, Any]:
    """Send batches until both receivers push back; returns accepted span ids and the two refusals."""
    accepted: list[str] = []
    grpc_refusal = http_refusal = None
    for n in range(1000):
        spans = [tool_span(trace=trace_base + n, i=k) for k in range(batch)]
        data = request(*spans)
        if grpc_refusal is None:
            try:
                grpc_export(o.grpc, data)
                accepted += [s.span_id.hex() for s in spans]
                continue
            except grpc.RpcError as e:
                grpc_refusal = e
        status, headers, body = http_response("POST", f"http://{o.http}/v1/traces", data, PROTOBUF)
        if status == 200:
            accepted += [s.span_id.hex() for s in spans]
        else:
            http_refusal = (status, headers, body)
            break
    assert grpc_refusal is not None and http_refusal is not None
    return accepted, grpc_refusal, http_refusal


@BOTH_ACKNOWLEDGEMENTS
def test_upstream_down_then_back_loses_nothing_accepted(serve: Any, loop: BackgroundLoop, acknowledge: str) -> None:
    port = free_port()
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{port}", "queue_spans": 500,
                            "retry_initial_interval": "50ms", "retry_max_interval": "200ms", "timeout": "2s"},
               "receiver": {"acknowledge": acknowledge}})
    accepted, grpc_refusal, (status, headers, _body) = _fill_until_refused(o, 50, 1 << 40)
    assert grpc_refusal.code() == grpc.StatusCode.UNAVAILABLE
    trailers = dict(grpc_refusal.trailing_metadata() or ())
    assert error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]).retry_delay.seconds >= 1
    details = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert details.details[0].Is(error_details_pb2.RetryInfo.DESCRIPTOR)
    assert status == 503 and int(headers["Retry-After"]) >= 1
    assert 400 <= len(accepted) <= 550
    assert o.metric("otelloop_spans_refused_total", {"transport": "grpc", "reason": "backpressure"}) == 50
    sink = loop.run(GrpcSink(port=port).start())
    try:
        wait_for(lambda: {s.span_id.hex() for s in delivered_spans(sink)} >= set(accepted), timeout=30,
                 what="every accepted span after recovery")
        assert o.get("/readyz")[0] == 200
    finally:
        loop.run(sink.stop())


@BOTH_ACKNOWLEDGEMENTS
def test_sigterm_with_a_full_queue_drains_it(serve: Any, loop: BackgroundLoop, acknowledge: str) -> None:
    port = free_port()
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{port}", "queue_spans": 400,
                            "retry_initial_interval": "50ms", "retry_max_interval": "100ms",
                            "shutdown_grace": "20s"}, "receiver": {"acknowledge": acknowledge}})
    accepted, _, _ = _fill_until_refused(o, 40, 1 << 41)
    sink = loop.run(GrpcSink(port=port).start())
    try:
        o.signal(signal.SIGTERM)
        assert o.proc.wait(30) == 0
        assert {s.span_id.hex() for s in delivered_spans(sink)} >= set(accepted)
    finally:
        loop.run(sink.stop())


@BOTH_ACKNOWLEDGEMENTS
def test_sigterm_exits_as_soon_as_the_queue_is_delivered(serve: Any, grpc_sink: GrpcSink, acknowledge: str) -> None:
    """The grace period bounds the drain, it is not waited out: with the upstream answering, SIGTERM ends
    the process once every accepted span is delivered (well inside a 60 s grace; the margin is generous).
    Answered on receipt, the request is processed first."""
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}", "shutdown_grace": "60s"},
               "receiver": {"acknowledge": acknowledge}})
    sent = [tool_span(trace=91, i=i) for i in range(20)]
    grpc_export(o.grpc, request(*sent))
    o.signal(signal.SIGTERM)
    assert o.proc.wait(20) == 0
    assert {s.span_id for s in delivered_spans(grpc_sink)} >= {s.span_id for s in sent}
    assert "otelloop stopped" in o.stderr and "could not be delivered" not in o.stderr


def test_detect_only_mode_prints_findings(serve: Any) -> None:
    o = serve({})
    grpc_export(o.grpc, request(*[tool_span(trace=77, i=i) for i in range(4)]))
    wait_for(lambda: "divergence_suspected" in o.stderr, what="finding on stderr")
    line = next(x for x in o.stderr.splitlines() if "divergence_suspected" in x)
    assert "[warn]" in line and format(77, "032x") in line and "search_web" in line


def test_sighup_reload_applies_valid_and_rejects_invalid(serve: Any) -> None:
    o = serve({"detectors": {"entropy": {"loop_threshold": 0.25}}})
    o.write_config({"detectors": {"entropy": {"loop_threshold": 0.45}}})
    o.signal(signal.SIGHUP)
    wait_for(lambda: o.metric("otelloop_config_reloads_total", {"outcome": "applied"}) == 1, what="reload applied")
    o.write_config({"detectors": {"entropy": {"loop_threshold": "high"}}})
    o.signal(signal.SIGHUP)
    wait_for(lambda: o.metric("otelloop_config_reloads_total", {"outcome": "rejected"}) == 1, what="reload rejected")
    assert "detectors.entropy.loop_threshold" in o.stderr
    # processing never stopped, and the applied value (0.45) is still the one in force: 4-of-5 identical → LOOP
    steps = [tool_span(trace=55, i=i) for i in range(4)] + [tool_span("other", trace=55, i=4)]
    grpc_export(o.grpc, request(*steps))
    wait_for(lambda: "entropy_alert" in o.stderr, what="entropy alert under the reloaded threshold")


def test_ready_file_has_the_bound_addresses(serve: Any) -> None:
    o = serve({})
    for key in ("grpc", "http", "admin"):
        host, port = o.addresses[key].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
    assert json.loads(o.get("/healthz")[1]) == {"status": "ok"}
    assert "otelloop_build_info" in o.get("/metrics")[1].decode()


def test_invalid_config_fails_before_any_port_opens(tmp_path: Path) -> None:
    import subprocess
    import sys

    cfg = tmp_path / "bad.yaml"
    cfg.write_text("state: {max_sessions: lots}\n")
    port = free_port()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "otelloop", "serve", "--config", str(cfg), "--grpc-endpoint",
                           f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and 'state.max_sessions: must be an integer >= 1, got "lots"' in proc.stderr
    assert time.monotonic() - started < 30
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # the port was never taken



def test_bound_addresses_write_an_ipv6_host_in_brackets() -> None:
    """The ready file's addresses are what a client dials: ``[::1]:4317``, not ``::1:4317``."""
    from otelloop.service import _address

    assert _address("[::1]:0", 4317) == "[::1]:4317"
    assert _address("[::]:0", 9464) == "[::]:9464"
    assert _address("127.0.0.1:0", 4318) == "127.0.0.1:4318"
    assert _address("localhost:0", 4318) == "localhost:4318"
