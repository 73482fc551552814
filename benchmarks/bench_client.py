"""Load generator: sends pre-built batches over OTLP/gRPC for a fixed time and reports what was acknowledged.

``python bench_client.py TARGET SECONDS CONCURRENCY BATCH_FILE`` → one JSON line on stdout.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import sys
import time

import grpc

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


async def main(target: str, seconds: float, concurrency: int, batch_file: str) -> None:
    with open(batch_file, "rb") as f:
        batches: list[tuple[bytes, int]] = pickle.load(f)
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        await call(batches[0][0], timeout=30)  # warm-up
        acked = {"requests": 0, "spans": 0, "refused": 0}
        end = time.perf_counter() + seconds
        cursor = iter(range(1 << 62))

        async def worker() -> None:
            while time.perf_counter() < end:
                data, spans = batches[next(cursor) % len(batches)]
                try:
                    await call(data, timeout=30)
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    acked["refused"] += 1
                    await asyncio.sleep(0.01)
                    continue
                acked["requests"] += 1
                acked["spans"] += spans

        started = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(concurrency)])
        acked["seconds"] = time.perf_counter() - started
    print(json.dumps(acked), flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
