"""Building the exporter, and graceful shutdown: drain within the grace, count what is left."""

from __future__ import annotations

import time

from sinks import (
    GrpcSink,
    HttpSink,
    MakeExporter,
    Reply,
    exporter_config,
    free_port,
    make_request,
    sample,
    span_names,
)

from otelloop.config import build_config
from otelloop.export import build_exporter
from otelloop.export.grpc import GrpcClient
from otelloop.export.http import HttpClient
from otelloop.telemetry import Metrics


def test_no_endpoint_means_no_exporter(metrics: Metrics) -> None:
    assert build_exporter(build_config({"exporter": {}}, env={}).exporter, metrics) is None


def test_protocol_and_log_name_follow_the_endpoint(metrics: Metrics) -> None:
    cases = {"127.0.0.1:4317": GrpcClient, "grpcs://otlp.example:443": GrpcClient,
             "http://127.0.0.1:4318": HttpClient, "https://otlp.example/api/otel/v1/traces": HttpClient}
    for endpoint, client in cases.items():
        exporter = build_exporter(exporter_config(endpoint), metrics)
        assert exporter is not None and isinstance(exporter._client, client)
    http = build_exporter(exporter_config("http://127.0.0.1:4318"), metrics)
    assert http is not None and http._client.description == "http://127.0.0.1:4318/v1/traces"
    forced = build_exporter(exporter_config("http://127.0.0.1:4318", tls={"insecure": False}), metrics)
    assert forced is not None and forced._client.description.startswith("https://")
    secret = build_exporter(exporter_config("https://user:pw@otlp.example/v1/traces?api_key=k"), metrics)
    assert secret is not None and secret._client.description == "https://otlp.example/v1/traces"
    assert sample(metrics, "otelloop_export_queue_capacity_spans") == 100_000


async def test_shutdown_drains_a_full_queue_into_a_working_sink(grpc_sink: GrpcSink, metrics: Metrics,
                                                                make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(sleep=0.2)]
    exporter = await make_exporter(exporter_config(f"127.0.0.1:{grpc_sink.port}", queue_spans=40,
                                                   max_batch_mib=0.0005))
    offered = [make_request(4, f"r{i}") for i in range(10)]
    accepted = [data for data in offered if exporter.offer(data, 4)]
    assert len(accepted) == 10 and exporter.queued_spans == 40
    assert await exporter.shutdown(5.0) == 0
    assert not exporter.offer(make_request(1, "late"), 1)
    assert grpc_sink.delivered_names() == [n for data in offered for n in span_names(data)]
    assert sample(metrics, "otelloop_spans_exported_total") == 40
    assert sample(metrics, "otelloop_export_queue_spans") == 0


async def test_shutdown_with_a_dead_sink_counts_what_is_left(metrics: Metrics,
                                                             make_exporter: MakeExporter) -> None:
    exporter = await make_exporter(exporter_config(f"http://127.0.0.1:{free_port()}"))
    for i in range(3):
        exporter.offer(make_request(5, f"r{i}"), 5)
    started = time.monotonic()
    assert await exporter.shutdown(0.3) == 15
    assert 0.25 <= time.monotonic() - started < 2.0
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="shutdown") == 15
    assert sample(metrics, "otelloop_export_queue_spans") == 0
    assert exporter.queued_spans == 0


async def test_shutdown_interrupts_a_long_server_delay(http_sink: HttpSink, metrics: Metrics,
                                                       make_exporter: MakeExporter) -> None:
    http_sink.replies = [Reply(status=503, retry_after="120")]
    exporter = await make_exporter(exporter_config(http_sink.url))
    exporter.offer(make_request(2, "a"), 2)
    started = time.monotonic()
    assert await exporter.shutdown(0.3) == 2
    assert time.monotonic() - started < 2.0
    assert len(http_sink.attempts) == 1


async def test_shutdown_before_start_counts_everything(metrics: Metrics, make_exporter: MakeExporter) -> None:
    exporter = await make_exporter(exporter_config("127.0.0.1:1"), start=False)
    exporter.offer(make_request(3, "a"), 3)
    assert await exporter.shutdown(1.0) == 3
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="shutdown") == 3
