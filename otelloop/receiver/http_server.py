"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or OTLP/JSON, gzip in and out.

Slow and vanishing clients: the body must arrive within ``receiver.http.read_body_timeout`` (else 408 and
the connection is closed); headers within ``read_header_timeout`` (applied by the listener, see
``otelloop.service``). A client that closes the connection mid-body costs one counted, rate-limited log
line. A large OTLP/JSON body is converted in a worker thread, span by span (``otelloop.otlp.json_codec``),
so the event loop keeps serving probes and other clients meanwhile.
"""

from __future__ import annotations

import asyncio
import gzip

import aiohttp
from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceResponse,
)

from otelloop.otlp.json_codec import JSONDecodeError, json_to_protobuf, json_to_protobuf_pieces
from otelloop.receiver.body import BadEncoding, BodyTooLarge, read_body
from otelloop.receiver.ingest import RETRY_AFTER_S, Accepted, BearerAuth, Ingest, Refusal
from otelloop.receiver.status import HTTP_CODES, status
from otelloop.resources import Ticket

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_EMPTY_RESPONSE = ExportTraceServiceResponse().SerializeToString()

#: OTLP/JSON bodies up to this size are converted on the event loop (a few milliseconds); larger ones in a
#: worker thread.
INLINE_JSON_BYTES = 256 * 1024

#: Errors a body read ends with when the client is gone (connection reset, truncated chunked body).
_CLIENT_GONE = (ConnectionError, aiohttp.ClientPayloadError, asyncio.IncompleteReadError)


class ClientGone(Exception):
    """The client closed the connection before its request was read whole."""


class HttpReceiver:
    """The aiohttp application serving OTLP/HTTP traces.

    Args:
        ingest: the shared admission path.
        max_request_bytes: limit on the decompressed body (413 beyond it).
        auth: bearer tokens checked against the ``Authorization`` header.
        body_timeout: seconds allowed to receive a whole body (408 and the connection closed beyond it).
    """

    def __init__(self, ingest: Ingest, max_request_bytes: int, auth: BearerAuth,
                 body_timeout: float = 60.0) -> None:
        self.ingest = ingest
        self.limit = max_request_bytes
        self.auth = auth
        self.body_timeout = body_timeout
        self._large_json: asyncio.Semaphore | None = None  # one large OTLP/JSON conversion at a time
        self.app = web.Application(client_max_size=max_request_bytes)
        self.app.router.add_post("/v1/traces", self._traces)

    async def _traces(self, request: web.Request) -> web.StreamResponse:
        with self.ingest.serving():
            return await self._serve(request)

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        ctype = request.content_type
        if ctype not in (_PROTOBUF, _JSON):
            return web.Response(status=415, text=f"unsupported content type {ctype!r}; use {_PROTOBUF} or {_JSON}")
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            return web.Response(status=415, text=f"unsupported content encoding {encoding!r}; use gzip or none")
        with self.ingest.ticket() as ticket:
            try:
                self._check_auth(request)
                data = await self._read(request, ctype, ticket)
                accepted = await self.ingest.handle(data, "http", ticket)
            except Refusal as refusal:
                self.ingest.refused(refusal, "http")
                return self._refuse(request, ctype, refusal)
            except ClientGone as e:
                self.ingest.aborted("http", "client_gone", str(e))
                return web.Response(status=400, text="the request body was cut short")
            except TimeoutError:
                self.ingest.aborted("http", "timeout", f"body not received within {self.body_timeout:g}s")
                return await self._close_with(request, web.Response(
                    status=408, text=f"the request body did not arrive within {self.body_timeout:g}s"))
        return self._accepted(request, ctype, accepted)

    @staticmethod
    async def _close_with(request: web.Request, response: web.Response) -> web.Response:
        """Send ``response`` and close the connection at once (a slow client's rest is not waited for)."""
        response.force_close()
        await response.prepare(request)
        await response.write_eof()
        if request.transport is not None:
            request.transport.close()
        return response

    def _check_auth(self, request: web.Request) -> None:
        if self.auth.enabled and not self.auth.check(request.headers.get("Authorization")):
            raise Refusal("unauthenticated", "missing or invalid bearer token")

    async def _read(self, request: web.Request, ctype: str, ticket: Ticket) -> bytes:
        """The body as protobuf, charged to ``ticket`` as it grows: the body as sent (before it is read, when
        its length is declared), then what decompression and OTLP/JSON conversion add."""
        declared = request.content_length or 0
        self.ingest.charge(ticket, declared, "a request body announced")
        try:
            async with asyncio.timeout(self.body_timeout):
                body = await read_body(request, self.limit)
        except BodyTooLarge:
            raise Refusal("too_large", f"request exceeds {self.limit} bytes after decompression") from None
        except BadEncoding as e:
            raise Refusal("invalid", str(e)) from None
        except _CLIENT_GONE as e:
            raise ClientGone(type(e).__name__) from None
        if len(body) != declared:  # decompressed, or sent without a declared length
            self.ingest.charge(ticket, len(body), "a request body read")
        if ctype == _JSON:
            try:
                if len(body) <= INLINE_JSON_BYTES:
                    data = json_to_protobuf(body)
                else:
                    if self._large_json is None:
                        self._large_json = asyncio.Semaphore(1)
                    async with self._large_json:
                        data = await asyncio.to_thread(json_to_protobuf_pieces, body)
            except JSONDecodeError as e:
                raise Refusal("invalid", f"invalid OTLP/JSON: {e}") from None
            self.ingest.charge(ticket, len(data), "a request converted from OTLP/JSON")
            return data
        return body

    def _accepted(self, request: web.Request, ctype: str, accepted: Accepted) -> web.Response:
        """Full success, or a partial success naming the spans refused and why."""
        if not accepted.rejected:
            return self._respond(request, b"{}" if ctype == _JSON else _EMPTY_RESPONSE, ctype, 200)
        answer = ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
            rejected_spans=accepted.rejected, error_message=accepted.message))
        body = (json_format.MessageToJson(answer, indent=None).encode() if ctype == _JSON
                else answer.SerializeToString())
        return self._respond(request, body, ctype, 200)

    def _refuse(self, request: web.Request, ctype: str, refusal: Refusal) -> web.StreamResponse:
        retry = RETRY_AFTER_S if refusal.reason == "backpressure" else None
        st = status(refusal.reason, refusal.message, retry)
        body = json_format.MessageToJson(st, indent=None).encode() if ctype == _JSON else st.SerializeToString()
        response = self._respond(request, body, ctype, HTTP_CODES[refusal.reason])
        if retry is not None:
            response.headers["Retry-After"] = str(retry)
        if refusal.reason == "unauthenticated":
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @staticmethod
    def _respond(request: web.Request, body: bytes, ctype: str, code: int) -> web.Response:
        headers = {}
        if "gzip" in request.headers.get("Accept-Encoding", "").lower():
            body = gzip.compress(body, compresslevel=1)
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, status=code, content_type=ctype, headers=headers)
