"""The export stage: accept requests into the queue, deliver them upstream in order, account for each.

One sender task takes batches from the head of the queue and retries retryable failures indefinitely
(an upstream that is down fills the queue, and a full queue makes the receivers refuse clients with a
retryable error instead of losing data). A span leaves the queue only as delivered or as counted,
logged policy: a permanent rejection, a partial success, a request too large to send, or shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from otelloop.config import ExporterConfig, parse_upstream
from otelloop.export.grpc import MAX_MESSAGE_BYTES, GrpcClient
from otelloop.export.http import HttpClient
from otelloop.export.persistent import PersistentQueue
from otelloop.export.queue import Batch, MemoryQueue, SpanQueue
from otelloop.export.retry import AttemptResult, Backoff, Outcome, one_line
from otelloop.telemetry import Metrics

log = logging.getLogger(__name__)

_MIB = 1024 * 1024

#: Values of ``otelloop_spans_export_failed_total{reason}``; nothing else is ever used.
FAILURE_REASONS = ("rejected", "partial_success", "too_large", "shutdown")

#: Status of a batch refused before sending because no upstream would take it (over 64 MiB).
_TOO_LARGE = "TOO_LARGE"

#: While an outage lasts, a reminder is logged this often (seconds) besides its start and end.
OUTAGE_REMINDER_INTERVAL = 300.0

#: Drops (and warnings) of one kind are logged at most this often (seconds); the rest are summarised.
LOG_INTERVAL = 10.0


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


class _ThrottledLog:
    """At most one line per key every :data:`LOG_INTERVAL` seconds, the skipped ones summarised, so
    an upstream that rejects everything (say, a revoked API key) does not flood the log."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._skipped: dict[str, int] = {}

    def __call__(self, key: str, level: int, text: str) -> None:
        now = time.monotonic()
        if now - self._last.get(key, float("-inf")) < LOG_INTERVAL:
            self._skipped[key] = self._skipped.get(key, 0) + 1
            return
        self._last[key] = now
        skipped = self._skipped.pop(key, 0)
        log.log(level, "%s%s", text, f" (and {skipped} more like it since the last line)" if skipped else "")


def _suffix(message: str) -> str:
    return f": {message}" if message else ""


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
        self._max_batch_bytes = min(int(cfg.max_batch_mib * _MIB), MAX_MESSAGE_BYTES)
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._outage = _OutageLog(client.description)
        self._throttled = _ThrottledLog()
        for reason in FAILURE_REASONS:
            metrics.spans_export_failed.labels(reason)
        for outcome in Outcome:
            metrics.export_duration.labels(outcome.value)
        metrics.export_queue_capacity.set(queue.capacity_spans)
        self._update_gauge()

    @property
    def capacity_spans(self) -> int:
        return self._queue.capacity_spans

    @property
    def queued_spans(self) -> int:
        return self._queue.queued_spans

    def has_room(self, spans: int, nbytes: int) -> bool:
        """Whether :meth:`offer` would take a request of this size now (checked before processing it)."""
        return not self._closing and self._queue.has_room(spans, nbytes)

    def offer(self, data: bytes, spans: int) -> bool:
        """Queue a serialized ExportTraceServiceRequest holding ``spans`` spans.

        False when the queue lacks room (or is shutting down): the caller refuses its client with a
        retryable error, so nothing accepted is ever lost. True: it will be delivered, or dropped only
        as counted, logged policy.
        """
        if self._closing or not self._queue.put(data, spans):
            return False
        self._update_gauge()
        self._wakeup.set()
        return True

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
                batch = self._queue.peek_batch(0 if alone else self._max_batch_bytes)
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
            result = await self._deliver(batch)
            if result.outcome is Outcome.PERMANENT and batch.requests > 1:
                self._throttled("split", logging.INFO, f"{self._client.description} rejected a batch of "
                                f"{batch.requests} requests ({result.status}); sending them one by one")
                alone = batch.requests
                continue
            self._settle(batch, result)
            self._queue.ack(batch)
            alone = max(alone - 1, 0)
            self._update_gauge()

    async def _deliver(self, batch: Batch) -> AttemptResult:
        """Send one batch until it succeeds or is refused for good; retryable failures never end it."""
        if len(batch.data) > MAX_MESSAGE_BYTES:
            limit = f"{len(batch.data)} bytes exceed the {MAX_MESSAGE_BYTES // _MIB} MiB request limit"
            return AttemptResult(Outcome.PERMANENT, _TOO_LARGE, limit)
        backoff = Backoff(self._cfg.retry_initial_interval, self._cfg.retry_max_interval)
        while True:
            result = await self._attempt(batch.data)
            if result.outcome is not Outcome.RETRYABLE:
                return result
            self._outage.failed(result, self._queue.queued_spans, self._queue.capacity_spans)
            await asyncio.sleep(backoff.next(result.delay))

    def _settle(self, batch: Batch, result: AttemptResult) -> None:
        """Account for a batch that leaves the queue: delivered (perhaps partly) or dropped."""
        if result.outcome is Outcome.SUCCESS:
            self._delivered(batch, result)
        elif result.status == _TOO_LARGE:
            self._drop(batch.spans, "too_large", f"request not sent to {self._client.description}: "
                                                 f"{result.message}")
        else:
            self._drop(batch.spans, "rejected", f"{self._client.description} answered "
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

    def _delivered(self, batch: Batch, result: AttemptResult) -> None:
        self._outage.succeeded()
        rejected = min(result.rejected_spans, batch.spans)
        self._metrics.spans_exported.inc(batch.spans - rejected)
        if rejected:
            self._drop(rejected, "partial_success", f"{self._client.description} accepted "
                                                    f"{batch.spans - rejected} of {batch.spans}"
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
