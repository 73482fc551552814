"""The baseline: receive OTLP/gRPC and forward the bytes upstream, no parsing, no state.

``python passthrough.py LISTEN_PORT UPSTREAM`` — the same server stack otelloop uses (grpc.aio, raw-bytes
handler, an awaited upstream call per request), so the ratio isolates what otelloop adds.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
from rawgrpc import METHOD, serve_until_sigterm


async def main(port: int, upstream: str) -> None:
    channel = grpc.aio.insecure_channel(upstream, options=[("grpc.max_send_message_length", 256 << 20)])
    forward = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)

    async def export(data: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
        await forward(data, timeout=30)
        return b""

    await serve_until_sigterm(port, export)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2]))
