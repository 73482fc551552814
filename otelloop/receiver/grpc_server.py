"""OTLP/gRPC receiver: ``TraceService/Export`` on raw bytes.

The handler is registered with no request deserializer, so the exact bytes the client sent are what
the pipeline sees and, when nothing is added to them, what goes upstream.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from otelloop.config import TLSConfig
from otelloop.receiver.ingest import RETRY_AFTER_S, Accepted, BearerAuth, Ingest, Refusal
from otelloop.receiver.status import retry_info, status

log = logging.getLogger(__name__)

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_GRPC_CODES = {
    "invalid": grpc.StatusCode.INVALID_ARGUMENT,
    "too_large": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unauthenticated": grpc.StatusCode.UNAUTHENTICATED,
    "backpressure": grpc.StatusCode.UNAVAILABLE,
}


class GrpcReceiver:
    """Serves OTLP/gRPC on one endpoint.

    Args:
        ingest: the shared admission path.
        endpoint: ``host:port`` (port 0 picks one; see :attr:`port`).
        max_request_bytes: decompressed size limit, enforced by gRPC itself (RESOURCE_EXHAUSTED).
        auth: bearer tokens checked against the ``authorization`` metadata.
        tls: server certificate, and a client CA for mTLS.
    """

    def __init__(self, ingest: Ingest, endpoint: str, max_request_bytes: int, auth: BearerAuth,
                 tls: TLSConfig) -> None:
        self.ingest = ingest
        self.auth = auth
        options = [("grpc.max_receive_message_length", max_request_bytes),
                   ("grpc.max_send_message_length", 4 << 20),
                   ("grpc.so_reuseport", 0)]
        self.server = grpc.aio.server(options=options)
        handler = grpc.unary_unary_rpc_method_handler(self._export, request_deserializer=None,
                                                      response_serializer=None)
        self.server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        if tls.enabled:
            creds = grpc.ssl_server_credentials(
                [(Path(tls.key_file).read_bytes(), Path(tls.cert_file).read_bytes())],  # type: ignore[arg-type]
                root_certificates=Path(tls.client_ca_file).read_bytes() if tls.client_ca_file else None,
                require_client_auth=bool(tls.client_ca_file))
            self.port = self._bind(lambda: self.server.add_secure_port(endpoint, creds), endpoint)
        else:
            self.port = self._bind(lambda: self.server.add_insecure_port(endpoint), endpoint)

    @staticmethod
    def _bind(add_port: Callable[[], int], endpoint: str) -> int:
        """The bound port; gRPC reports a busy or unusable address as a bare RuntimeError (or port 0),
        turned here into an OSError naming the listener, which ``serve`` prints as one line. A busy port
        is found before gRPC tries it, so gRPC's own multi-line error log does not precede that line."""
        check_bindable(endpoint, "OTLP/gRPC")
        try:
            port = add_port()
        except RuntimeError:
            port = 0
        if port == 0:
            raise OSError(f"cannot listen for OTLP/gRPC on {endpoint}: the address is in use or not "
                          "available on this host")
        return port

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float) -> None:
        await self.server.stop(grace)

    async def _export(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        with self.ingest.serving():
            outcome = await self._outcome(request, context)
            # An abort raises, and its traceback holds this frame in a reference cycle that only the
            # garbage collector frees: the frame must not hold the request's bytes by then.
            del request
            if isinstance(outcome, Refusal):
                self.ingest.refused(outcome, "grpc")
                await self._abort(context, outcome)
            return response(outcome)

    async def _outcome(self, request: bytes, context: grpc.aio.ServicerContext) -> Accepted | Refusal:
        """The request accepted, or why it is refused (the caller aborts the call with it)."""
        if self.auth.enabled:
            md = dict(context.invocation_metadata() or ())
            if not self.auth.check(md.get("authorization")):
                return Refusal("unauthenticated", "missing or invalid bearer token")
        with self.ingest.ticket() as ticket:  # given back on answering (unless processing holds it on)
            try:
                self.ingest.charge(ticket, len(request), "a request received")
                return await self.ingest.handle(request, "grpc", ticket)
            except Refusal as refusal:
                # Without its traceback, nor the exception it was raised from: kept, they would hold
                # frames (and the request's bytes) in reference cycles.
                refusal.__context__ = None
                return refusal.with_traceback(None)
            except asyncio.CancelledError:  # the client cancelled or went away while its request was processed
                self.ingest.aborted("grpc")
                raise

    async def _abort(self, context: grpc.aio.ServicerContext, refusal: Refusal) -> NoReturn:
        retryable = refusal.reason == "backpressure"
        st = status(refusal.reason, refusal.message, RETRY_AFTER_S if retryable else None)
        trailers: tuple[tuple[str, bytes], ...] = (("grpc-status-details-bin", st.SerializeToString()),)
        if retryable:
            # The Python SDK reads this trailer; the Collector reads the status details. Send both.
            trailers += (("google.rpc.retryinfo-bin", retry_info(RETRY_AFTER_S).SerializeToString()),)
        await context.abort(_GRPC_CODES[refusal.reason], refusal.message, trailing_metadata=trailers)
        raise AssertionError("grpc's abort raises")  # not reached


def response(accepted: Accepted) -> bytes:
    """The ExportTraceServiceResponse: empty for full success, else a partial success saying what was
    refused and why."""
    if not accepted.rejected:
        return b""
    out: bytes = ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
        rejected_spans=accepted.rejected, error_message=accepted.message)).SerializeToString()
    return out


def check_bindable(endpoint: str, name: str) -> None:
    """Raise OSError naming the listener when ``endpoint`` cannot be bound: one of its addresses is in
    use, or none of them can be bound (as gRPC needs at least one). Port 0 is always bindable."""
    host, _, port = endpoint.rpartition(":")
    if port == "0":
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except (OSError, ValueError) as e:
        raise OSError(f"cannot listen for {name} on {endpoint}: {e}") from None
    errors: list[OSError] = []
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC and aiohttp bind
            try:
                s.bind(address)
            except OSError as e:
                errors.append(e)
    busy = [e for e in errors if e.errno == errno.EADDRINUSE]
    if busy or (errors and len(errors) == len(infos)):
        first = (busy or errors)[0]
        raise OSError(first.errno, f"cannot listen for {name} on {endpoint}: {os.strerror(first.errno or 0)}")
