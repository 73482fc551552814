"""The OTLP/HTTP (protobuf) upstream client: one aiohttp session POSTing to the traces URL.

Every answer, error or not, is turned into an :class:`~otelloop.export.retry.AttemptResult` using the
OTLP retry table; connection failures and timeouts are retryable like a 503.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from google.protobuf.message import DecodeError
from google.rpc import status_pb2

from otelloop.config import ExporterConfig
from otelloop.export.retry import (
    AttemptResult,
    Outcome,
    http_outcome,
    one_line,
    parse_retry_after,
    success_result,
)

PROTOBUF = "application/x-protobuf"

#: Largest response body read; the OTLP specification caps responses at 4 MiB.
MAX_RESPONSE_BYTES = 4 * 1024 * 1024

#: Bodies above this are gzipped in a worker thread so the event loop keeps serving receivers.
_INLINE_GZIP_BYTES = 256 * 1024

#: Fast compression: the upstream link is rarely the bottleneck, the single core is.
_GZIP_LEVEL = 1


def ssl_context(cfg: ExporterConfig) -> ssl.SSLContext:
    """Verifying TLS context: the configured CA (else the system roots) and, for mTLS, the client pair."""
    tls = cfg.tls
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError("exporter.tls: cert_file and key_file must be set together")
    context = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file and tls.key_file:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


def with_scheme(url: str, tls: bool) -> str:
    """The URL with the scheme the TLS setting asks for (``exporter.tls.insecure`` can override it)."""
    _, rest = url.split("://", 1)
    return f"{'https' if tls else 'http'}://{rest}"


async def _gzip(data: bytes) -> bytes:
    if len(data) <= _INLINE_GZIP_BYTES:
        return gzip.compress(data, compresslevel=_GZIP_LEVEL)
    return await asyncio.to_thread(gzip.compress, data, _GZIP_LEVEL)


class HttpClient:
    """Sends serialized ExportTraceServiceRequests to ``url`` over OTLP/HTTP protobuf."""

    def __init__(self, url: str, tls: bool, cfg: ExporterConfig) -> None:
        self._url = with_scheme(url, tls)
        self._tls = tls
        self._cfg = cfg
        own = {"content-type", "content-encoding"}  # set below; a configured duplicate would be sent twice
        self._headers = {k: v for k, v in cfg.headers.items() if k.lower() not in own}
        self._headers["Content-Type"] = PROTOBUF
        if cfg.compression == "gzip":
            self._headers["Content-Encoding"] = "gzip"
        self._session: aiohttp.ClientSession | None = None

    @property
    def description(self) -> str:
        """The upstream for log lines: no headers, and no credentials or query that the URL may carry."""
        parts = urlsplit(self._url)
        return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(ssl=ssl_context(self._cfg) if self._tls else False)
        self._session = aiohttp.ClientSession(connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=self._cfg.timeout))

    async def export(self, data: bytes) -> AttemptResult:
        assert self._session is not None, "start() first"
        body = await _gzip(data) if self._cfg.compression == "gzip" else data
        try:
            async with self._session.post(self._url, data=body, headers=self._headers) as response:
                content = await _read_bounded(response)
                return _response_result(response, content)
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            return AttemptResult(Outcome.RETRYABLE, type(e).__name__, one_line(str(e) or "timed out"))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


async def _read_bounded(response: aiohttp.ClientResponse) -> bytes:
    """The body, cut at :data:`MAX_RESPONSE_BYTES` so a misbehaving upstream cannot exhaust memory."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(64 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_RESPONSE_BYTES:
            break
    return b"".join(chunks)[:MAX_RESPONSE_BYTES]


def _response_result(response: aiohttp.ClientResponse, content: bytes) -> AttemptResult:
    status = f"HTTP {response.status}"
    outcome = http_outcome(response.status)
    if outcome is Outcome.SUCCESS:
        return success_result(content, status)
    delay = parse_retry_after(response.headers.get("Retry-After")) if outcome is Outcome.RETRYABLE else None
    return AttemptResult(outcome, status, _error_message(response, content), delay)


def _error_message(response: aiohttp.ClientResponse, content: bytes) -> str:
    """An OTLP error body is a protobuf ``google.rpc.Status``; anything else is shown as text."""
    if response.content_type == PROTOBUF:
        try:
            return one_line(status_pb2.Status.FromString(content).message)
        except DecodeError:
            return ""
    return one_line(content.decode("utf-8", "replace"))
