"""How an upstream's answer is judged, and how long to wait before trying again (docs/alerts.md).

This module owns the OTLP retry table for both transports (which gRPC codes and HTTP statuses are worth
another attempt), the server-given delays (gRPC ``RetryInfo`` in either trailer, HTTP ``Retry-After``),
partial-success responses, and the exponential backoff with jitter. The transport clients turn what they
saw into an :class:`AttemptResult`; the sender acts on it without knowing the transport.
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otelloop.logs import escape

#: Trailer carrying a serialized ``google.rpc.Status`` (the standard rich-error channel).
STATUS_DETAILS_KEY = "grpc-status-details-bin"
#: Trailer carrying a bare ``google.rpc.RetryInfo`` (what the OpenTelemetry Python SDK reads).
RETRY_INFO_KEY = "google.rpc.retryinfo-bin"

#: gRPC codes the OTLP specification calls retryable. RESOURCE_EXHAUSTED joins them only when the
#: server says when to come back (RetryInfo); without it the request itself is the problem (too large).
RETRYABLE_GRPC_CODES = frozenset({
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DATA_LOSS,
})

#: HTTP statuses the OTLP specification calls retryable; every other 4xx/5xx must not be retried.
RETRYABLE_HTTP_STATUSES = frozenset({429, 502, 503, 504})

#: A server-given delay longer than this is shortened to it, so a bad clock or a typo upstream cannot
#: park the sender for days while the queue refuses every client.
MAX_SERVER_DELAY = 300.0

#: Floor of the computed backoff, so ``retry_initial_interval: 0`` cannot turn into a busy loop.
_MIN_INTERVAL = 0.01

_MESSAGE_LIMIT = 300


class Outcome(enum.StrEnum):
    """What one export attempt amounted to; also the ``outcome`` label of the duration histogram."""

    SUCCESS = "success"
    RETRYABLE = "retryable"
    PERMANENT = "permanent"


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """One export attempt, transport-neutral.

    Attributes:
        outcome: success, retryable or permanent.
        status: a short status for logs, e.g. ``UNAVAILABLE``, ``HTTP 503``, ``ClientConnectorError``.
        message: the server's (or the error's) message, one line, truncated; never header values.
        delay: seconds the server asked us to wait before the next attempt, if it said.
        rejected_spans: spans the server refused inside a successful (partial success) response.
    """

    outcome: Outcome
    status: str
    message: str = ""
    delay: float | None = None
    rejected_spans: int = 0


def one_line(text: str, limit: int = _MESSAGE_LIMIT) -> str:
    """A server message made safe for a single log line: whitespace collapsed, other unprintable
    characters escaped (the message may echo span content), length capped."""
    return escape(" ".join(text.split()), limit)


def success_result(body: bytes, status: str) -> AttemptResult:
    """A 2xx / OK answer: reads ``partial_success`` from the ExportTraceServiceResponse body.

    An unreadable body still means the data was accepted, so it is a plain success, not a failure.
    """
    try:
        response = ExportTraceServiceResponse.FromString(body)
    except DecodeError:
        return AttemptResult(Outcome.SUCCESS, status)
    partial = response.partial_success
    return AttemptResult(Outcome.SUCCESS, status, one_line(partial.error_message),
                         rejected_spans=max(0, partial.rejected_spans))


def grpc_outcome(code: grpc.StatusCode, delay: float | None) -> Outcome:
    """The OTLP/gRPC retry table; ``delay`` is the RetryInfo delay when the server sent one."""
    if code in RETRYABLE_GRPC_CODES:
        return Outcome.RETRYABLE
    if code is grpc.StatusCode.RESOURCE_EXHAUSTED and delay is not None:
        return Outcome.RETRYABLE
    return Outcome.PERMANENT


def http_outcome(status: int) -> Outcome:
    """The OTLP/HTTP retry table."""
    if 200 <= status < 300:
        return Outcome.SUCCESS
    return Outcome.RETRYABLE if status in RETRYABLE_HTTP_STATUSES else Outcome.PERMANENT


def _duration_seconds(retry_info: error_details_pb2.RetryInfo) -> float | None:
    if not retry_info.HasField("retry_delay"):
        return None
    seconds = retry_info.retry_delay.seconds + retry_info.retry_delay.nanos / 1e9
    return seconds if seconds >= 0 else None


def _delay_from_status(value: bytes) -> float | None:
    status = status_pb2.Status.FromString(value)
    for detail in status.details:
        if detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
            retry_info = error_details_pb2.RetryInfo()
            detail.Unpack(retry_info)
            return _duration_seconds(retry_info)
    return None


def retry_info_delay(trailing_metadata: Iterable[tuple[str, Any]] | None) -> float | None:
    """The RetryInfo delay from the status-details trailer or the bare RetryInfo trailer, if any.

    Servers differ in which one they fill (the Go Collector reads the first, the Python SDK the second),
    so both are read; the status details win when both are present. Malformed values are ignored.
    """
    from_status = from_bare = None
    for key, value in trailing_metadata or ():
        if not isinstance(value, bytes):
            continue
        try:
            if key == STATUS_DETAILS_KEY:
                from_status = _delay_from_status(value)
            elif key == RETRY_INFO_KEY:
                from_bare = _duration_seconds(error_details_pb2.RetryInfo.FromString(value))
        except DecodeError:
            continue
    return from_status if from_status is not None else from_bare


def status_message(trailing_metadata: Iterable[tuple[str, Any]] | None, details: str | None) -> str:
    """The server's error message: the call's details, else the message inside the status trailer."""
    if details:
        return one_line(details)
    for key, value in trailing_metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            try:
                return one_line(status_pb2.Status.FromString(value).message)
            except DecodeError:
                return ""
    return ""


def parse_retry_after(value: str | None, now: Callable[[], float] = time.time) -> float | None:
    """``Retry-After`` as seconds to wait: delta-seconds or an HTTP-date (a past date means now)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return seconds if 0 <= seconds < float("inf") else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now())


class Backoff:
    """Exponential backoff: ``initial`` doubling up to ``maximum``, each wait jittered by ±``jitter``.

    Jitter spreads the retries of many otelloop replicas that lost the same upstream at the same moment.
    A delay given by the server replaces the computed one for that attempt but still advances the
    exponent, so a server that stops sending delays is not hammered from the first interval again.
    """

    def __init__(self, initial: float, maximum: float, jitter: float = 0.2,
                 rng: Callable[[], float] = random.random) -> None:
        self._base = max(initial, _MIN_INTERVAL)
        self._maximum = max(maximum, self._base)
        self._jitter = jitter
        self._rng = rng

    def next(self, server_delay: float | None = None) -> float:
        """Seconds to wait before the next attempt."""
        base = self._base
        self._base = min(self._base * 2, self._maximum)
        if server_delay is not None:
            return min(server_delay, MAX_SERVER_DELAY)
        return base * (1 + self._jitter * (2 * self._rng() - 1))
