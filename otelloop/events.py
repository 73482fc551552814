"""The live event stream (``GET /v1/events``): findings and verdict changes as server-sent events.

The console uses it to update within a second or so of a finding; other tools may consume it too. Three
rules keep it from ever costing the span path anything that matters:

- **Nothing when nobody listens.** The hub registers its finding sink and verdict listener only while at
  least one client is connected, and unregisters them when the last one leaves.
- **O(1) per finding when someone listens.** The sinks append a reference to a bounded deque (thread
  safe, no lock, no serialisation); everything else happens in a flush task every
  :data:`FLUSH_INTERVAL` seconds: repeats of the same finding of a session are coalesced into one event
  with a ``repeats`` count, each event is redacted and serialised once, and one chunk is handed to every
  client. If more happened between two flushes than the deque holds, the oldest are lost and clients get
  a ``lagged`` event telling them to reload.
- **A byte budget shared by all clients.** The stream sends at most ``admin.event_rate_kib`` per second
  to all its clients together: each flush's chunk is cut to the budget divided among the connected
  clients (at least :data:`MIN_FLUSH_BYTES`), newest events first, so what the stream costs (bytes copied
  to sockets, the readers' buffers) does not grow with the number of readers. What is cut is counted as
  lost and clients get a ``lagged`` event (the console then reloads its lists, as it does for any event).
- **Never wait for a client.** Each client has a buffer bounded in bytes (``admin.event_buffer_kib``, plus
  the one flush it is being handed); a client that falls behind by more than that is disconnected (it
  reconnects and reloads), counted and logged.

Wire format (``text/event-stream``): ``event: finding|verdict|lagged`` and one ``data:`` line of JSON
per event; a comment line every :data:`HEARTBEAT` seconds keeps idle connections open through proxies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from otelloop.model import Finding, Step
from otelloop.pipeline import Pipeline
from otelloop.redact import redact
from otelloop.state import FINDING_MESSAGE_CHARS, NAME_CHARS, Session, evidence, evidence_dict
from otelloop.telemetry import Metrics

log = logging.getLogger(__name__)

#: Seconds between two flushes of pending events to the clients.
FLUSH_INTERVAL = 0.5
#: Seconds between two keep-alive comments on an idle stream.
HEARTBEAT = 15.0
#: Raw events held between two flushes; beyond it the oldest are lost (clients are told to reload).
PENDING_EVENTS = 8192
#: Distinct events sent per flush; the rest are counted as lost.
EVENTS_PER_FLUSH = 1000
#: Smallest chunk a flush may hand every client, whatever the number of clients (a few events).
MIN_FLUSH_BYTES = 4096
#: Room kept in every chunk for the ``lagged`` event.
LAGGED_BYTES = 96
#: Clients woken per second, all together. Up to half as many clients are woken at every flush; with more,
#: they take turns (each is woken every few flushes and writes what accumulated at once): a send to a
#: socket costs as much as a few KiB of data, and hundreds of them at once would hold the loop.
WAKES_PER_SECOND = 200
#: Most bytes handed to one client's socket in one write.
WRITE_BYTES = 64 * 1024
#: Minimum seconds between two log lines about slow clients or lost events.
LOG_INTERVAL = 60.0


class StreamClient:
    """One connected consumer: a byte-bounded buffer of chunks and a wake-up event."""

    __slots__ = ("buffer", "buffered", "wake", "dropped", "abort", "due")

    def __init__(self, abort: Callable[[], None]) -> None:
        self.buffer: deque[bytes] = deque()
        self.buffered = 0
        self.wake = asyncio.Event()
        self.dropped = False
        #: closes the connection (a client stuck in a full socket buffer never reaches its next read)
        self.abort = abort
        #: waiting in the hub's queue of clients to wake
        self.due = False

    async def next(self, timeout: float) -> bytes | None:
        """The next chunk to send; a keep-alive comment after ``timeout`` idle seconds; None once dropped."""
        if not self.buffer and not self.dropped:
            # a timer rather than asyncio.wait_for, which makes a task per wait: with hundreds of clients
            # woken twice a second that was most of what a client cost
            self.wake.clear()
            heartbeat = asyncio.get_running_loop().call_later(timeout, self.wake.set)
            try:
                await self.wake.wait()
            finally:
                heartbeat.cancel()
            if not self.buffer and not self.dropped:
                return b": keep-alive\n\n"
        if self.dropped:
            return None
        parts, size = [], 0
        while self.buffer and size < WRITE_BYTES:  # what accumulated, in one write (one send)
            parts.append(self.buffer.popleft())
            size += len(parts[-1])
        self.buffered -= size
        return parts[0] if len(parts) == 1 else b"".join(parts)


class EventHub:
    """Fans findings and verdict changes out to the connected stream clients.

    Args:
        pipeline: where findings come from (its ``finding_sinks`` and its store's verdict listeners).
        metrics: client gauge and drop counters.
        max_clients: clients served at once.
        buffer_bytes: bytes buffered per client before it is dropped.
        rate_bytes: bytes per second sent to all clients together (the byte budget).
    """

    def __init__(self, pipeline: Pipeline, metrics: Metrics, max_clients: int = 32,
                 buffer_bytes: int = 1 << 20, rate_bytes: int = 4 << 20) -> None:
        self.pipeline = pipeline
        self.metrics = metrics
        self.max_clients = max_clients
        self.buffer_bytes = buffer_bytes
        self.rate_bytes = rate_bytes
        self.clients: set[StreamClient] = set()
        self._pending: deque[tuple[Any, ...]] = deque(maxlen=PENDING_EVENTS)
        self._due: deque[StreamClient] = deque()
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._last_log: dict[str, float] = {}
        #: counts flushes that delivered something (cached list answers older than the last one are stale)
        self.generation = 0
        self.closed = False

    # -- subscription ------------------------------------------------------------------------------

    def subscribe(self, abort: Callable[[], None]) -> StreamClient | None:
        """A new client, or None when ``max_clients`` are already connected or the hub is closed."""
        if self.closed or len(self.clients) >= self.max_clients:
            return None
        client = StreamClient(abort)
        if not self.clients:
            self._attach()
        self.clients.add(client)
        self.metrics.event_stream_clients.set(len(self.clients))
        return client

    def unsubscribe(self, client: StreamClient) -> None:
        self.clients.discard(client)
        self.metrics.event_stream_clients.set(len(self.clients))
        if not self.clients:
            self._detach()

    def _attach(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._pending.clear()
        self.pipeline.finding_sinks.append(self._on_finding)
        self.pipeline.store.verdict_listeners.append(self._on_verdict)
        self._flusher = self._loop.create_task(self._flush_forever())

    def _detach(self) -> None:
        if self._on_finding in self.pipeline.finding_sinks:
            self.pipeline.finding_sinks.remove(self._on_finding)
        if self._on_verdict in self.pipeline.store.verdict_listeners:
            self.pipeline.store.verdict_listeners.remove(self._on_verdict)
        if self._flusher is not None:
            self._flusher.cancel()
            self._flusher = None
        self._pending.clear()
        self._due.clear()

    def wake_due(self) -> None:
        """Wake the clients waiting longest for what was handed to them, :data:`WAKES_PER_SECOND` a second."""
        due = self._due
        for _ in range(min(len(due), max(1, int(WAKES_PER_SECOND * FLUSH_INTERVAL)))):
            client = due.popleft()
            client.due = False
            client.wake.set()

    def close(self) -> None:
        """Disconnect every client (shutdown): their handlers return at once."""
        self.closed = True
        for client in list(self.clients):
            client.dropped = True
            client.wake.set()

    # -- sinks: called on the span path, O(1) ------------------------------------------------------

    def _on_finding(self, step: Step, finding: Finding) -> None:
        self._pending.append(("finding", step.session, finding, step.trace_id, time.time()))

    def _on_verdict(self, session: Session, previous: str) -> None:
        self._pending.append(("verdict", session.id, previous, session.verdict, time.time()))

    # -- flushing ----------------------------------------------------------------------------------

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_INTERVAL)
            try:
                self.flush()
            except Exception:  # never let one bad event end the stream for everyone
                log.exception("event stream: a flush failed; its events were skipped")
            self.wake_due()

    def flush(self) -> None:
        """Coalesce, serialise and hand out what happened since the last flush."""
        pending = self._pending
        if not pending:
            return
        overflowed = len(pending) == pending.maxlen
        raw = []
        while pending:
            try:
                raw.append(pending.popleft())
            except IndexError:  # emptied by another thread
                break
        merged: dict[tuple[str, ...], list[Any]] = {}
        for item in raw:
            if item[0] == "finding":
                key: tuple[str, ...] = ("finding", item[1], item[2].detector, item[2].event)
            else:
                key = ("verdict", item[1])
            entry = merged.get(key)
            if entry is None:
                merged[key] = [item, 1, item]
            else:
                entry[1] += 1
                entry[2] = item
        frames, lost = self._frames(list(merged.values()), self.flush_bytes())
        if overflowed or lost:
            self.metrics.event_stream_events_lost.inc(lost or 1)
            frames.append(_sse("lagged", {"type": "lagged", "time_unix_ms": int(time.time() * 1000)}))
            self._log("lost", "event stream: more findings than it carries (admin.event_rate_kib); clients were "
                      "told to reload")
        chunk = b"".join(f for f in frames if f)
        if chunk:
            self.generation += 1
            self.publish(chunk)

    def flush_bytes(self) -> int:
        """The budget of one flush's chunk: the stream's rate divided among the clients connected now."""
        share = int(self.rate_bytes * FLUSH_INTERVAL) // max(1, len(self.clients))
        return max(MIN_FLUSH_BYTES, share)

    def _frames(self, entries: list[list[Any]], budget: int) -> tuple[list[bytes], int]:
        """The frames of the newest ``entries`` that fit ``budget`` bytes (and :data:`EVENTS_PER_FLUSH`), in
        order, and how many did not fit. Events that do not fit are not even serialised."""
        frames: list[bytes] = []
        room = budget - LAGGED_BYTES
        for i in range(len(entries) - 1, -1, -1):
            if len(frames) >= EVENTS_PER_FLUSH:
                return frames[::-1], i + 1
            frame = self._frame(*entries[i])
            if len(frame) > room:
                return frames[::-1], i + 1
            frames.append(frame)
            room -= len(frame)
        return frames[::-1], 0

    def publish(self, chunk: bytes) -> None:
        """Queue ``chunk`` for every client; drop a client whose buffer would exceed its bound (a client
        with nothing pending always takes the chunk, so one client holds at most the bound plus one flush)."""
        for client in list(self.clients):
            if client.dropped:
                continue
            if client.buffered and client.buffered + len(chunk) > self.buffer_bytes:
                self._drop(client)
                continue
            client.buffer.append(chunk)
            client.buffered += len(chunk)
            if not client.due:
                client.due = True
                self._due.append(client)

    def _drop(self, client: StreamClient) -> None:
        client.dropped = True
        client.buffer.clear()
        client.buffered = 0
        client.wake.set()
        self.metrics.event_stream_clients_dropped.inc()
        self._log("slow", f"event stream: disconnected a client that fell more than {self.buffer_bytes // 1024} KiB "
                  "behind (admin.event_buffer_kib)")
        with contextlib.suppress(Exception):  # already gone
            client.abort()

    def _frame(self, first: tuple[Any, ...], repeats: int, last: tuple[Any, ...]) -> bytes:
        session = self.pipeline.store.get(last[1])
        common: dict[str, Any] = {"session_id": last[1], "time_unix_ms": int(last[4] * 1000)}
        if session is not None:
            common.update(agent=redact(session.agent, NAME_CHARS), service=redact(session.service, NAME_CHARS),
                          verdict=session.verdict)
        if last[0] == "finding":
            finding: Finding = last[2]
            body = {"type": "finding", **common, "detector": finding.detector, "event": finding.event,
                    "severity": finding.severity, "message": redact(finding.message, FINDING_MESSAGE_CHARS),
                    "evidence": evidence_dict(evidence(finding.attributes)), "repeats": repeats,
                    "trace_id": last[3]}
            return _sse("finding", body)
        body = {"type": "verdict", **common, "previous": first[2], "verdict": last[3],
                "reason": session.reason if session is not None else ""}
        return _sse("verdict", body)

    def _log(self, kind: str, text: str) -> None:
        now = time.monotonic()
        if now - self._last_log.get(kind, -LOG_INTERVAL) >= LOG_INTERVAL:
            self._last_log[kind] = now
            log.warning(text)


def _sse(event: str, data: dict[str, Any]) -> bytes:
    # json.dumps escapes line breaks, so the data is one line whatever the span content was
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()

