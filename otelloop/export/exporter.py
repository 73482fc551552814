"""The export stage: accept requests into the queue, deliver them upstream in order, account for each.

One sender task takes batches from the head of the queue and retries retryable failures indefinitely
(an upstream that is down fills the queue, and a full queue makes the receivers refuse clients with a
retryable error instead of losing data). A span leaves the queue only as delivered or as counted,
logged policy: a permanent rejection, a partial success, a span too large to send, or shutdown.

Size. Every upstream request fits ``exporter.max_request_mib`` (:func:`request_budget`): a client request
is cut into parts that fit (``otelloop.otlp.split``) before it is queued, after enrichment, and batches
are coalesced only up to that bound. A span that enrichment alone made too large goes without
otelloop's additions (counted in ``otelloop_spans_enrichment_skipped_total{reason="too_large"}``); a
span too large even as it came never gets here (the receivers refuse it to its client). Two safety nets
remain on the sender: a queued request over the bound (left by an earlier version in the persistent
queue, or a lowered bound) is cut before sending, and an upstream that answers "too large" anyway
(HTTP 413, or RESOURCE_EXHAUSTED whose message speaks of size) gets the request again in halves.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from otelloop.config import ExporterConfig, parse_upstream
from otelloop.export.grpc import GrpcClient
from otelloop.export.http import HttpClient
from otelloop.export.persistent import PersistentQueue
from otelloop.export.queue import Batch, MemoryQueue, SpanQueue
from otelloop.export.retry import AttemptResult, Backoff, Outcome, one_line
from otelloop.logs import ThrottledLog
from otelloop.otlp import scan
from otelloop.otlp.split import Part, field_size, split_request
from otelloop.telemetry import Metrics

if TYPE_CHECKING:
    from otelloop.pipeline import Processed

log = logging.getLogger(__name__)

_MIB = 1024 * 1024

#: Values of ``otelloop_spans_export_failed_total{reason}``; nothing else is ever used.
FAILURE_REASONS = ("rejected", "partial_success", "too_large", "shutdown")

#: Values of ``otelloop_spans_enrichment_skipped_total{reason}``.
ENRICHMENT_SKIPPED_REASONS = ("too_large",)

#: How gRPC servers word a refusal for size (grpc core: "Received message larger than max (N vs. M)"; the
#: Go server: "grpc: received message after decompression larger than max"); RESOURCE_EXHAUSTED also means
#: an exhausted quota, which a smaller request would not cure.
_SIZE_MESSAGE = re.compile(r"larger than max|too large|message size|exceeds", re.IGNORECASE)


def request_budget(cfg: ExporterConfig) -> int:
    """The largest serialised request sent upstream, in bytes.

    ``exporter.max_request_mib`` bounds the serialised (uncompressed) request: that is what a gRPC server
    limits. An OTLP/HTTP server limits the body as sent; uncompressed that is the same number, and gzip can
    make a body of incompressible bytes slightly larger than its input, so with gzip the bound keeps room
    for gzip's worst case (zlib's ``deflateBound`` plus the gzip header and trailer).
    """
    limit = int(cfg.max_request_mib * _MIB)
    protocol = parse_upstream(cfg.endpoint, cfg.protocol)[0] if cfg.endpoint else cfg.protocol
    if protocol == "http/protobuf" and cfg.compression == "gzip":
        limit -= (limit >> 12) + (limit >> 14) + (limit >> 25) + 13 + 18
    return max(limit, 1)


@dataclass(slots=True)
class Reservation:
    """Room held in the queue for a request between its admission and its :meth:`Exporter.offer_parts`."""

    spans: int
    nbytes: int
    held: bool = True

#: While an outage lasts, a reminder is logged this often (seconds) besides its start and end.
OUTAGE_REMINDER_INTERVAL = 300.0

#: Drops (and warnings) of one kind are logged at most this often (seconds); the rest are summarised.
LOG_INTERVAL = 10.0

#: Longest stretch the sender spends cutting a request before it lets the event loop run.
_SLICE_SECONDS = 0.01


class UpstreamClient(Protocol):
    """One transport to the upstream: the sender calls ``export`` with a batch's bytes."""

    @property
    def description(self) -> str: ...

    async def start(self) -> None: ...

    async def export(self, data: bytes) -> AttemptResult: ...

    async def close(self) -> None: ...


class _OutageLog:
    """Turns a run of retryable failures into a line when it starts, a reminder now and then, and a
    line when it ends, instead of one line per retry.

    An upstream that throttles briefly but often (a 429 now and then) would still produce two lines per
    episode, so a run that starts within :data:`LOG_INTERVAL` of the previous line is only reported if
    it outlasts that interval.
    """

    def __init__(self, upstream: str) -> None:
        self._upstream = upstream
        self._since: float | None = None
        self._failures = 0
        self._reported = False
        self._last_line = float("-inf")

    def failed(self, result: AttemptResult, queued: int, capacity: int) -> None:
        now = time.monotonic()
        if self._since is None:
            self._since, self._failures, self._reported = now, 0, False
        self._failures += 1
        cause = f"{result.status}{_suffix(result.message)}"
        if not self._reported and now - self._last_line >= LOG_INTERVAL:
            self._reported, self._last_line = True, now
            log.warning("upstream %s unavailable (%s); retrying with backoff, queue %d/%d spans",
                        self._upstream, cause, queued, capacity)
        elif self._reported and now - self._last_line >= OUTAGE_REMINDER_INTERVAL:
            self._last_line = now
            log.warning("upstream %s still unavailable after %.0fs and %d failed attempts (%s); "
                        "queue %d/%d spans", self._upstream, now - self._since, self._failures, cause,
                        queued, capacity)

    def succeeded(self) -> None:
        if self._since is not None and self._reported:
            self._last_line = time.monotonic()
            log.warning("upstream %s recovered after %.1fs and %d failed attempts",
                        self._upstream, self._last_line - self._since, self._failures)
        self._since = None


def _suffix(message: str) -> str:
    return f": {message}" if message else ""


def _too_large(result: AttemptResult) -> bool:
    """The upstream refused a request for its size (HTTP 413, or RESOURCE_EXHAUSTED saying so)."""
    if result.outcome is not Outcome.PERMANENT:
        return False
    return result.status == "HTTP 413" or (result.status == "RESOURCE_EXHAUSTED"
                                           and _SIZE_MESSAGE.search(result.message) is not None)


class Exporter:
    """The bounded export queue and the single ordered sender in front of one upstream.

    Everything runs on the caller's event loop; :meth:`offer` never blocks.
    """

    def __init__(self, queue: SpanQueue, client: UpstreamClient, cfg: ExporterConfig,
                 metrics: Metrics) -> None:
        self._queue = queue
        self._client = client
        self._cfg = cfg
        self._metrics = metrics
        self.max_request_bytes = request_budget(cfg)
        self._max_batch_bytes = min(int(cfg.max_batch_mib * _MIB), self.max_request_bytes)
        self._reserved_spans = 0
        self._reserved_bytes = 0
        self._reservations = 0
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._outage = _OutageLog(client.description)
        self._throttled = ThrottledLog(log, LOG_INTERVAL)
        for reason in FAILURE_REASONS:
            metrics.spans_export_failed.labels(reason)
        for outcome in Outcome:
            metrics.export_duration.labels(outcome.value)
        for reason in ENRICHMENT_SKIPPED_REASONS:
            metrics.spans_enrichment_skipped.labels(reason)
        metrics.export_queue_capacity.set(queue.capacity_spans)
        self._update_gauge()

    @property
    def capacity_spans(self) -> int:
        return self._queue.capacity_spans

    @property
    def queued_spans(self) -> int:
        return self._queue.queued_spans

    @property
    def memory_bytes(self) -> int:
        """Bytes the queue holds in memory (a persistent queue holds them on disk)."""
        return self._queue.queued_bytes if isinstance(self._queue, MemoryQueue) else 0

    def has_room(self, spans: int, nbytes: int) -> bool:
        """Whether :meth:`offer` would take a request of this size now (checked before processing it)."""
        if self._closing:
            return False
        if not self._reservations:  # (a reservation of an empty request holds no span, but holds the head)
            return self._queue.has_room(spans, nbytes)
        spans += self._reserved_spans
        return (self._queue.has_room(spans, nbytes + self._reserved_bytes)
                and self._queue.queued_spans + spans <= self._queue.capacity_spans)

    def reserve(self, spans: int, nbytes: int) -> Reservation | None:
        """Hold room for a request that will be offered later (after processing it in slices), so that
        requests admitted meanwhile cannot take it; None when there is no room now."""
        if not self.has_room(spans, nbytes):
            return None
        self._reserved_spans += spans
        self._reserved_bytes += nbytes
        self._reservations += 1
        return Reservation(spans, nbytes)

    def release(self, reservation: Reservation) -> None:
        """Give back the room of a reservation (after :meth:`offer_parts`, or when the request failed)."""
        if reservation.held:
            self._reserved_spans -= reservation.spans
            self._reserved_bytes -= reservation.nbytes
            self._reservations -= 1
            reservation.spans = reservation.nbytes = 0
            reservation.held = False

    def offer(self, data: bytes, spans: int) -> bool:
        """Queue a serialized ExportTraceServiceRequest holding ``spans`` spans.

        False when the queue lacks room (or is shutting down): the caller refuses its client with a
        retryable error, so nothing accepted is ever lost. True: it will be delivered, or dropped only
        as counted, logged policy.
        """
        return self.offer_parts([(data, spans)])

    def offer_parts(self, parts: list[Part], reservation: Reservation | None = None) -> bool:
        """Queue the parts of one client request (each within :attr:`max_request_bytes`), all or none.

        With a ``reservation`` (from :meth:`reserve`), its room is used and released.
        """
        if reservation is not None:
            self.release(reservation)
        if self._closing or not self._queue.put_many(parts):
            return False
        self._queued()
        return True

    async def offer_parts_async(self, parts: list[Part], reservation: Reservation | None = None) -> bool:
        """:meth:`offer_parts`, leaving the event loop free while a persistent queue writes to disk."""
        put = getattr(self._queue, "put_many_async", None)
        if put is None:
            return self.offer_parts(parts, reservation)
        if reservation is not None:
            self.release(reservation)
        if self._closing or not await put(parts):
            return False
        self._queued()
        return True

    def _queued(self) -> None:
        self._update_gauge()
        self._wakeup.set()

    def prepare(self, processed: Processed) -> Generator[None, None, list[Part]]:
        """The parts of a processed request cut to :attr:`max_request_bytes` (yields at checkpoints).

        A span that enrichment made too large to fit goes as it came (its unenriched bytes), counted and
        logged. Receivers refuse spans too large even as they came, so none is left out here; if one were
        (a caller that skipped that check), it is counted as ``too_large`` and logged.
        """
        limit = self.max_request_bytes
        out: list[Part] = []
        unenriched = failed = 0
        for k, (data, spans) in enumerate(processed.parts):
            if len(data) <= limit:
                out.append((data, spans))
                continue
            original = processed.originals[k][0] if processed.originals else None
            as_came: list[bytes] = []

            def oversized(index: int, span: bytes, size: int, *, original: bytes | None = original,
                          as_came: list[bytes] = as_came) -> bytes | None:
                nonlocal unenriched, failed
                if original is not None:
                    if not as_came:
                        as_came.extend(scan.span_bytes(original))
                    plain = as_came[index]
                    if size - field_size(len(span)) + field_size(len(plain)) <= limit:
                        unenriched += 1
                        return plain
                failed += 1
                return None

            for part in split_request(data, limit, oversized=oversized):
                if part is None:
                    yield
                elif part[1]:
                    out.append(part)
        if unenriched:
            self._metrics.spans_enrichment_skipped.labels("too_large").inc(unenriched)
            self._throttled("unenriched", logging.WARNING,
                            f"forwarded {unenriched} spans without otelloop's events and attributes: with "
                            f"them a span would exceed exporter.max_request_mib ({limit} bytes)")
        if failed:
            self._drop(failed, "too_large", f"a span alone exceeds exporter.max_request_mib ({limit} bytes)")
        return out

    async def start(self) -> None:
        """Open the upstream connection and start the sender."""
        if self._task is not None:
            return
        await self._client.start()
        self._task = asyncio.create_task(self._run(), name="otelloop-export")
        self._task.add_done_callback(_report_crash)
        log.info("exporting to %s (queue %d spans)", self._client.description, self._queue.capacity_spans)

    async def shutdown(self, grace: float) -> int:
        """Refuse new data, keep delivering for up to ``grace`` seconds, then stop.

        Returns the spans left undelivered, counted in ``spans_export_failed{reason="shutdown"}``. A batch
        on the wire when the grace runs out counts as undelivered even if the upstream got it.
        """
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await asyncio.wait({self._task}, timeout=max(grace, 0.0))
            if not self._task.done():
                self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        lost = self._queue.close()
        self._update_gauge()
        if lost:
            self._metrics.spans_export_failed.labels("shutdown").inc(lost)
            log.error("shutdown: %d spans not delivered to %s within the %.1fs grace period",
                      lost, self._client.description, grace)
        await self._client.close()
        return lost

    async def _run(self) -> None:
        """Deliver the head of the queue, batch after batch, in arrival order.

        When the upstream permanently rejects a coalesced batch, its requests are sent again one by one,
        so one malformed request costs only its own spans and not those it happened to be batched with.
        """
        alone = 0  # requests still to be sent one at a time after such a rejection
        while True:
            try:
                batch = await self._peek(0 if alone else self._max_batch_bytes)
            except Exception:  # a storage error of the persistent queue: the data stays, try again later
                log.debug("reading the export queue failed", exc_info=True)
                await asyncio.sleep(1.0)
                continue
            if batch is None:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            if len(batch.data) > self.max_request_bytes:  # one request queued over the bound
                self._throttled("oversized_queued", logging.WARNING,
                                f"a queued request of {len(batch.data)} bytes exceeds "
                                f"exporter.max_request_mib ({self.max_request_bytes} B); sending it in parts")
                await self._deliver_in_parts(batch.data, batch.spans, self.max_request_bytes)
            else:
                result = await self._deliver(batch.data)
                if result.outcome is Outcome.PERMANENT and batch.requests > 1:
                    self._throttled("split", logging.INFO, f"{self._client.description} rejected a batch of "
                                    f"{batch.requests} requests ({result.status}); sending them one by one")
                    alone = batch.requests
                    continue
                if _too_large(result) and batch.spans > 1:
                    self._throttled("halve", logging.WARNING,
                                    f"{self._client.description} refused a request of {len(batch.data)} "
                                    f"bytes as too large ({result.status}); sending it in halves (set "
                                    f"exporter.max_request_mib to the upstream's limit)")
                    await self._deliver_in_parts(batch.data, batch.spans, len(batch.data) // 2)
                else:
                    self._settle(batch.spans, result)
            await self._ack(batch)
            alone = max(alone - 1, 0)
            self._update_gauge()

    async def _peek(self, max_bytes: int) -> Batch | None:
        peek = getattr(self._queue, "peek_batch_async", None)
        return await peek(max_bytes) if peek is not None else self._queue.peek_batch(max_bytes)

    async def _ack(self, batch: Batch) -> None:
        ack = getattr(self._queue, "ack_async", None)
        if ack is not None:
            await ack(batch)
        else:
            self._queue.ack(batch)

    async def _deliver(self, data: bytes) -> AttemptResult:
        """Send one request until it succeeds or is refused for good; retryable failures never end it."""
        backoff = Backoff(self._cfg.retry_initial_interval, self._cfg.retry_max_interval)
        while True:
            result = await self._attempt(data)
            if result.outcome is not Outcome.RETRYABLE:
                return result
            self._outage.failed(result, self._queue.queued_spans, self._queue.capacity_spans)
            await asyncio.sleep(backoff.next(result.delay))

    async def _deliver_in_parts(self, data: bytes, spans: int, max_bytes: int) -> None:
        """Cut a request into parts of at most ``max_bytes`` and deliver them in order, each settled on its
        own; a part refused as too large is cut in halves again. A span that cannot fit ``max_bytes``
        even alone is sent alone, unless it exceeds the configured bound: then it is dropped as
        ``too_large`` (counted and logged)."""
        limit = self.max_request_bytes
        too_big = 0

        def oversized(index: int, span: bytes, size: int) -> bytes | None:
            nonlocal too_big
            if size <= limit:
                return span
            too_big += 1
            return None

        parts: list[Part] = []
        paused = time.perf_counter()
        try:
            for part in split_request(data, max_bytes, oversized=oversized):
                if part is None:
                    if time.perf_counter() - paused > _SLICE_SECONDS:
                        await asyncio.sleep(0)
                        paused = time.perf_counter()
                else:
                    parts.append(part)
        except ValueError as e:  # cannot happen for what otelloop queued; keep the sender alive regardless
            self._settle(spans, AttemptResult(Outcome.PERMANENT, "MALFORMED", str(e)))
            return
        if too_big:
            self._drop(too_big, "too_large", f"a span alone exceeds exporter.max_request_mib ({limit} bytes)")
        for chunk, count in parts:
            if not count:
                continue
            result = await self._deliver(chunk)
            if _too_large(result) and count > 1 and len(chunk) < len(data):
                await self._deliver_in_parts(chunk, count, len(chunk) // 2)
            else:
                self._settle(count, result)

    def _settle(self, spans: int, result: AttemptResult) -> None:
        """Account for spans that leave the queue: delivered (perhaps partly) or dropped."""
        if result.outcome is Outcome.SUCCESS:
            self._delivered(spans, result)
        else:
            self._drop(spans, "rejected", f"{self._client.description} answered "
                                          f"{result.status}{_suffix(result.message)}")

    async def _attempt(self, data: bytes) -> AttemptResult:
        """One export call, timed; an unexpected error is treated as retryable so data is kept."""
        started = time.perf_counter()
        try:
            result = await self._client.export(data)
        except Exception as e:  # a transport bug must not kill the sender or drop accepted data
            log.debug("export attempt to %s raised", self._client.description, exc_info=True)
            result = AttemptResult(Outcome.RETRYABLE, type(e).__name__, one_line(str(e)))
        self._metrics.export_duration.labels(result.outcome.value).observe(time.perf_counter() - started)
        return result

    def _delivered(self, spans: int, result: AttemptResult) -> None:
        self._outage.succeeded()
        rejected = min(result.rejected_spans, spans)
        self._metrics.spans_exported.inc(spans - rejected)
        if rejected:
            self._drop(rejected, "partial_success", f"{self._client.description} accepted "
                                                    f"{spans - rejected} of {spans}"
                                                    f"{_suffix(result.message)}")
        elif result.message:
            self._throttled("partial_success_warning", logging.WARNING,
                            f"{self._client.description} accepted all spans with a warning: {result.message}")

    def _drop(self, spans: int, reason: str, text: str) -> None:
        self._metrics.spans_export_failed.labels(reason).inc(spans)
        self._throttled(reason, logging.ERROR, f"dropped {spans} spans (reason {reason}): {text}")

    def _update_gauge(self) -> None:
        self._metrics.export_queue_spans.set(self._queue.queued_spans)


def _report_crash(task: asyncio.Task[None]) -> None:
    """The sender is written not to fail; if it does anyway, say so loudly rather than stall silently."""
    if not task.cancelled() and task.exception() is not None:
        log.error("the export sender stopped unexpectedly", exc_info=task.exception())


def _use_tls(url_tls: bool, cfg: ExporterConfig) -> bool:
    """TLS as the URL's scheme says, unless ``exporter.tls.insecure`` is set explicitly."""
    return url_tls if cfg.tls.insecure is None else not cfg.tls.insecure


def build_exporter(cfg: ExporterConfig, metrics: Metrics) -> Exporter | None:
    """The exporter for ``cfg``, or None when no upstream is configured (detect only)."""
    if cfg.endpoint is None:
        return None
    protocol, target, url_tls = parse_upstream(cfg.endpoint, cfg.protocol)
    tls = _use_tls(url_tls, cfg)
    client: UpstreamClient
    client = GrpcClient(target, tls, cfg) if protocol == "grpc" else HttpClient(target, tls, cfg)
    queue: SpanQueue
    if cfg.persistent_dir is not None:
        queue = PersistentQueue(cfg.persistent_dir, cfg.queue_spans, int(cfg.persistent_max_mib * _MIB))
    else:
        queue = MemoryQueue(cfg.queue_spans)
    return Exporter(queue, client, cfg, metrics)
