"""A counting OTLP/gRPC sink (raw bytes, no parsing) for the benchmarks: ``python sink.py PORT``."""

from __future__ import annotations

import asyncio
import sys

import grpc
from rawgrpc import serve_until_sigterm


async def main(port: int) -> None:
    count = {"requests": 0, "bytes": 0}

    async def export(data: bytes, ctx: grpc.aio.ServicerContext) -> bytes:
        count["requests"] += 1
        count["bytes"] += len(data)
        return b""

    await serve_until_sigterm(port, export)
    print(count, flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 0))
