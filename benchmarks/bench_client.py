"""Load generator: sends a workload's requests over OTLP/gRPC and reports what was acknowledged.

    python bench_client.py TARGET SECONDS CONCURRENCY WORKLOAD_FILE [--requests N] [--rate R]

→ one JSON line on stdout. ``WORKLOAD_FILE`` is a pickle written by ``bench_pipeline.py`` (:func:`save`):
the requests and how each is made new when it is sent again.

- Closed loop (default): CONCURRENCY requests in flight for SECONDS (or until ``--requests`` were acknowledged);
  this measures the saturation rate.
- Open loop (``--rate R``): a request every 1/R s for SECONDS whatever the server does, each timed from the
  moment it was due (so a server that falls behind is charged for the wait it causes, not only for its own
  answer); reports p50, p99 and the largest latency.

Requests are cycled, and a request sent again is made new: a span arriving again is a duplicate the server
drops without running its detectors, which is not the work a stream of new spans costs. ``span_ids``
(the looping workload): 8 random bytes written over each span's id in a copy of the request, the sessions
stay the same. ``tokens`` (the realistic workload): every pass over the requests gets its own token in the
trace ids, conversation ids and texts (``workload.renew``), so runs never come back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).parent))
from workload import renew, token_of

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def save(path: Path, batches: list[bytes], spans: int, fresh: str) -> None:
    """Write a workload file: ``batches`` of ``spans`` spans each, made new by ``fresh`` (``span_ids`` or
    ``tokens``) when sent again."""
    path.write_bytes(pickle.dumps({"batches": batches, "spans": spans, "fresh": fresh}))


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


def request_source(batches: list[bytes], fresh: str) -> Callable[[], bytes]:
    """The requests to send, one per call, in order, each made new (see the module's docstring)."""
    count = iter(range(1 << 62))
    if fresh == "span_ids":
        offsets = [span_id_offsets(data) for data in batches]

        def with_new_span_ids() -> bytes:
            k = next(count) % len(batches)
            return with_fresh_ids(batches[k], offsets[k])

        return with_new_span_ids
    nonce = int.from_bytes(os.urandom(8), "big")

    def with_pass_tokens() -> bytes:
        k = next(count)
        cycle, at = divmod(k, len(batches))
        return renew(batches[at], token_of(nonce, cycle + 1), token_of(nonce, cycle))

    return with_pass_tokens


async def closed_loop(call: grpc.aio.UnaryUnaryMultiCallable, source: Callable[[], bytes], spans: int,
                      seconds: float, concurrency: int, requests: int | None) -> dict[str, float]:
    """CONCURRENCY senders, each sending its next request when the last one is answered."""
    acked = {"requests": 0, "spans": 0, "refused": 0}
    end = time.perf_counter() + seconds
    left = iter(range(requests)) if requests is not None else iter(range(1 << 62))

    async def worker() -> None:
        while time.perf_counter() < end and next(left, None) is not None:
            data = source()
            while True:  # a refused request is sent again, as an OTLP exporter retries it
                try:
                    await call(data, timeout=60)
                    break
                except grpc.aio.AioRpcError as e:
                    if e.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    acked["refused"] += 1
                    await asyncio.sleep(0.01)
            acked["requests"] += 1
            acked["spans"] += spans

    started = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return {**acked, "seconds": time.perf_counter() - started}


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0


async def open_loop(call: grpc.aio.UnaryUnaryMultiCallable, source: Callable[[], bytes], spans: int,
                    seconds: float, rate: float) -> dict[str, float]:
    """A request every ``1/rate`` s for ``seconds``, each timed from when it was due."""
    latencies: list[float] = []
    result = {"requests": 0, "spans": 0, "refused": 0, "failed": 0}

    async def send(data: bytes, due: float) -> None:
        try:
            await call(data, timeout=60)
        except grpc.aio.AioRpcError as e:
            result["refused" if e.code() == grpc.StatusCode.UNAVAILABLE else "failed"] += 1
            return
        latencies.append(time.perf_counter() - due)
        result["requests"] += 1
        result["spans"] += spans

    started = time.perf_counter()
    pending: set[asyncio.Task[None]] = set()
    for k in range(int(seconds * rate)):
        data = source()  # made before it is due, so the client's own work is not timed
        due = started + k / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(send(data, due))
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    return {**result, "seconds": time.perf_counter() - started, "rate": rate,
            "p50_ms": 1e3 * percentile(latencies, 0.50), "p99_ms": 1e3 * percentile(latencies, 0.99),
            "max_ms": 1e3 * max(latencies, default=0.0)}


async def main(args: argparse.Namespace) -> None:
    with open(args.workload_file, "rb") as f:
        workload = pickle.load(f)
    source = request_source(workload["batches"], workload["fresh"])
    options = [("grpc.max_send_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(args.target, options=options) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        await call(source(), timeout=60)  # warm-up
        if args.rate:
            result = await open_loop(call, source, workload["spans"], args.seconds, args.rate)
        else:
            result = await closed_loop(call, source, workload["spans"], args.seconds, args.concurrency,
                                       args.requests)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("seconds", type=float)
    ap.add_argument("concurrency", type=int)
    ap.add_argument("workload_file")
    ap.add_argument("--requests", type=int, help="closed loop: stop after this many requests")
    ap.add_argument("--rate", type=float, help="open loop: requests per second")
    asyncio.run(main(ap.parse_args()))
