"""The exporter against a real OTLP/HTTP sink on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gzip
import logging
import os

import pytest
from sinks import (
    HttpSink,
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


async def test_lone_request_arrives_byte_identical(http_sink: HttpSink, metrics: Metrics,
                                                   make_exporter: MakeExporter) -> None:
    exporter = await make_exporter(exporter_config(http_sink.url, compression="none",
                                                   headers={"Authorization": "Bearer secret-2"}))
    data = make_request(3, "a")
    assert exporter.offer(data, 3)
    await wait_until(lambda: exporter.queued_spans == 0)
    attempt, = http_sink.attempts
    assert attempt.data == data
    assert attempt.headers["Content-Type"] == "application/x-protobuf"
    assert "Content-Encoding" not in attempt.headers
    assert attempt.headers["Authorization"] == "Bearer secret-2"
    assert sample(metrics, "otelloop_spans_exported_total") == 3


async def test_gzip_reaches_the_sink_and_decodes(http_sink: HttpSink, make_exporter: MakeExporter) -> None:
    exporter = await make_exporter(exporter_config(http_sink.url + "/v1/traces", compression="gzip"))
    data = make_request(50, "zipped")
    exporter.offer(data, 50)
    await wait_until(lambda: exporter.queued_spans == 0)
    attempt, = http_sink.attempts
    assert attempt.headers["Content-Encoding"] == "gzip"
    assert attempt.data != data and gzip.decompress(attempt.data) == data


async def test_upstream_down_then_started_delivers_everything(metrics: Metrics,
                                                              make_exporter: MakeExporter) -> None:
    sink = HttpSink(port=free_port())
    exporter = await make_exporter(exporter_config(sink.url))
    offered = [make_request(2, f"r{i}") for i in range(5)]
    for data in offered:
        assert exporter.offer(data, 2)
    await wait_until(lambda: retryable_attempts(metrics) >= 2)
    await sink.start()
    try:
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sink.delivered_names() == [n for data in offered for n in span_names(data)]
        assert sample(metrics, "otelloop_spans_exported_total") == 10
    finally:
        await sink.stop()


async def test_retry_after_is_honoured(http_sink: HttpSink, metrics: Metrics,
                                       make_exporter: MakeExporter) -> None:
    http_sink.replies = [Reply(status=429, retry_after="1", message="slow down")]
    exporter = await make_exporter(exporter_config(http_sink.url))
    exporter.offer(make_request(2, "a"), 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    first, second = http_sink.attempts
    assert second.at - first.at >= 0.95
    assert sample(metrics, "otelloop_spans_exported_total") == 2


@pytest.mark.parametrize("status", [429, 502, 503, 504])
async def test_retryable_statuses_are_retried(http_sink: HttpSink, metrics: Metrics,
                                              make_exporter: MakeExporter, status: int) -> None:
    http_sink.replies = [Reply(status=status), Reply(status=status)]
    exporter = await make_exporter(exporter_config(http_sink.url))
    exporter.offer(make_request(2, "a"), 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert len(http_sink.attempts) == 3
    assert sample(metrics, "otelloop_export_duration_seconds_count", outcome="retryable") == 2
    assert sample(metrics, "otelloop_spans_exported_total") == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 500])
async def test_other_statuses_drop_the_request_after_one_attempt(
        http_sink: HttpSink, metrics: Metrics, make_exporter: MakeExporter, caplog: pytest.LogCaptureFixture,
        status: int) -> None:
    http_sink.replies = [Reply(status=status, message="trace id must be 16 bytes")]
    exporter = await make_exporter(exporter_config(http_sink.url, headers={"x-api-key": "s3cr3t"}))
    with caplog.at_level(logging.INFO, logger="otelloop.export"):
        exporter.offer(make_request(4, "bad"), 4)
        await wait_until(lambda: exporter.queued_spans == 0)
        await asyncio.sleep(0.2)
    assert len(http_sink.attempts) == 1
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="rejected") == 4
    assert sample(metrics, "otelloop_export_duration_seconds_count", outcome="permanent") == 1
    drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(drops) == 1 and f"HTTP {status}" in drops[0] and "trace id must be 16 bytes" in drops[0]
    assert "s3cr3t" not in caplog.text


@pytest.mark.parametrize("compression", ["none", "gzip"])
async def test_413_gets_the_request_again_in_halves(metrics: Metrics, make_exporter: MakeExporter,
                                                    compression: str) -> None:
    """An upstream whose body limit is below exporter.max_request_mib answers 413 ("Payload Too Large"):
    the request is sent again in halves until the parts pass, so nothing acknowledged is lost."""
    sink = await HttpSink(max_body_bytes=120).start()
    try:
        exporter = await make_exporter(exporter_config(sink.url, compression=compression))
        tags = [os.urandom(12).hex() for _ in range(8)]  # hardly compressible, so gzip stays over the limit
        exporter.offer(b"".join(make_request(1, tag) for tag in tags), 8)
        await wait_until(lambda: exporter.queued_spans == 0)
        assert sink.too_large >= 1
        assert sink.delivered_names() == [f"{tag}-0" for tag in tags]
        assert sample(metrics, "otelloop_spans_exported_total") == 8
    finally:
        await sink.stop()


async def test_partial_success_is_not_retried_and_counts_split(http_sink: HttpSink, metrics: Metrics,
                                                               make_exporter: MakeExporter,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    http_sink.replies = [Reply(rejected=1, warning="1 span has an invalid kind")]
    exporter = await make_exporter(exporter_config(http_sink.url))
    with caplog.at_level(logging.WARNING, logger="otelloop.export"):
        exporter.offer(make_request(4, "a"), 4)
        await wait_until(lambda: exporter.queued_spans == 0)
        await asyncio.sleep(0.1)
    assert len(http_sink.attempts) == 1
    assert sample(metrics, "otelloop_spans_exported_total") == 3
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="partial_success") == 1
    assert "1 span has an invalid kind" in caplog.text


async def test_warning_without_rejections_counts_everything_exported(http_sink: HttpSink, metrics: Metrics,
                                                                     make_exporter: MakeExporter) -> None:
    http_sink.replies = [Reply(warning="deprecated attribute")]
    exporter = await make_exporter(exporter_config(http_sink.url))
    exporter.offer(make_request(4, "a"), 4)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert sample(metrics, "otelloop_spans_exported_total") == 4
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="partial_success") == 0


async def test_backlog_is_coalesced_in_order_without_loss(http_sink: HttpSink, metrics: Metrics,
                                                          make_exporter: MakeExporter) -> None:
    http_sink.replies = [Reply(sleep=0.3)]
    exporter = await make_exporter(exporter_config(http_sink.url))
    offered = [make_request(2, f"r{i}") for i in range(15)]
    exporter.offer(offered[0], 2)
    await wait_until(lambda: len(http_sink.attempts) == 1)
    for data in offered[1:]:
        assert exporter.offer(data, 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert len(http_sink.delivered) == 2
    assert http_sink.delivered[1] == b"".join(offered[1:])
    assert http_sink.delivered_names() == [n for data in offered for n in span_names(data)]
    assert sample(metrics, "otelloop_spans_exported_total") == 30


async def test_slow_upstream_times_out_and_is_retried(http_sink: HttpSink, metrics: Metrics,
                                                      make_exporter: MakeExporter) -> None:
    http_sink.replies = [Reply(sleep=1.0)]
    exporter = await make_exporter(exporter_config(http_sink.url, timeout=0.2))
    exporter.offer(make_request(2, "slow"), 2)
    await wait_until(lambda: exporter.queued_spans == 0)
    assert len(http_sink.attempts) >= 2
    assert sample(metrics, "otelloop_export_duration_seconds_count", outcome="retryable") >= 1
    assert sample(metrics, "otelloop_spans_exported_total") == 2
