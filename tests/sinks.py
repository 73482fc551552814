"""Real OTLP sinks on 127.0.0.1 for the export tests, with scriptable answers, plus small builders.

Both sinks record every attempt as the exact bytes that arrived, and answer from a script of
:class:`Reply` values (one per attempt, then the default), so a test can make the upstream fail, throttle,
partially accept or stall exactly when it wants.
"""

from __future__ import annotations

import asyncio
import datetime
import gzip
import ipaddress
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from aiohttp import web
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from otelloop.config import ExporterConfig, build_config
from otelloop.export import Exporter
from otelloop.telemetry import Metrics

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"

#: The ``make_exporter`` fixture: ``await make_exporter(cfg, start=True)``.
MakeExporter = Callable[..., Awaitable[Exporter]]

# ---------------------------------------------------------------------------------------------------
# Requests and configuration


def make_request(spans: int, tag: str) -> bytes:
    """A serialized request with ``spans`` spans named ``{tag}-{i}``."""
    scope = ScopeSpans(spans=[Span(name=f"{tag}-{i}", trace_id=bytes(16), span_id=(i + 1).to_bytes(8, "big"))
                              for i in range(spans)])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[scope])]).SerializeToString()


def span_names(data: bytes) -> list[str]:
    """The span names of a serialized request, in wire order."""
    request = ExportTraceServiceRequest.FromString(data)
    return [s.name for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def exporter_config(endpoint: str, **overrides: Any) -> ExporterConfig:
    """An exporter configuration with short intervals so every test stays quick."""
    raw = {"endpoint": endpoint, "retry_initial_interval": 0.05, "retry_max_interval": 0.2, "timeout": 2.0,
           **overrides}
    return build_config({"exporter": raw}, env={}).exporter


def free_port() -> int:
    """A port nothing listens on yet, for an upstream that is started later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    """A metric's current value (0 when the series does not exist)."""
    return metrics.registry.get_sample_value(name, labels or None) or 0.0


def retryable_attempts(metrics: Metrics) -> float:
    return sample(metrics, "otelloop_export_duration_seconds_count", outcome="retryable")


async def wait_until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


# ---------------------------------------------------------------------------------------------------
# Scripted answers


@dataclass(frozen=True)
class Reply:
    """How a sink answers one attempt.

    Attributes:
        code: gRPC status code to fail with (gRPC sink); None answers OK.
        status: HTTP status (HTTP sink).
        message: error message (gRPC details / google.rpc.Status message in the HTTP body).
        retry_delay: seconds of RetryInfo to send (gRPC), in the trailers named by ``trailers``.
        trailers: ``status`` (grpc-status-details-bin), ``bare`` (google.rpc.retryinfo-bin) or both.
        retry_after: ``Retry-After`` header value (HTTP).
        rejected: rejected_spans of a partial success.
        warning: error_message of the (partial) success response.
        sleep: seconds to wait before answering.
    """

    code: grpc.StatusCode | None = None
    status: int = 200
    message: str = ""
    retry_delay: float | None = None
    trailers: tuple[str, ...] = ("status", "bare")
    retry_after: str | None = None
    rejected: int = 0
    warning: str = ""
    sleep: float = 0.0


OK = Reply()


def _response(reply: Reply) -> bytes:
    response = ExportTraceServiceResponse()
    if reply.rejected or reply.warning:
        response.partial_success.rejected_spans = reply.rejected
        response.partial_success.error_message = reply.warning
    return response.SerializeToString()


def _retry_trailers(reply: Reply) -> list[tuple[str, bytes]]:
    if reply.retry_delay is None or reply.code is None:
        return []
    seconds = int(reply.retry_delay)
    info = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(
        seconds=seconds, nanos=round((reply.retry_delay - seconds) * 1e9)))
    trailers = []
    if "status" in reply.trailers:
        detail = any_pb2.Any()
        detail.Pack(info)
        status = status_pb2.Status(code=reply.code.value[0], message=reply.message, details=[detail])
        trailers.append(("grpc-status-details-bin", status.SerializeToString()))
    if "bare" in reply.trailers:
        trailers.append(("google.rpc.retryinfo-bin", info.SerializeToString()))
    return trailers


@dataclass
class Attempt:
    """One request as the sink saw it."""

    data: bytes
    headers: dict[str, str]
    at: float


@dataclass
class _Script:
    replies: list[Reply] = field(default_factory=list)
    default: Reply = OK
    attempts: list[Attempt] = field(default_factory=list)
    delivered: list[bytes] = field(default_factory=list)

    def next(self) -> Reply:
        return self.replies.pop(0) if self.replies else self.default

    def delivered_names(self) -> list[str]:
        return [name for data in self.delivered for name in span_names(data)]


# ---------------------------------------------------------------------------------------------------
# gRPC sink


class GrpcSink(_Script):
    """A grpc.aio server with a raw-bytes Export handler on 127.0.0.1.

    ``max_receive_bytes`` is gRPC's own limit on a (decompressed) message, as a Collector sets it: larger
    requests are refused with RESOURCE_EXHAUSTED by grpc itself and never reach the handler.
    """

    def __init__(self, port: int = 0, credentials: grpc.ServerCredentials | None = None,
                 max_receive_bytes: int = 64 * 1024 * 1024) -> None:
        super().__init__()
        self.port = port
        self._credentials = credentials
        self.max_receive_bytes = max_receive_bytes
        self._server: grpc.aio.Server | None = None

    async def start(self) -> GrpcSink:
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", self.max_receive_bytes)])
        handler = grpc.unary_unary_rpc_method_handler(self._export, request_deserializer=None,
                                                      response_serializer=None)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {"Export": handler}),))
        address = f"127.0.0.1:{self.port}"
        if self._credentials is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, self._credentials)
        await server.start()
        self._server = server
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop(None)
            self._server = None

    async def _export(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        headers = {k: v for k, v in context.invocation_metadata() if isinstance(v, str)}
        self.attempts.append(Attempt(request, headers, time.monotonic()))
        reply = self.next()
        if reply.sleep:
            await asyncio.sleep(reply.sleep)
        if reply.code is not None:
            await context.abort(reply.code, reply.message, trailing_metadata=tuple(_retry_trailers(reply)))
        self.delivered.append(request)
        return _response(reply)


# ---------------------------------------------------------------------------------------------------
# HTTP sink


class HttpSink(_Script):
    """An aiohttp server taking ``POST /v1/traces`` on 127.0.0.1; bodies are recorded as they arrived
    (still gzipped when the client compressed them) and decoded for ``delivered``.

    A body larger than ``max_body_bytes`` as sent is answered 413, as a backend with a body limit does (and
    counted in ``too_large``).
    """

    def __init__(self, port: int = 0, ssl_context: ssl.SSLContext | None = None,
                 max_body_bytes: int | None = None) -> None:
        super().__init__()
        self.port = port
        self._ssl = ssl_context
        self.max_body_bytes = max_body_bytes
        self.too_large = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://127.0.0.1:{self.port}"

    async def start(self) -> HttpSink:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_post("/v1/traces", self._export)
        runner = web.AppRunner(app, auto_decompress=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, ssl_context=self._ssl)
        await site.start()
        self.port = runner.addresses[0][1]
        self._runner = runner
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _export(self, request: web.Request) -> web.Response:
        raw = await request.read()
        if self.max_body_bytes is not None and len(raw) > self.max_body_bytes:
            self.too_large += 1
            return web.Response(status=413, text=f"body of {len(raw)} bytes exceeds {self.max_body_bytes}")
        self.attempts.append(Attempt(raw, dict(request.headers), time.monotonic()))
        reply = self.next()
        if reply.sleep:
            await asyncio.sleep(reply.sleep)
        headers = {"Retry-After": reply.retry_after} if reply.retry_after else {}
        if reply.status != 200:
            body = status_pb2.Status(message=reply.message).SerializeToString()
            return web.Response(status=reply.status, body=body, headers=headers,
                                content_type="application/x-protobuf")
        data = gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" else raw
        self.delivered.append(data)
        return web.Response(body=_response(reply), content_type="application/x-protobuf")


# ---------------------------------------------------------------------------------------------------
# A private CA for the TLS tests


@dataclass(frozen=True)
class Pki:
    """PEM files of a throwaway CA, a server certificate for 127.0.0.1 and a client certificate."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path

    def grpc_server_credentials(self, require_client: bool = False) -> grpc.ServerCredentials:
        pair = (self.server_key.read_bytes(), self.server_cert.read_bytes())
        client_ca = self.ca.read_bytes() if require_client else None
        return grpc.ssl_server_credentials([pair], root_certificates=client_ca,
                                           require_client_auth=require_client)

    def server_ssl_context(self, require_client: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.server_cert, self.server_key)
        if require_client:
            context.load_verify_locations(self.ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context


def make_pki(directory: Path) -> Pki:
    """Generates the CA and both leaf certificates with ``cryptography``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
        path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
        return path

    def write_cert(cert: x509.Certificate, path: Path) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("otelloop test CA")
    ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                            content_commitment=False, key_encipherment=False,
                                            data_encipherment=False, key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
               .sign(ca_key, hashes.SHA256()))

    def leaf(cn: str, usage: x509.ObjectIdentifier) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(ca_cert.subject)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
                   .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                  critical=False)
                   .add_extension(x509.SubjectAlternativeName([
                       x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False))
        return builder.sign(ca_key, hashes.SHA256()), key

    server_cert, server_key = leaf("127.0.0.1", ExtendedKeyUsageOID.SERVER_AUTH)
    client_cert, client_key = leaf("otelloop", ExtendedKeyUsageOID.CLIENT_AUTH)
    return Pki(ca=write_cert(ca_cert, directory / "ca.pem"),
               server_cert=write_cert(server_cert, directory / "server.pem"),
               server_key=write_key(server_key, directory / "server-key.pem"),
               client_cert=write_cert(client_cert, directory / "client.pem"),
               client_key=write_key(client_key, directory / "client-key.pem"))
