"""What open console pages cost the pipeline, measured piece by piece in process (robust to a busy machine).

    python benchmarks/bench_console.py [--live-sessions 100000] [--pages 10] [--rounds 10]

1. **Span path, A/B**: CPU per span of ``Pipeline.process`` over the benchmark workload with no event
   stream client (nothing registered) and with the stream's sinks registered, alternated ``--rounds``
   times; medians.
2. **Stream flush**: CPU of one flush (coalesce, redact, serialise, hand to ``--pages`` clients) after
   half a second of the workload at the throughput measured in 1.
3. **List computations**: CPU of computing the console's two lists (``/v1/sessions?limit=100&findings=false``
   and ``/v1/alerts?limit=50``) over the live sessions, through the real handlers.

Then the total per second with ``--pages`` pages open (2 flushes a second; with ``max_age`` the pages share
at most one computation of each list per flush), as a share of one core and as µs per span.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from workload import build_batch

from otelloop.admin import AdminAPI
from otelloop.config import build_config
from otelloop.events import FLUSH_INTERVAL, EventHub, StreamClient
from otelloop.pipeline import Pipeline
from otelloop.telemetry import Metrics


def cpu_per_span(pipeline: Pipeline, batches: list[bytes]) -> float:
    decoded = [pipeline.decode(b) for b in batches]
    started = time.process_time()
    spans = 0
    for d in decoded:
        spans += pipeline.process(d).spans
    return 1e6 * (time.process_time() - started) / spans


def subscribe(hub: EventHub, n: int) -> list[StreamClient]:
    """``n`` stream clients that never write (the hub is sized to take them all)."""
    clients = [hub.subscribe(lambda: None) for _ in range(n)]
    taken = [c for c in clients if c is not None]
    assert len(taken) == n, "the hub refused a client"
    return taken


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--live-sessions", type=int, default=100_000)
    ap.add_argument("--pages", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--batches", type=int, default=16, help="512-span batches per measurement")
    args = ap.parse_args()

    config = build_config({"state": {"max_sessions": args.live_sessions + 10_000, "idle_timeout": "1h"}}, env={})
    metrics = Metrics()
    pipeline = Pipeline(config, metrics)
    per = 2048
    for k in range(0, args.live_sessions, per):  # other sessions, 4 steps each, as a busy deployment holds
        n = min(per, args.live_sessions - k)
        pipeline.process(pipeline.decode(build_batch(4 * n, n, seed=10_000 + k, session_base=1_000_000_000 + k)))
    batches = [build_batch(512, 16, seed=i, session_base=(i % 64) * 16) for i in range(args.batches * 4)]
    for batch in batches:  # warm: the workload's sessions exist and loop
        pipeline.process(pipeline.decode(batch))
    print(f"{len(pipeline.store):,} live sessions, {pipeline.store.verdict_counts()}, "
          f"{len(pipeline.store.alerts):,} alerting", flush=True)

    hub = EventHub(pipeline, metrics, max_clients=args.pages + 1)
    clients = []
    without, with_ = [], []
    chunk = batches[:args.batches]
    for _ in range(args.rounds):
        without.append(cpu_per_span(pipeline, chunk))
        clients = subscribe(hub, args.pages)
        with_.append(cpu_per_span(pipeline, chunk))
        for c in clients:
            hub.unsubscribe(c)
    a, b = statistics.median(without), statistics.median(with_)
    print(f"span path: {a:.2f} µs/span with no stream client, {b:.2f} µs/span with {args.pages} "
          f"({100 * (b - a) / a:+.1f} %; rounds {' '.join(f'{x:.1f}' for x in without)} | "
          f"{' '.join(f'{x:.1f}' for x in with_)})", flush=True)

    spans_per_s = 1e6 / a
    clients = subscribe(hub, args.pages)
    per_flush = max(1, int(spans_per_s * FLUSH_INTERVAL / 512))
    flushes = []
    for r in range(5):
        for batch in batches[r * per_flush % len(batches):][:per_flush] or batches[:per_flush]:
            pipeline.process(pipeline.decode(batch))
        pending = len(hub._pending)
        started = time.process_time()
        hub.flush()
        for c in clients:  # the writers take the chunk
            while c.buffer:
                c.buffer.popleft()
            c.buffered = 0
        flushes.append((1e3 * (time.process_time() - started), pending))
    flush_ms = statistics.median(f[0] for f in flushes)
    print(f"stream flush: {flush_ms:.2f} ms CPU per flush of ~{flushes[-1][1]} raw events "
          f"({per_flush} batches = {FLUSH_INTERVAL}s at {spans_per_s:,.0f} spans/s) for {args.pages} clients",
          flush=True)

    from aiohttp.test_utils import TestClient, TestServer

    api = AdminAPI(pipeline, lambda: (True, ""), events=hub)
    lists = {}
    async with TestClient(TestServer(api.app)) as http:
        for path in ("/v1/sessions?limit=100&findings=false", "/v1/alerts?limit=50"):
            times = []
            for _ in range(20):
                started = time.process_time()
                response = await http.get(path)
                await response.read()
                times.append(1e3 * (time.process_time() - started))
            lists[path] = statistics.median(times)
            print(f"list {path}: {lists[path]:.2f} ms CPU (request included)", flush=True)
    for c in clients:
        hub.unsubscribe(c)

    per_second = 2 * flush_ms + 2 * sum(lists.values())  # each list computed at most once per flush
    share = per_second / 1000
    print(f"{args.pages} open pages, events flowing: ≤ {per_second:.1f} ms CPU per second = {100 * share:.1f} % "
          f"of one core; at {spans_per_s:,.0f} spans/s that is {1e3 * per_second / spans_per_s:.2f} µs per span "
          f"on top of {a:.1f} (plus the span-path difference above)")


if __name__ == "__main__":
    asyncio.run(main())
