"""The OTLP retry table, server-given delays and the backoff, without a network."""

from __future__ import annotations

from email.utils import formatdate

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otelloop.export.retry import (
    MAX_SERVER_DELAY,
    Backoff,
    Outcome,
    grpc_outcome,
    http_outcome,
    parse_retry_after,
    retry_info_delay,
    status_message,
    success_result,
)

RETRYABLE = {"CANCELLED", "DEADLINE_EXCEEDED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE", "DATA_LOSS"}


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c is not grpc.StatusCode.OK],
                         ids=lambda c: c.name)
def test_grpc_table(code: grpc.StatusCode) -> None:
    expected = Outcome.RETRYABLE if code.name in RETRYABLE else Outcome.PERMANENT
    assert grpc_outcome(code, None) is expected


def test_resource_exhausted_is_retryable_only_with_retry_info() -> None:
    assert grpc_outcome(grpc.StatusCode.RESOURCE_EXHAUSTED, None) is Outcome.PERMANENT
    assert grpc_outcome(grpc.StatusCode.RESOURCE_EXHAUSTED, 0.5) is Outcome.RETRYABLE
    assert grpc_outcome(grpc.StatusCode.INVALID_ARGUMENT, 0.5) is Outcome.PERMANENT


@pytest.mark.parametrize("status,expected", [
    (200, Outcome.SUCCESS), (202, Outcome.SUCCESS), (429, Outcome.RETRYABLE), (502, Outcome.RETRYABLE),
    (503, Outcome.RETRYABLE), (504, Outcome.RETRYABLE), (400, Outcome.PERMANENT), (401, Outcome.PERMANENT),
    (404, Outcome.PERMANENT), (408, Outcome.PERMANENT), (413, Outcome.PERMANENT), (500, Outcome.PERMANENT),
    (501, Outcome.PERMANENT), (301, Outcome.PERMANENT),
])
def test_http_table(status: int, expected: Outcome) -> None:
    assert http_outcome(status) is expected


def _retry_info(seconds: int, nanos: int = 0) -> error_details_pb2.RetryInfo:
    return error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds, nanos=nanos))


def _status_with(info: error_details_pb2.RetryInfo, message: str = "slow down") -> bytes:
    detail = any_pb2.Any()
    detail.Pack(info)
    other = any_pb2.Any()
    other.Pack(error_details_pb2.ErrorInfo(reason="QUOTA"))
    return status_pb2.Status(code=14, message=message, details=[other, detail]).SerializeToString()


def test_retry_info_from_status_details() -> None:
    trailers = [("grpc-status-details-bin", _status_with(_retry_info(1, 500_000_000)))]
    assert retry_info_delay(trailers) == pytest.approx(1.5)


def test_retry_info_from_bare_trailer() -> None:
    assert retry_info_delay([("google.rpc.retryinfo-bin", _retry_info(2).SerializeToString())]) == 2.0


def test_status_details_win_over_bare_trailer() -> None:
    trailers = [("google.rpc.retryinfo-bin", _retry_info(9).SerializeToString()),
                ("grpc-status-details-bin", _status_with(_retry_info(3)))]
    assert retry_info_delay(trailers) == 3.0


def test_no_or_malformed_retry_info() -> None:
    assert retry_info_delay(None) is None
    assert retry_info_delay([("other", "x"), ("grpc-status-details-bin", status_pb2.Status(code=14)
                                                .SerializeToString())]) is None
    assert retry_info_delay([("google.rpc.retryinfo-bin", b"\xff\xff\xff"),
                             ("grpc-status-details-bin", b"\x0a\xff")]) is None


def test_status_message_prefers_details_then_trailer() -> None:
    trailer = [("grpc-status-details-bin", _status_with(_retry_info(1), "from trailer"))]
    assert status_message(trailer, "from details\nsecond line") == "from details second line"
    assert status_message(trailer, "") == "from trailer"
    assert status_message(None, "x" * 1000).endswith("…")


def test_retry_after_seconds_and_dates() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("3", lambda: now) == 3.0
    assert parse_retry_after(" 0 ", lambda: now) == 0.0
    assert parse_retry_after(formatdate(now + 7, usegmt=True), lambda: now) == pytest.approx(7.0)
    assert parse_retry_after(formatdate(now - 60, usegmt=True), lambda: now) == 0.0
    for bad in (None, "", "soon", "-5", "nan", "inf"):
        assert parse_retry_after(bad, lambda: now) is None


def test_backoff_doubles_to_the_cap_with_jitter_bounds() -> None:
    middle = Backoff(1.0, 8.0, rng=lambda: 0.5)
    assert [middle.next() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    low, high = Backoff(1.0, 8.0, rng=lambda: 0.0), Backoff(1.0, 8.0, rng=lambda: 1.0)
    assert low.next() == pytest.approx(0.8) and high.next() == pytest.approx(1.2)


def test_server_delay_replaces_one_wait_and_still_advances() -> None:
    backoff = Backoff(1.0, 8.0, rng=lambda: 0.5)
    assert backoff.next(0.3) == 0.3
    assert backoff.next() == 2.0
    assert backoff.next(10_000.0) == MAX_SERVER_DELAY


def test_zero_initial_interval_is_not_a_busy_loop() -> None:
    assert Backoff(0.0, 0.0, rng=lambda: 0.5).next() > 0


def test_success_reads_partial_success() -> None:
    body = ExportTraceServiceResponse()
    body.partial_success.rejected_spans = 2
    body.partial_success.error_message = "two spans too old"
    result = success_result(body.SerializeToString(), "OK")
    assert result.outcome is Outcome.SUCCESS
    assert (result.rejected_spans, result.message) == (2, "two spans too old")
    assert success_result(b"", "OK").rejected_spans == 0
    assert success_result(b"\xff\xff", "HTTP 200").outcome is Outcome.SUCCESS
