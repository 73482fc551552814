"""An OTLP sink with the size limits of a real backend, for the large-request probes.

    python limited_sink.py LIMIT_BYTES

Serves OTLP/gRPC with ``grpc.max_receive_message_length = LIMIT_BYTES`` (the way an OpenTelemetry
Collector refuses a request: RESOURCE_EXHAUSTED on the decompressed message) and OTLP/HTTP ``POST
/v1/traces`` that answers 413 to a body larger than LIMIT_BYTES as sent, both on 127.0.0.1. Prints
``{"grpc": port, "http": port}`` once listening; on SIGTERM prints what arrived: requests, spans,
distinct span ids, duplicates and the largest request, per transport.
"""

from __future__ import annotations

import asyncio
import collections
import gzip
import json
import signal
import sys

import grpc
from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class Tally:
    """What one transport received."""

    def __init__(self) -> None:
        self.requests = 0
        self.too_large = 0
        self.largest = 0
        self.ids: collections.Counter[bytes] = collections.Counter()

    def add(self, data: bytes, size_as_sent: int) -> None:
        self.requests += 1
        self.largest = max(self.largest, size_as_sent)
        request = ExportTraceServiceRequest.FromString(data)
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    self.ids[span.span_id] += 1

    def summary(self) -> dict[str, int]:
        spans = sum(self.ids.values())
        return {"requests": self.requests, "refused_too_large": self.too_large, "largest_bytes": self.largest,
                "spans": spans, "distinct": len(self.ids), "duplicates": spans - len(self.ids)}


async def main(limit: int) -> None:
    tallies = {"grpc": Tally(), "http": Tally()}

    async def export(data: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
        tallies["grpc"].add(data, len(data))
        return b""

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(export, request_deserializer=None,
                                                      response_serializer=None)}),))
    grpc_port = server.add_insecure_port("127.0.0.1:0")
    await server.start()

    async def traces(request: web.Request) -> web.Response:
        raw = await request.read()
        if len(raw) > limit:
            tallies["http"].too_large += 1
            return web.Response(status=413, text=f"body of {len(raw)} bytes exceeds {limit}")
        data = gzip.decompress(raw) if request.headers.get("Content-Encoding") == "gzip" else raw
        tallies["http"].add(data, len(raw))
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/v1/traces", traces)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    http_port = runner.addresses[0][1]
    print(json.dumps({"grpc": grpc_port, "http": http_port}), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)
    await runner.cleanup()
    print(json.dumps({k: t.summary() for k, t in tallies.items()}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1])))
