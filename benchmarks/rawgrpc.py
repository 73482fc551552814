"""A raw-bytes OTLP/gRPC server for the benchmark processes (the sink and the passthrough baseline)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable

import grpc

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
METHOD = f"/{SERVICE}/Export"

Handler = Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]


async def serve_until_sigterm(port: int, export: Handler) -> None:
    """Serve ``export`` on 127.0.0.1:port (0 picks one, printed on stdout) until SIGTERM."""
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
    await server.stop(0)
