"""The OTLP/gRPC upstream client: one grpc.aio channel and the raw ``TraceService/Export`` call.

Requests go out as the bytes the queue holds (no re-serialization), and every answer, error or not, is
turned into an :class:`~otelloop.export.retry.AttemptResult` using the OTLP retry table.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import grpc.aio

from otelloop.config import ExporterConfig
from otelloop.export.retry import (
    AttemptResult,
    grpc_outcome,
    retry_info_delay,
    status_message,
    success_result,
)

EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

#: Message size limit both ways (at least; more when ``exporter.max_request_mib`` asks for more).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def channel_credentials(cfg: ExporterConfig) -> grpc.ChannelCredentials:
    """TLS credentials: the configured CA (else the system roots) and, for mTLS, the client pair."""
    tls = cfg.tls
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError("exporter.tls: cert_file and key_file must be set together")
    return grpc.ssl_channel_credentials(root_certificates=_read(tls.ca_file),
                                        private_key=_read(tls.key_file),
                                        certificate_chain=_read(tls.cert_file))


def channel_options(cfg: ExporterConfig) -> list[tuple[str, int]]:
    """Message limits, and reconnect backoff aligned with ours.

    gRPC's own reconnect backoff grows to two minutes by default; while it waits, calls fail at once
    with UNAVAILABLE, so a recovered upstream would stay unused long after our retry came back.
    """
    send = max(MAX_MESSAGE_BYTES, int(cfg.max_request_mib * (1 << 20)) + (1 << 20))
    return [
        ("grpc.max_send_message_length", send),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.initial_reconnect_backoff_ms", max(10, int(cfg.retry_initial_interval * 1000))),
        ("grpc.max_reconnect_backoff_ms", max(10, int(cfg.retry_max_interval * 1000))),
    ]


class GrpcClient:
    """Sends serialized ExportTraceServiceRequests to ``target`` over OTLP/gRPC."""

    def __init__(self, target: str, tls: bool, cfg: ExporterConfig) -> None:
        self._target = target
        self._tls = tls
        self._cfg = cfg
        self._metadata = tuple((key.lower(), value) for key, value in cfg.headers.items())
        self._channel: grpc.aio.Channel | None = None
        self._export: grpc.aio.UnaryUnaryMultiCallable | None = None

    @property
    def description(self) -> str:
        """The upstream for log lines (never includes headers)."""
        return f"{'grpcs' if self._tls else 'grpc'}://{self._target}"

    async def start(self) -> None:
        gzip = self._cfg.compression == "gzip"
        compression = grpc.Compression.Gzip if gzip else grpc.Compression.NoCompression
        options = channel_options(self._cfg)
        if self._tls:
            self._channel = grpc.aio.secure_channel(self._target, channel_credentials(self._cfg),
                                                    options=options, compression=compression)
        else:
            self._channel = grpc.aio.insecure_channel(self._target, options=options, compression=compression)
        # No (de)serializers: the queued bytes go out untouched and the raw answer comes back.
        self._export = self._channel.unary_unary(EXPORT_METHOD)

    async def export(self, data: bytes) -> AttemptResult:
        assert self._export is not None, "start() first"
        try:
            body = await self._export(data, timeout=self._cfg.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as e:
            return _error_result(e)
        return success_result(body, "OK")

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def _error_result(error: grpc.aio.AioRpcError) -> AttemptResult:
    trailers = error.trailing_metadata()
    delay = retry_info_delay(trailers)
    code = error.code()
    message = status_message(trailers, error.details())
    return AttemptResult(grpc_outcome(code, delay), code.name, message, delay)
