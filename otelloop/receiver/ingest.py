"""Admission of one received request: decode, check room, process, hand to the exporter.

Both receivers call :meth:`Ingest.handle`; a refusal is raised as :class:`Refusal` *before* any
detector state changes, so a client that retries a refused request does not count twice.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from otelloop.pipeline import InvalidRequest, Pipeline
from otelloop.telemetry import Metrics

if TYPE_CHECKING:
    from otelloop.export import Exporter

log = logging.getLogger(__name__)

RefusalReason = Literal["invalid", "too_large", "unauthenticated", "backpressure"]

#: Seconds a client is asked to wait when otelloop pushes back.
RETRY_AFTER_S = 1


class Refusal(Exception):
    """A request otelloop will not take; receivers turn it into a gRPC status or HTTP response.

    ``spans`` is the number of spans refused when known (the request decoded), else None.
    """

    def __init__(self, reason: RefusalReason, message: str, spans: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.spans = spans


class BearerAuth:
    """Constant-time bearer-token check. Tokens are never logged."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = [t.encode() for t in tokens if t]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def check(self, header: str | None) -> bool:
        if not self._tokens:
            return True
        if not header or not header[:7].lower() == "bearer ":
            return False
        given = header[7:].strip().encode()
        ok = False
        for token in self._tokens:  # compare against every token so timing does not reveal which matched
            ok |= hmac.compare_digest(given, token)
        return ok


class Ingest:
    """Shared admission path of the receivers.

    Args:
        pipeline: decodes and processes requests.
        exporter: the export queue, or None in detect-only mode (spans are then dropped after detection).
        metrics: counters for received/refused spans and request durations.
        overloaded: returns a reason when the process must shed load (memory limit), else None.
    """

    def __init__(self, pipeline: Pipeline, exporter: Exporter | None, metrics: Metrics,
                 overloaded: Callable[[], str | None] = lambda: None) -> None:
        self.pipeline = pipeline
        self.exporter = exporter
        self.metrics = metrics
        self.overloaded = overloaded
        self.draining = False

    def handle(self, data: bytes, transport: str) -> int:
        """Admit one serialised ``ExportTraceServiceRequest``; returns the number of spans accepted."""
        started = time.perf_counter()
        try:
            return self._handle(data, transport)
        finally:
            self.metrics.request_duration.labels(transport).observe(time.perf_counter() - started)

    def _handle(self, data: bytes, transport: str) -> int:
        if self.draining:
            raise Refusal("backpressure", "otelloop is shutting down; retry against another replica")
        try:
            decoded = self.pipeline.decode(data)
        except InvalidRequest as e:
            raise Refusal("invalid", str(e)) from None
        self.metrics.spans_received.labels(transport).inc(decoded.spans)
        shed = self.overloaded()
        if shed is not None:
            raise Refusal("backpressure", shed, decoded.spans)
        exporter = self.exporter
        if exporter is not None and not exporter.has_room(decoded.spans, len(data)):
            raise Refusal("backpressure", "export queue is full; retry later", decoded.spans)
        processed = self.pipeline.process(decoded)
        if exporter is not None and not exporter.offer(processed.data, processed.spans):
            # Room was checked above with no await in between, so only a storage error of the persistent
            # queue gets here. The data is not safe, so the client must retry: success would be a lie.
            log.error("export queue could not store an admitted request; the client is asked to retry")
            raise Refusal("backpressure", "export queue could not store the request; retry later",
                          decoded.spans)
        return decoded.spans

    def refused(self, refusal: Refusal, transport: str) -> None:
        """Count a refusal; spans of a request that did not decode are counted as one."""
        self.metrics.spans_refused.labels(transport, refusal.reason).inc(
            refusal.spans if refusal.spans is not None else 1)
