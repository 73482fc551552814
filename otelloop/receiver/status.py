"""``google.rpc.Status`` bodies and RetryInfo details for refusals (OTLP §Failures)."""

from __future__ import annotations

from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

#: gRPC code per refusal reason (docs/alerts.md, OtelloopSpansRefused).
GRPC_CODES = {
    "invalid": code_pb2.INVALID_ARGUMENT,
    "too_large": code_pb2.RESOURCE_EXHAUSTED,
    "unauthenticated": code_pb2.UNAUTHENTICATED,
    "backpressure": code_pb2.UNAVAILABLE,
}
#: HTTP status per refusal reason.
HTTP_CODES = {"invalid": 400, "too_large": 413, "unauthenticated": 401, "backpressure": 503}


def retry_info(seconds: int) -> error_details_pb2.RetryInfo:
    return error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=seconds))


def status(reason: str, message: str, retry_after: int | None = None) -> status_pb2.Status:
    st = status_pb2.Status(code=GRPC_CODES[reason], message=message)
    if retry_after is not None:
        detail = any_pb2.Any()
        detail.Pack(retry_info(retry_after))
        st.details.append(detail)
    return st
