"""A counting OTLP/gRPC sink (raw bytes, no parsing) for the benchmarks: ``python sink.py PORT``."""

from __future__ import annotations

import asyncio
import signal
import sys

import grpc

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


async def main(port: int) -> None:
    count = {"requests": 0, "bytes": 0}

    async def export(data: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
        count["requests"] += 1
        count["bytes"] += len(data)
        return b""

    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 256 << 20)])
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(export, request_deserializer=None,
                                                      response_serializer=None)}),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(bound, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    print(count, flush=True)
    await server.stop(0)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
