"""The event stream ``GET /v1/events``: findings and verdict changes as server-sent events, nothing on the span
path while nobody listens, coalesced repeats, bounded per-client buffers and slow clients dropped."""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import socket
import threading
import time
from typing import Any

import grpc
import pytest
from served import http_call, wait_for
from spans import request, tool_span

from otelloop.events import EventHub
from otelloop.model import Finding, Step
from otelloop.pipeline import Pipeline
from otelloop.telemetry import Metrics

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def export(target: str, data: bytes) -> None:
    with grpc.insecure_channel(target) as ch:
        ch.unary_unary(EXPORT)(data, timeout=30)


def looping(trace: int, n: int = 6) -> list[Any]:
    return [tool_span(trace=trace, i=i) for i in range(n)]


class Reader:
    """An event stream client on a thread, collecting parsed events."""

    def __init__(self, admin: str, headers: dict[str, str] | None = None) -> None:
        self.conn = http.client.HTTPConnection(admin, timeout=30)
        self.conn.request("GET", "/v1/events", headers=headers or {})
        self.sock = self.conn.sock
        self.response = self.conn.getresponse()
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.closed = False
        if self.response.status == 200:
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        event = None
        try:
            for raw in self.response:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event:
                    self.events.append((event, json.loads(line[6:])))
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed by the test
            pass
        self.closed = True

    def of(self, kind: str, session: str | None = None) -> list[dict[str, Any]]:
        return [d for e, d in list(self.events) if e == kind and (session is None or d["session_id"] == session)]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # ends the reading thread's recv; close() alone would not
        self.conn.close()


def sid(trace: int) -> str:
    return format(trace, "032x")


def test_stream_carries_findings_and_verdict_changes(serve: Any) -> None:
    # every LOOP step alerts, also after the stop (the hold off): repeats for the stream to coalesce
    o = serve({"state": {"hold_stopped_sessions": False}})
    reader = Reader(o.admin)
    assert reader.response.status == 200
    assert reader.response.getheader("Content-Type") == "text/event-stream"
    assert reader.response.getheader("Cache-Control") == "no-store"
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 1, what="client counted")
    started = time.monotonic()
    export(o.grpc, request(*looping(7)))
    wait_for(lambda: reader.of("verdict", sid(7)) and len(reader.of("finding", sid(7))) >= 3, timeout=10,
             what="events")
    assert time.monotonic() - started < 10
    findings = reader.of("finding", sid(7))
    assert {f["event"] for f in findings} >= {"otelloop.divergence_suspected", "otelloop.intervention",
                                             "otelloop.entropy_alert"}
    entropy = next(f for f in findings if f["event"] == "otelloop.entropy_alert")
    assert entropy["repeats"] == 2 and entropy["evidence"]["occurrence_count"] == 5  # coalesced
    assert entropy["agent"] == "agent-svc" and entropy["severity"] == "loop" and entropy["trace_id"] == sid(7)
    verdict = reader.of("verdict", sid(7))[-1]
    assert verdict["previous"] == "continue" and verdict["verdict"] == "stop"
    assert http_call("POST", f"http://{o.admin}/v1/sessions/{sid(7)}/pause", b"")[0] == 200
    wait_for(lambda: any(v["verdict"] == "paused" for v in reader.of("verdict", sid(7))), what="pause event")
    reader.close()
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 0, what="client gone")


def test_the_stream_needs_the_token_and_is_bounded_in_clients(serve: Any) -> None:
    o = serve({"admin": {"token": "stream-token", "max_event_clients": 2}})
    assert Reader(o.admin).response.status == 401
    auth = {"Authorization": "Bearer stream-token"}
    first, second = Reader(o.admin, auth), Reader(o.admin, auth)
    assert first.response.status == second.response.status == 200
    third = Reader(o.admin, auth)
    assert third.response.status == 503
    first.close()
    wait_for(lambda: Reader(o.admin, auth).response.status == 200, what="a slot freed")


def test_stopping_the_service_ends_the_streams(serve: Any) -> None:
    o = serve()
    reader = Reader(o.admin)
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 1, what="client counted")
    started = time.monotonic()
    assert o.stop() == 0
    assert time.monotonic() - started < 15
    wait_for(lambda: reader.closed, timeout=5, what="stream ended")


def test_a_slow_client_is_dropped_and_nothing_else_waits(serve: Any) -> None:
    o = serve({"admin": {"event_buffer_kib": 16}})
    fast = Reader(o.admin)
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and it never reads
    host, port = o.admin.rsplit(":", 1)
    slow.connect((host, int(port)))
    slow.sendall(f"GET /v1/events HTTP/1.1\r\nHost: {o.admin}\r\n\r\n".encode())
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 2, what="both connected")
    trace = 1000
    deadline = time.monotonic() + 60
    while o.metric("otelloop_event_stream_clients_dropped_total") == 0:
        assert time.monotonic() < deadline, "the slow client was never dropped"
        export(o.grpc, request(*[s for t in range(trace, trace + 100) for s in looping(t, 4)]))  # still accepted
        trace += 100
        assert http_call("GET", f"http://{o.admin}/healthz", timeout=2)[0] == 200
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 1, what="slow client gone")
    assert "disconnected a client that fell more than 16 KiB behind" in o.stderr
    before = len(fast.of("finding"))
    export(o.grpc, request(*looping(99_999)))
    wait_for(lambda: fast.of("finding", sid(99_999)), what="the fast client still served")
    assert len(fast.of("finding")) > before and not fast.closed
    slow.close()


# ---------------------------------------------------------------------------------------------------
# In process: the span path, coalescing and the byte bound


def _finding(n: int = 0) -> tuple[Step, Finding]:
    step = Step(session=f"s{n}", kind="tool", name="t", trace_id="ab" * 16)
    return step, Finding("divergence", "otelloop.divergence_suspected", "warn", {"otelloop.repeat_count": 3},
                         message="tool step 't' repeated 3 times")


async def test_nothing_is_registered_on_the_span_path_while_nobody_listens() -> None:
    pipeline = Pipeline()
    hub = EventHub(pipeline, Metrics())
    assert pipeline.finding_sinks == [] and pipeline.store.verdict_listeners == []
    pipeline.process(pipeline.decode(request(*looping(1))))
    assert len(hub._pending) == 0
    client = hub.subscribe(lambda: None)
    assert pipeline.finding_sinks == [hub._on_finding] and pipeline.store.verdict_listeners == [hub._on_verdict]
    pipeline.process(pipeline.decode(request(*looping(2))))
    assert len(hub._pending) > 0  # one reference appended per finding and verdict change, nothing else
    hub.unsubscribe(client)
    assert pipeline.finding_sinks == [] and pipeline.store.verdict_listeners == [] and len(hub._pending) == 0
    assert hub._flusher is None


async def test_repeats_are_coalesced_and_a_full_buffer_drops_only_its_client() -> None:
    metrics = Metrics()
    hub = EventHub(Pipeline(), metrics, buffer_bytes=4096)
    aborted: list[str] = []
    reading = hub.subscribe(lambda: aborted.append("reading"))
    stuck = hub.subscribe(lambda: aborted.append("stuck"))
    assert reading is not None and stuck is not None
    for _ in range(100):
        hub._on_finding(*_finding())
    hub.flush()
    chunk = await reading.next(1.0)
    assert chunk is not None and chunk.count(b"event: finding") == 1 and b'"repeats":100' in chunk
    for n in range(200):  # about 50 KB of distinct events: more than 4 KiB behind for the client that never reads
        hub._on_finding(*_finding(n))
        if n % 10 == 9:
            hub.flush()
            while reading.buffer:
                assert await reading.next(1.0)
    assert stuck.dropped and aborted == ["stuck"] and not reading.dropped
    assert await stuck.next(1.0) is None
    assert metrics.event_stream_clients_dropped._value.get() == 1
    hub.unsubscribe(stuck)
    hub.unsubscribe(reading)


async def test_more_than_the_stream_carries_tells_clients_to_reload(monkeypatch: pytest.MonkeyPatch) -> None:
    import otelloop.events as events

    monkeypatch.setattr(events, "EVENTS_PER_FLUSH", 10)
    metrics = Metrics()
    hub = EventHub(Pipeline(), metrics)
    client = hub.subscribe(lambda: None)
    assert client is not None
    for n in range(25):
        hub._on_finding(*_finding(n))
    hub.flush()
    chunk = await client.next(1.0)
    assert chunk is not None and chunk.count(b"event: finding") == 10 and b"event: lagged" in chunk
    assert metrics.event_stream_events_lost._value.get() == 15
    hub.unsubscribe(client)
    await asyncio.sleep(0)


async def test_each_flush_is_cut_to_the_byte_budget_shared_by_the_clients() -> None:
    metrics = Metrics()
    hub = EventHub(Pipeline(), metrics, max_clients=1000, rate_bytes=200 * 1024)  # 100 KiB a flush in all
    clients = [hub.subscribe(lambda: None) for _ in range(10)]
    assert all(c is not None for c in clients)
    assert hub.flush_bytes() == 100 * 1024 // 10
    for n in range(300):  # about 90 KB of distinct events
        hub._on_finding(*_finding(n))
    hub.flush()
    chunks = {bytes(c.buffer[0]) for c in clients if c is not None}
    assert len(chunks) == 1  # one serialisation, the same bytes for every client
    chunk = chunks.pop()
    assert len(chunk) <= hub.flush_bytes() and b"event: lagged" in chunk
    sent = chunk.count(b"event: finding")
    assert 0 < sent < 300 and metrics.event_stream_events_lost._value.get() == 300 - sent
    assert b'"session_id":"s299"' in chunk  # the newest are kept
    for c in clients:
        assert c is not None
        hub.unsubscribe(c)


async def test_with_many_clients_they_are_woken_in_turns() -> None:
    import otelloop.events as events

    hub = EventHub(Pipeline(), Metrics(), max_clients=1000)
    clients = [hub.subscribe(lambda: None) for _ in range(250)]
    hub.publish(b"event: finding\ndata: {}\n\n")
    per_flush = int(events.WAKES_PER_SECOND * events.FLUSH_INTERVAL)
    woken = []
    for _ in range(3):
        hub.wake_due()
        woken.append(sum(c.wake.is_set() for c in clients if c is not None))
    assert woken == [per_flush, 2 * per_flush, 250]
    for c in clients:
        assert c is not None
        hub.unsubscribe(c)
