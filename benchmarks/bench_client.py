"""Load generator: sends pre-built batches over OTLP/gRPC for a fixed time and reports what was acknowledged.

``python bench_client.py TARGET SECONDS CONCURRENCY BATCH_FILE`` → one JSON line on stdout.

Every request is sent with fresh span ids (8 random bytes written over each span's id in a copy of the
batch): the batches are cycled, and a span arriving again is a duplicate the server drops without running
its detectors, which is not the work a stream of new spans costs.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import sys
import time

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def span_id_offsets(data: bytes) -> list[int]:
    """Where each span's 8-byte id lies in the serialised request (after its field tag and length)."""
    request = ExportTraceServiceRequest.FromString(data)
    ids = [sp.span_id for rs in request.resource_spans for ss in rs.scope_spans for sp in ss.spans]
    return [data.index(b"\x12\x08" + span_id) + 2 for span_id in ids]


def with_fresh_ids(data: bytes, offsets: list[int]) -> bytes:
    """A copy of the request whose spans carry new random span ids."""
    buf = bytearray(data)
    fresh = os.urandom(8 * len(offsets))
    for k, at in enumerate(offsets):
        buf[at:at + 8] = fresh[8 * k:8 * k + 8]
    return bytes(buf)


async def main(target: str, seconds: float, concurrency: int, batch_file: str) -> None:
    with open(batch_file, "rb") as f:
        batches: list[tuple[bytes, int]] = pickle.load(f)
    offsets = [span_id_offsets(data) for data, _ in batches]
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        await call(batches[0][0], timeout=30)  # warm-up
        acked: dict[str, float] = {"requests": 0, "spans": 0, "refused": 0}
        end = time.perf_counter() + seconds
        cursor = iter(range(1 << 62))

        async def worker() -> None:
            while time.perf_counter() < end:
                k = next(cursor) % len(batches)
                data, spans = batches[k]
                data = with_fresh_ids(data, offsets[k])
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
