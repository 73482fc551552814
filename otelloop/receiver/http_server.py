"""OTLP/HTTP receiver: ``POST /v1/traces`` with protobuf or OTLP/JSON, gzip in and out (SPEC §2)."""

from __future__ import annotations

import gzip

from aiohttp import web
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from otelloop.otlp.json_codec import JSONDecodeError, json_to_protobuf
from otelloop.receiver.body import BadEncoding, BodyTooLarge, read_body
from otelloop.receiver.ingest import RETRY_AFTER_S, BearerAuth, Ingest, Refusal
from otelloop.receiver.status import HTTP_CODES, status

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_EMPTY_RESPONSE = ExportTraceServiceResponse().SerializeToString()


class HttpReceiver:
    """The aiohttp application serving OTLP/HTTP traces.

    Args:
        ingest: the shared admission path.
        max_request_bytes: limit on the decompressed body (413 beyond it).
        auth: bearer tokens checked against the ``Authorization`` header.
    """

    def __init__(self, ingest: Ingest, max_request_bytes: int, auth: BearerAuth) -> None:
        self.ingest = ingest
        self.limit = max_request_bytes
        self.auth = auth
        self.app = web.Application(client_max_size=max_request_bytes)
        self.app.router.add_post("/v1/traces", self._traces)

    async def _traces(self, request: web.Request) -> web.StreamResponse:
        ctype = request.content_type
        if ctype not in (_PROTOBUF, _JSON):
            return web.Response(status=415, text=f"unsupported content type {ctype!r}; use {_PROTOBUF} or {_JSON}")
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("", "identity", "gzip"):
            return web.Response(status=415, text=f"unsupported content encoding {encoding!r}; use gzip or none")
        try:
            self._check_auth(request)
            data = await self._read(request, ctype)
            self.ingest.handle(data, "http")
        except Refusal as refusal:
            self.ingest.refused(refusal, "http")
            return self._refuse(request, ctype, refusal)
        if ctype == _JSON:
            return self._respond(request, b"{}", _JSON, 200)
        return self._respond(request, _EMPTY_RESPONSE, _PROTOBUF, 200)

    def _check_auth(self, request: web.Request) -> None:
        if self.auth.enabled and not self.auth.check(request.headers.get("Authorization")):
            raise Refusal("unauthenticated", "missing or invalid bearer token")

    async def _read(self, request: web.Request, ctype: str) -> bytes:
        try:
            body = await read_body(request, self.limit)
        except BodyTooLarge:
            raise Refusal("too_large", f"request exceeds {self.limit} bytes after decompression") from None
        except BadEncoding as e:
            raise Refusal("invalid", str(e)) from None
        if ctype == _JSON:
            try:
                return json_to_protobuf(body)
            except JSONDecodeError as e:
                raise Refusal("invalid", f"invalid OTLP/JSON: {e}") from None
        return body

    def _refuse(self, request: web.Request, ctype: str, refusal: Refusal) -> web.StreamResponse:
        retry = RETRY_AFTER_S if refusal.reason == "backpressure" else None
        st = status(refusal.reason, refusal.message, retry)
        if ctype == _JSON:
            body = json_format.MessageToJson(st, indent=None).encode()
        else:
            body = st.SerializeToString()
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
