"""Memory of session state: bytes per session and the RSS of ``otelloop serve`` with many live sessions.

    python benchmarks/bench_memory.py [--sessions 100000] [--steps 4] [--detectors all|none]

Each session gets ``--steps`` steps (chat, tool calls, an agent turn) so every detector holds state for it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from bench_pipeline import DETECTORS, start
from procinfo import rss_mib
from workload import build_batch

HERE = Path(__file__).parent
METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


async def feed(target: str, sessions: int, steps: int) -> None:
    per_batch = 512 // steps
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        for base in range(0, sessions, per_batch):
            n = min(per_batch, sessions - base)
            await call(build_batch(n * steps, n, seed=base, session_base=base), timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--detectors", choices=["all", "none"], default="all")
    args = ap.parse_args()
    import yaml

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sink, sink_port = start([sys.executable, str(HERE / "sink.py"), "0"])
        config = {"exporter": {"endpoint": f"grpc://127.0.0.1:{sink_port}", "compression": "none"},
                  "state": {"max_sessions": max(args.sessions, 1), "idle_timeout": "1h"}}
        if args.detectors == "none":
            config["detectors"] = {n: {"enabled": False} for n in DETECTORS}
        (tmp / "c.yaml").write_text(yaml.safe_dump(config))
        ready = tmp / "ready.json"
        proc = subprocess.Popen([sys.executable, "-m", "otelloop", "serve", "--config", str(tmp / "c.yaml"),
                                 "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                                 "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(ready)],
                                stderr=subprocess.DEVNULL, env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING"})
        try:
            while not ready.exists():
                time.sleep(0.05)
            target = json.loads(ready.read_text())["grpc"]
            asyncio.run(feed(target, 1024, args.steps))  # warm up imports, caches and gRPC buffers
            base = rss_mib(proc.pid)
            started = time.perf_counter()
            asyncio.run(feed(target, args.sessions, args.steps))
            elapsed = time.perf_counter() - started
            time.sleep(1)
            after = rss_mib(proc.pid)
            per = (after - base) * (1 << 20) / args.sessions
            print(f"detectors={args.detectors}: {args.sessions:,} sessions x {args.steps} steps in {elapsed:.1f}s; "
                  f"RSS {base:.0f} MiB -> {after:.0f} MiB; about {per:,.0f} bytes of state per session")
        finally:
            for p in (proc, sink):
                p.terminate()
                p.wait(30)


if __name__ == "__main__":
    main()
