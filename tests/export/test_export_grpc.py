"""The exporter against a real OTLP/gRPC sink on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from sinks import (
    OK,
    GrpcSink,
    MakeExporter,
    Reply,
    exporter_config,
    free_port,
    make_request,
    retryable_attempts,
    sample,
    span_names,
    wait_until,
)

from otelloop.telemetry import Metrics


def endpoint(sink: GrpcSink) -> str:
    return f"127.0.0.1:{sink.port}"


async def test_lone_request_arrives_byte_identical_with_headers(grpc_sink: GrpcSink, metrics: Metrics,
                                                                 make_exporter: MakeExporter) -> None:
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink), headers={"X-API-Key": "secret-1"}))
    data = make_request(3, "a")
    assert exporter.offer(data, 3)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert grpc_sink.delivered == [data]
    assert grpc_sink.attempts[0].headers["x-api-key"] == "secret-1"
    assert sample(metrics, "otelloop_spans_exported_total") == 3
    assert sample(metrics, "otelloop_export_queue_spans") == 0
    assert sample(metrics, "otelloop_export_queue_capacity_spans") == exporter.capacity_spans
    assert sample(metrics, "otelloop_export_duration_seconds_count", outcome="success") == 1


async def test_upstream_down_then_started_delivers_everything(metrics: Metrics,
                                                              make_exporter: MakeExporter) -> None:
    sink = GrpcSink(port=free_port())
    exporter = await make_exporter(exporter_config(f"grpc://127.0.0.1:{sink.port}"))
    offered = [make_request(2, f"r{i}") for i in range(5)]
    for data in offered:
        assert exporter.offer(data, 2)
    await wait_until(lambda: retryable_attempts(metrics) >= 2)
    assert exporter.queued_spans == 10
    await sink.start()
    try:
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sink.delivered_names() == [n for data in offered for n in span_names(data)]
        assert sample(metrics, "otelloop_spans_exported_total") == 10
        assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 0
    finally:
        await sink.stop()


async def test_upstream_stopped_and_restarted_loses_nothing(metrics: Metrics,
                                                            make_exporter: MakeExporter) -> None:
    sink = await GrpcSink().start()
    exporter = await make_exporter(exporter_config(endpoint(sink)))
    exporter.offer(make_request(1, "before"), 1)
    await wait_until(lambda: exporter.queued_spans == 0)
    await sink.stop()
    for i in range(4):
        assert exporter.offer(make_request(1, f"during{i}"), 1)
    await wait_until(lambda: retryable_attempts(metrics) >= 2)
    restarted = await GrpcSink(port=sink.port).start()
    try:
        await wait_until(lambda: exporter.queued_spans == 0)
        names = restarted.delivered_names()
        assert set(names) == {f"during{i}-0" for i in range(4)}
        assert sample(metrics, "otelloop_spans_exported_total") == 5
    finally:
        await restarted.stop()


async def test_queue_full_refuses_and_never_exceeds_capacity(metrics: Metrics,
                                                             make_exporter: MakeExporter) -> None:
    sink = GrpcSink(port=free_port())
    exporter = await make_exporter(exporter_config(f"127.0.0.1:{sink.port}", queue_spans=10))
    results = []
    for i in range(8):
        results.append(exporter.offer(make_request(3, f"r{i}"), 3))
        assert exporter.queued_spans <= exporter.capacity_spans
        assert sample(metrics, "otelloop_export_queue_spans") == exporter.queued_spans
    assert results == [True, True, True] + [False] * 5
    assert exporter.offer(make_request(1, "fits"), 1)
    assert not exporter.offer(make_request(1, "full"), 1)
    await sink.start()
    try:
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sample(metrics, "otelloop_spans_exported_total") == 10
        assert exporter.offer(make_request(3, "again"), 3)
    finally:
        await sink.stop()


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED])
@pytest.mark.parametrize("trailers", [("status",), ("bare",)])
async def test_retry_info_delay_is_honoured(grpc_sink: GrpcSink, metrics: Metrics,
                                            make_exporter: MakeExporter, code: grpc.StatusCode,
                                            trailers: tuple[str, ...]) -> None:
    grpc_sink.replies = [Reply(code=code, message="busy", retry_delay=0.3, trailers=trailers)]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink)))
    exporter.offer(make_request(2, "a"), 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    first, second = grpc_sink.attempts
    assert second.at - first.at >= 0.28
    assert sample(metrics, "otelloop_spans_exported_total") == 2


async def test_resource_exhausted_without_retry_info_is_dropped(grpc_sink: GrpcSink, metrics: Metrics,
                                                                make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(code=grpc.StatusCode.RESOURCE_EXHAUSTED, message="too big")]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink)))
    exporter.offer(make_request(4, "a"), 4)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert len(grpc_sink.attempts) == 1
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 4


async def test_invalid_argument_is_dropped_counted_and_logged_once(
        grpc_sink: GrpcSink, metrics: Metrics, make_exporter: MakeExporter,
        caplog: pytest.LogCaptureFixture) -> None:
    grpc_sink.replies = [Reply(code=grpc.StatusCode.INVALID_ARGUMENT, message="span 7 has no trace id")]
    cfg = exporter_config(endpoint(grpc_sink), headers={"authorization": "Bearer s3cr3t"})
    exporter = await make_exporter(cfg)
    with caplog.at_level(logging.INFO, logger="otelloop.export"):
        exporter.offer(make_request(5, "bad"), 5)
        await wait_until(lambda: exporter.queued_spans == 0)
        await asyncio.sleep(0.2)
    assert len(grpc_sink.attempts) == 1
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 5
    assert sample(metrics, "otelloop_spans_exported_total") == 0
    drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 1 and "INVALID_ARGUMENT" in drops[0] and "span 7 has no trace id" in drops[0]
    assert "s3cr3t" not in caplog.text


async def test_rejected_coalesced_batch_drops_only_the_bad_request(grpc_sink: GrpcSink, metrics: Metrics,
                                                                   make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(sleep=0.2), Reply(code=grpc.StatusCode.INVALID_ARGUMENT, message="bad"), OK,
                         Reply(code=grpc.StatusCode.INVALID_ARGUMENT, message="bad")]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink)))
    exporter.offer(make_request(1, "first"), 1)
    await wait_until(lambda: len(grpc_sink.attempts) == 1)
    for tag, spans in (("good", 2), ("bad", 3), ("later", 4)):
        exporter.offer(make_request(spans, tag), spans)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert [len(span_names(a.data)) for a in grpc_sink.attempts] == [1, 9, 2, 3, 4]
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 3
    assert sample(metrics, "otelloop_spans_exported_total") == 7
    assert grpc_sink.delivered_names() == ["first-0", "good-0", "good-1"] + [f"later-{i}" for i in range(4)]


async def test_partial_success_is_not_retried_and_counts_split(grpc_sink: GrpcSink, metrics: Metrics,
                                                               make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(rejected=2, warning="2 spans too old")]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink)))
    exporter.offer(make_request(5, "a"), 5)
    await wait_until(lambda: exporter.queued_spans == 0)
    await asyncio.sleep(0.1)
    assert len(grpc_sink.attempts) == 1
    assert sample(metrics, "otelloop_spans_exported_total") == 3
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="partial_success") == 2


async def test_backlog_is_coalesced_in_order_without_loss(grpc_sink: GrpcSink, metrics: Metrics,
                                                          make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(sleep=0.3)]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink)))
    offered = [make_request(3, f"r{i}") for i in range(20)]
    exporter.offer(offered[0], 3)
    await wait_until(lambda: len(grpc_sink.attempts) == 1)
    for data in offered[1:]:
        assert exporter.offer(data, 3)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert grpc_sink.delivered[0] == offered[0]
    assert len(grpc_sink.delivered) < len(offered)
    assert grpc_sink.delivered_names() == [n for data in offered for n in span_names(data)]
    assert sample(metrics, "otelloop_spans_exported_total") == 60


async def test_coalescing_respects_max_batch_size(grpc_sink: GrpcSink, make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(sleep=0.2)]
    offered = [make_request(200, f"r{i}") for i in range(6)]
    max_mib = len(offered[0]) * 2.5 / (1024 * 1024)
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink), max_batch_mib=max_mib))
    exporter.offer(offered[0], 200)
    await wait_until(lambda: len(grpc_sink.attempts) == 1)
    for data in offered[1:]:
        exporter.offer(data, 200)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert grpc_sink.delivered == [offered[0], offered[1] + offered[2], offered[3] + offered[4], offered[5]]


async def test_slow_upstream_times_out_and_is_retried(grpc_sink: GrpcSink, metrics: Metrics,
                                                      make_exporter: MakeExporter) -> None:
    grpc_sink.replies = [Reply(sleep=1.0)]
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink), timeout=0.2))
    exporter.offer(make_request(2, "slow"), 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert len(grpc_sink.attempts) >= 2
    assert sample(metrics, "otelloop_export_duration_seconds_count", outcome="retryable") >= 1
    assert sample(metrics, "otelloop_spans_exported_total") == 2


async def test_outage_logs_once_at_start_and_once_at_recovery(grpc_sink: GrpcSink, metrics: Metrics,
                                                              make_exporter: MakeExporter,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    grpc_sink.replies = [Reply(code=grpc.StatusCode.UNAVAILABLE, message="down")] * 6
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink), retry_max_interval=0.05))
    with caplog.at_level(logging.WARNING, logger="otelloop.export"):
        exporter.offer(make_request(1, "a"), 1)
        await wait_until(lambda: exporter.queued_spans == 0)
        assert len(grpc_sink.attempts) == 7
        grpc_sink.replies = [Reply(code=grpc.StatusCode.UNAVAILABLE, message="blip")]
        exporter.offer(make_request(1, "b"), 1)
        await wait_until(lambda: exporter.queued_spans == 0)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, "a brief second interruption right after the first is not logged"
    assert "unavailable (UNAVAILABLE: down)" in lines[0] and "recovered" in lines[1]
    assert sample(metrics, "otelloop_spans_exported_total") == 2


async def test_queued_request_over_the_size_limit_is_sent_in_parts(grpc_sink: GrpcSink, metrics: Metrics,
                                                                   make_exporter: MakeExporter) -> None:
    """What a persistent queue written by an earlier version (or under a larger bound) holds is cut to the
    bound before sending; a span too large even alone is dropped, counted as too_large."""
    exporter = await make_exporter(exporter_config(endpoint(grpc_sink), max_request_mib=400 / (1 << 20)))
    exporter.offer(make_request(50, "huge"), 50)
    exporter.offer(make_request(1, "x" * 500), 1)
    exporter.offer(make_request(1, "small"), 1)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert grpc_sink.delivered_names() == [f"huge-{i}" for i in range(50)] + ["small-0"]
    assert max(len(a.data) for a in grpc_sink.attempts) <= 400
    assert sample(metrics, "otelloop_spans_exported_total") == 51
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="too_large") == 1


async def test_upstream_refusing_a_request_for_its_size_gets_it_in_halves(
        metrics: Metrics, make_exporter: MakeExporter) -> None:
    """An upstream whose limit is below exporter.max_request_mib says so; nothing acknowledged is lost."""
    sink = await GrpcSink(max_receive_bytes=100).start()
    try:
        exporter = await make_exporter(exporter_config(endpoint(sink)))
        exporter.offer(make_request(8, "h"), 8)
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sink.delivered_names() == [f"h-{i}" for i in range(8)]
        assert max(len(data) for data in sink.delivered) <= 100
        assert sample(metrics, "otelloop_spans_exported_total") == 8
    finally:
        await sink.stop()
