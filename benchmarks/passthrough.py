"""The baseline: receive OTLP/gRPC and forward the bytes upstream, no parsing, no state.

``python passthrough.py LISTEN_PORT UPSTREAM`` — the same server stack otelloop uses (grpc.aio, raw-bytes
handler, an awaited upstream call per request), so the ratio isolates what otelloop adds.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import grpc

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
METHOD = f"/{SERVICE}/Export"


async def main(port: int, upstream: str) -> None:
    channel = grpc.aio.insecure_channel(upstream, options=[("grpc.max_send_message_length", 256 << 20)])
    forward = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)

    async def export(data: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
        await forward(data, timeout=30)
        return b""

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(export, request_deserializer=None,
                                                      response_serializer=None)}),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(bound, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
