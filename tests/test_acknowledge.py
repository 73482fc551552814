"""``receiver.acknowledge: received``: requests answered once read and checked, processed afterwards in
arrival order, with the same output as when every answer waits for processing."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from spans import parse, request, tool_span
from test_ingest import identical

from otelloop.config import ConfigError, build_config
from otelloop.export import build_exporter
from otelloop.export.exporter import Exporter
from otelloop.model import Finding, Step
from otelloop.pipeline import CHUNK_BYTES, Pipeline
from otelloop.receiver.backlog import Backlog
from otelloop.receiver.ingest import Ingest, Refusal
from otelloop.resources import InFlight

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from workload import looping_batches, realistic_pool

UPSTREAM = "grpc://127.0.0.1:9"  # never started: what is queued stays in the queue for the test to read


def service(acknowledge: str, queue_spans: int = 1_000_000, **ingest: Any) -> tuple[Pipeline, Exporter, Ingest]:
    cfg = build_config({"exporter": {"endpoint": UPSTREAM, "queue_spans": queue_spans},
                        "receiver": {"acknowledge": acknowledge}}, env={})
    pipeline = Pipeline(cfg)
    exporter = build_exporter(cfg.exporter, pipeline.metrics)
    assert exporter is not None
    return pipeline, exporter, Ingest(pipeline, exporter, pipeline.metrics, acknowledge=cfg.acknowledge, **ingest)


def queued(exporter: Exporter) -> list[bytes]:
    return [data for data, _ in exporter._queue._items]  # type: ignore[attr-defined]


def outcome(pipeline: Pipeline, exporter: Exporter, findings: list[tuple[str, str, str]]) -> dict[str, Any]:
    sessions = {s.id: (s.verdict, s.reason, s.steps, s.votes) for s in pipeline.store}
    return {"forwarded": b"".join(queued(exporter)), "findings": findings, "sessions": sessions}


async def run_both(batches: list[bytes]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every batch through a service of each mode (received: all sent before any is processed)."""
    out = []
    for mode in ("processed", "received"):
        pipeline, exporter, ingest = service(mode)
        seen: list[tuple[str, str, str]] = []

        def sink(step: Step, finding: Finding, seen: list[tuple[str, str, str]] = seen) -> None:
            seen.append((step.session, step.span_id, finding.event))

        pipeline.finding_sinks.append(sink)
        answers = [await ingest.handle(b, "grpc") for b in batches]
        assert [a.spans for a in answers] == [len(parse(b)) for b in batches]
        if mode == "received":
            assert len(ingest.backlog or ()) > 0, "answered before processing"
        await ingest.wait_idle(60)
        out.append(outcome(pipeline, exporter, seen))
        await exporter.shutdown(0)
    return out[0], out[1]


async def test_same_forwarded_bytes_findings_and_verdicts_as_when_answers_wait() -> None:
    """The realistic workload (one run in ten stuck) and the looping one: the same bytes in the same
    order reach the export queue, the same findings on the same spans, the same verdicts and votes."""
    pool = realistic_pool(requests=12, spans=256, slots=32)
    batches = pool.batches + looping_batches(distinct=4, sessions=4, spans=256)
    processed, received = await run_both(batches)
    assert any(verdict == "stop" for verdict, *_ in processed["sessions"].values())
    assert processed["findings"]
    assert received == processed


async def test_the_answer_comes_before_processing_and_settled_waits_for_it() -> None:
    pipeline, exporter, ingest = service("received")
    data = request(*[tool_span(trace=5, i=i) for i in range(6)])
    accepted = await ingest.handle(data, "grpc")
    assert accepted.spans == 6 and accepted.rejected == 0
    assert pipeline.store.get(f"{5:032x}") is None and not queued(exporter)
    assert pipeline.metrics.receive_backlog_requests._value.get() == 1
    await ingest.settled()
    session = pipeline.store.get(f"{5:032x}")
    assert session is not None and session.steps == 6
    assert len(queued(exporter)) == 1
    assert pipeline.metrics.receive_backlog_requests._value.get() == 0
    await ingest.wait_idle(5)
    await exporter.shutdown(0)


async def test_invalid_requests_and_spans_are_refused_in_the_answer_as_before() -> None:
    _, exporter, ingest = service("received")
    with pytest.raises(Refusal) as refused:
        await ingest.handle(b"\x0a\xff\xff\xff", "grpc")
    assert refused.value.reason == "invalid" and "cannot decode" in refused.value.message
    good = tool_span(trace=6, i=1)
    bad = tool_span(trace=6, i=2)
    bad.span_id = b"\x00" * 8
    accepted = await ingest.handle(request(good, bad), "grpc")
    assert (accepted.spans, accepted.rejected) == (1, 1)
    assert "span_id all zero" in accepted.message
    await ingest.settled()
    forwarded = [s for data in queued(exporter) for s in parse(data)]
    assert [s.span_id for s in forwarded] == [good.span_id]
    assert len(ingest.backlog or ()) == 0
    await ingest.wait_idle(5)
    await exporter.shutdown(0)


async def test_a_full_export_queue_refuses_on_receipt_counting_what_waits() -> None:
    """Room is reserved when a request is answered, so requests waiting for processing count against the
    queue's capacity: the third request of 40 spans does not fit 100."""
    pipeline, exporter, ingest = service("received", queue_spans=100)
    exporter.offer(request(tool_span(trace=1)), 1)  # the queue is not empty, so its bound applies
    for trace in (2, 3):
        await ingest.handle(request(*[tool_span(trace=trace, i=i) for i in range(40)]), "grpc")
    with pytest.raises(Refusal) as refused:
        await ingest.handle(request(*[tool_span(trace=4, i=i) for i in range(40)]), "grpc")
    assert refused.value.reason == "backpressure"
    await ingest.wait_idle(5)
    assert exporter.queued_spans == 81 and pipeline.store.get(f"{4:032x}") is None
    await exporter.shutdown(0)


async def test_bytes_in_flight_are_held_until_processed() -> None:
    in_flight = InFlight(lambda: 1 << 30)
    _, exporter, ingest = service("received", in_flight=in_flight)
    data = request(*[tool_span(trace=8, i=i) for i in range(30)])
    with in_flight.ticket() as ticket:
        ticket.add(len(data))
        await ingest.handle(data, "grpc", ticket)
    assert in_flight.nbytes >= 2 * len(data), "the request and its processing copies, until processed"
    await ingest.settled()
    assert in_flight.nbytes == 0
    await ingest.wait_idle(5)
    await exporter.shutdown(0)


async def test_a_large_request_is_answered_once_processed_in_its_turn() -> None:
    """Over a megabyte a request is read in chunks and answered once processed, as by default; it is
    processed after the requests answered before it and before those that came after."""
    pipeline, exporter, ingest = service("received")
    first, last = tool_span(trace=7, i=0), tool_span(trace=7, i=10**6)
    first.span_id, last.span_id = (10**9).to_bytes(8, "big"), (10**9 + 1).to_bytes(8, "big")  # not the large's
    small_before, small_after = request(first), request(last)
    large = identical(20_000, trace=7)
    assert len(large) > CHUNK_BYTES
    await ingest.handle(small_before, "grpc")
    large_answer = asyncio.create_task(ingest.handle(large, "grpc"))
    assert ingest.backlog is not None
    while ingest.backlog._added < 2:  # the large request is in the backlog
        await asyncio.sleep(0)
    await ingest.handle(small_after, "grpc")
    assert (await large_answer).spans == 20_000
    await ingest.wait_idle(60)
    assert pipeline.store.get(f"{7:032x}").steps == 20_002
    order = [s.span_id for data in queued(exporter) for s in parse(data)]
    assert len(order) == 20_002 and order[0] == first.span_id and order[-1] == last.span_id
    await exporter.shutdown(0)


async def test_a_request_whose_processing_fails_is_forwarded_as_it_came(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pipeline, exporter, ingest = service("received")

    def broken(*args: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pipeline, "process_steps", broken)
    data = request(*[tool_span(trace=9, i=i) for i in range(3)])
    with caplog.at_level(logging.ERROR):
        await ingest.handle(data, "grpc")
        await ingest.wait_idle(5)
    assert queued(exporter) == [data]
    assert "forwarding it as it came" in caplog.text
    later = tool_span(trace=10, i=0)
    monkeypatch.undo()
    await ingest.handle(request(later), "grpc")
    await ingest.wait_idle(5)
    assert [s.span_id for s in parse(queued(exporter)[-1])] == [later.span_id], "the backlog goes on"
    assert pipeline.store.get(f"{10:032x}") is not None
    await exporter.shutdown(0)


async def test_spans_the_closed_export_queue_will_not_take_are_counted_as_lost(
        caplog: pytest.LogCaptureFixture) -> None:
    pipeline, exporter, ingest = service("received")
    await ingest.handle(request(*[tool_span(trace=11, i=i) for i in range(4)]), "grpc")
    await exporter.shutdown(0)  # closes the queue before the backlog ran
    with caplog.at_level(logging.ERROR):
        await ingest.wait_idle(5)
    lost = pipeline.metrics.spans_export_failed.labels("shutdown")._value.get()
    assert lost == 4 and "acknowledged on receipt were dropped" in caplog.text


async def test_settled_waits_only_for_jobs_added_before_it() -> None:
    backlog = Backlog()
    release = asyncio.Event()
    ran: list[int] = []

    class Job:
        def __init__(self, n: int) -> None:
            self.n, self.spans = n, n

        async def run(self) -> None:
            await release.wait()
            ran.append(self.n)

        def drop(self) -> None:
            ran.append(-self.n)

    backlog.add(Job(1))
    assert not await backlog.settled(0.05), "the first job is still waiting"
    waiting = asyncio.create_task(backlog.settled(5))
    backlog.add(Job(2))
    assert backlog.spans == 3
    release.set()
    assert await waiting and ran[0] == 1
    assert await backlog.join(5) and ran == [1, 2] and len(backlog) == 0 and backlog.spans == 0
    release.clear()
    backlog.add(Job(3))
    backlog.add(Job(4))
    await asyncio.sleep(0)  # the third is running (waiting inside)
    assert await backlog.close() == 1, "the running job is cancelled, the fourth dropped"
    assert ran == [1, 2, -4] and len(backlog) == 0 and backlog.spans == 0


def test_answering_on_receipt_cannot_be_combined_with_the_persistent_queue(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"receiver\.acknowledge: received cannot be combined"):
        build_config({"receiver": {"acknowledge": "received"},
                      "exporter": {"endpoint": UPSTREAM, "persistent_dir": str(tmp_path)}}, env={})
    with pytest.raises(ConfigError, match=r"receiver\.acknowledge"):
        build_config({"receiver": {"acknowledge": "sometimes"}}, env={})
    assert build_config({}, env={}).acknowledge == "received", "auto: on receipt with the in-memory queue"
    persistent = build_config({"exporter": {"endpoint": UPSTREAM, "persistent_dir": str(tmp_path)}}, env={})
    assert persistent.acknowledge == "processed", "auto: once processed with the persistent queue"


def test_a_request_read_on_receipt_decodes_as_a_whole_decode_does() -> None:
    """:meth:`Pipeline.read` then :meth:`Pipeline.map_scan` give the :class:`Decoded` that
    :meth:`Pipeline.decode` gives, for every request of the realistic pool."""
    from otelloop.pipeline import run

    for data in realistic_pool(requests=8, spans=128, slots=16).batches:
        whole, split = Pipeline(), Pipeline()
        a = whole.decode(data)
        b = run(split.map_scan(split.read(data)))
        assert (a.data, a.spans, a.mapping_errors, a.invalid, a.joined) == (
            b.data, b.spans, b.mapping_errors, b.invalid, b.joined)
        assert [(pos, step) for pos, step, _ in a.steps] == [(pos, step) for pos, step, _ in b.steps]
        assert ExportTraceServiceRequest.FromString(b.data) == ExportTraceServiceRequest.FromString(data)


def test_an_agent_answered_on_receipt_reads_state_that_includes_its_steps(serve: Any, grpc_sink: Any) -> None:
    """End to end: an agent's OpenTelemetry SDK sends 3,000 tool calls through ``otelloop serve``
    answering on receipt, in requests of 500, and asks for its session the moment the last export
    returns, while most of them still wait for processing. The session endpoints wait for the backlog:
    every step is counted, and the loop the agent ended in is its verdict."""
    import json

    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otelloop.client import check_verdict, format_trace_id

    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"},
               "receiver": {"acknowledge": "received"}})
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=o.grpc, insecure=True),
                                                   max_queue_size=4096, max_export_batch_size=500,
                                                   schedule_delay_millis=60_000))
    tracer = provider.get_tracer("agent")
    calls = 3000
    with tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        trace_id = root.get_span_context().trace_id
        for i in range(calls - 1):
            stuck = i >= calls - 40
            with tracer.start_as_current_span("execute_tool read_file") as sp:
                sp.set_attribute("gen_ai.operation.name", "execute_tool")
                sp.set_attribute("gen_ai.tool.name", "read_file")
                path = "notes.txt" if stuck else f"src/{i}.py"
                sp.set_attribute("gen_ai.tool.call.arguments", json.dumps({"path": path}))
                sp.set_attribute("gen_ai.tool.call.result", "nothing new" if stuck else f"def f{i}(): return {i}")
    assert provider.force_flush(30_000)  # returns once otelloop answered every export: on receipt
    status, body = o.get(f"/v1/sessions/{format_trace_id(trace_id)}")
    assert status == 200 and json.loads(body)["steps"] == calls
    assert check_verdict(f"http://{o.admin}", trace_id=trace_id, timeout=10).verdict == "stop"
    provider.shutdown()
    assert o.metric("otelloop_receive_backlog_requests") == 0


async def test_a_full_backlog_refuses_before_reading_and_takes_again_once_worked_off() -> None:
    """While ``backlog_spans`` spans wait, a request is refused retryably before it is even read (the
    bytes below would be refused as invalid if they were read); a request is taken whatever its size
    while fewer wait."""
    pipeline, exporter, ingest = service("received", backlog_spans=50)
    for trace in (31, 32):  # 0 then 40 spans waiting: both taken, 80 wait
        await ingest.handle(request(*[tool_span(trace=trace, i=i) for i in range(40)]), "grpc")
    assert ingest.backlog is not None and ingest.backlog.spans == 80
    with pytest.raises(Refusal) as refused:
        await ingest.handle(b"\x0a\xff\xff\xff", "grpc")
    assert refused.value.reason == "backpressure" and "detection is behind" in refused.value.message
    await ingest.settled()
    assert ingest.backlog.spans == 0
    await ingest.handle(request(*[tool_span(trace=33, i=i) for i in range(60)]), "grpc")
    await ingest.wait_idle(5)
    assert pipeline.store.get(f"{33:032x}").steps == 60
    await exporter.shutdown(0)


async def test_shutdown_drops_what_still_waits_counted_and_gives_everything_back(
        caplog: pytest.LogCaptureFixture) -> None:
    """A grace too short for the backlog: the requests answered on receipt and not processed are counted
    as lost, a large request still waiting for its turn is refused retryably (its client had no answer),
    and every byte and every reserved span is given back."""
    in_flight = InFlight(lambda: 1 << 30)
    pipeline, exporter, ingest = service("received", in_flight=in_flight)
    large = asyncio.create_task(ingest.handle(identical(20_000, trace=45), "grpc"))
    assert ingest.backlog is not None
    while ingest.backlog._added < 1:
        await asyncio.sleep(0)
    for trace in range(40, 44):  # answered, behind the large request
        await ingest.handle(request(*[tool_span(trace=trace, i=i) for i in range(25)]), "grpc")
    with caplog.at_level(logging.ERROR):
        await ingest.wait_idle(0)
    assert pipeline.metrics.spans_export_failed.labels("shutdown")._value.get() == 100
    assert all(pipeline.store.get(f"{trace:032x}") is None for trace in range(40, 44))
    with pytest.raises(Refusal) as refused:
        await large
    assert refused.value.reason == "backpressure" and "shutting down" in refused.value.message
    await asyncio.gather(*ingest._tasks)  # processing the large request had begun: it goes on
    assert in_flight.nbytes == 0 and exporter._reserved_spans == 0 and exporter._reservations == 0
    assert len(ingest.backlog) == 0 and pipeline.metrics.receive_backlog_requests._value.get() == 0
    assert "acknowledged on receipt were dropped" in caplog.text
    await exporter.shutdown(0)


async def test_an_empty_request_holding_a_reservation_keeps_an_oversized_one_out() -> None:
    """The export queue takes a request larger than its capacity only when nothing else is queued or
    reserved; a reservation of an empty request counts (it would be queued first)."""
    cfg = build_config({"exporter": {"endpoint": UPSTREAM, "queue_spans": 10}}, env={})
    exporter = build_exporter(cfg.exporter, Pipeline(cfg).metrics)
    assert exporter is not None
    empty = exporter.reserve(0, 20)
    assert empty is not None and exporter.reserve(30, 3000) is None
    exporter.release(empty)
    exporter.release(empty)  # a second release changes nothing
    alone = exporter.reserve(30, 3000)
    assert alone is not None and exporter.offer_parts([(b"x" * 3000, 30)], alone)
    await exporter.shutdown(0)


def test_a_request_read_before_a_reload_is_read_again_with_the_new_configuration() -> None:
    from otelloop.pipeline import run

    pipeline = Pipeline()
    data = identical(5, trace=46)
    scanned = pipeline.read(data)
    pipeline.reconfigure(build_config({"mapping": {"rules": [{"span_name": "read_file", "kind": "ignore"}]}},
                                      env={}))
    assert run(pipeline.map_scan(scanned)).steps == [] == pipeline.decode(data).steps
    assert len(Pipeline().decode(data).steps) == 5
