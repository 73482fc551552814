"""The admission path in process: large requests in slices, sessions kept in order, room reserved."""

from __future__ import annotations

import asyncio

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from spans import request, tool_span

from otelloop.config import build_config
from otelloop.export import build_exporter
from otelloop.pipeline import CHUNK_BYTES, Pipeline
from otelloop.receiver.ingest import Ingest, Refusal

T0 = 1_700_000_000_000_000_000


def identical(n: int, trace: int) -> bytes:
    req = ExportTraceServiceRequest()
    ss = req.resource_spans.add().scope_spans.add()
    attribute = KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file"))
    for i in range(n):
        span = ss.spans.add(trace_id=trace.to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                            name="read_file", start_time_unix_nano=T0 + i)
        span.attributes.append(attribute)
    return req.SerializeToString()


async def test_a_request_of_a_session_in_processing_waits_others_do_not() -> None:
    pipeline = Pipeline()
    ingest = Ingest(pipeline, None, pipeline.metrics)
    big = identical(20_000, trace=7)
    assert len(big) > CHUNK_BYTES
    done: list[str] = []

    async def send(name: str, data: bytes) -> None:
        await ingest.handle(data, "grpc")
        done.append(name)

    first = asyncio.create_task(send("big", big))
    while not ingest.gate.busy:  # the large request is decoded and is being processed in slices
        await asyncio.sleep(0)
    same = asyncio.create_task(send("same session", request(tool_span(trace=7, i=10**6))))
    other = asyncio.create_task(send("other session", request(tool_span(trace=8))))
    await asyncio.gather(first, same, other)
    assert done == ["other session", "big", "same session"]
    assert pipeline.store.get(f"{7:032x}").steps == 20_001
    assert not ingest.gate.busy


async def test_room_reserved_for_a_request_in_processing_is_not_given_to_others() -> None:
    cfg = build_config({"exporter": {"endpoint": "grpc://127.0.0.1:9", "queue_spans": 25_000}}, env={})
    pipeline = Pipeline(cfg)
    exporter = build_exporter(cfg.exporter, pipeline.metrics)
    assert exporter is not None  # not started: what is queued stays queued
    ingest = Ingest(pipeline, exporter, pipeline.metrics)
    exporter.offer(request(tool_span(trace=1)), 1)  # the queue is not empty, so its bound applies
    first = asyncio.create_task(ingest.handle(identical(20_000, trace=7), "grpc"))
    while not ingest.gate.busy:
        await asyncio.sleep(0)
    try:
        await ingest.handle(identical(6_000, trace=9), "grpc")
        refused = None
    except Refusal as r:
        refused = r
    assert refused is not None and refused.reason == "backpressure", "20,001 queued/reserved + 6,000 > 25,000"
    await ingest.handle(request(*[tool_span(trace=10, i=i) for i in range(100)]), "grpc")
    assert (await first).spans == 20_000
    assert exporter.queued_spans == 1 + 20_000 + 100
    await exporter.shutdown(0)


async def test_a_request_over_the_in_flight_budget_is_refused_retryably_before_any_state_changes() -> None:
    """While other requests hold the budget, a new one is refused (backpressure) before it is decoded: no
    session sees it. Alone in flight it is taken, and every byte charged is given back afterwards."""
    from otelloop.resources import InFlight

    pipeline = Pipeline()
    in_flight = InFlight(lambda: 64 << 10)
    ingest = Ingest(pipeline, None, pipeline.metrics, in_flight=in_flight)
    data = request(*[tool_span(trace=21, i=i, attrs={"app.payload": "x" * 4096}) for i in range(4)])
    other = in_flight.ticket()
    assert other.add(60 << 10)  # another request being received
    try:
        await ingest.handle(data, "grpc")
        refused = None
    except Refusal as r:
        refused = r
    assert refused is not None and refused.reason == "backpressure"
    assert len(pipeline.store) == 0 and in_flight.nbytes == 60 << 10
    other.close()
    assert (await ingest.handle(data, "grpc")).spans == 4
    assert pipeline.store.get(f"{21:032x}").steps == 4
    assert in_flight.nbytes == 0


async def test_a_request_processed_in_slices_holds_its_bytes_until_it_is_done() -> None:
    from otelloop.resources import InFlight

    pipeline = Pipeline()
    in_flight = InFlight(lambda: 1 << 30)
    ingest = Ingest(pipeline, None, pipeline.metrics, in_flight=in_flight)
    big = identical(20_000, trace=7)
    task = asyncio.create_task(ingest.handle(big, "grpc"))
    while not ingest.gate.busy:
        await asyncio.sleep(0)
    assert in_flight.nbytes >= 3 * len(big)  # the request, its decoded chunks and its enriched parts
    await task
    assert in_flight.nbytes == 0
