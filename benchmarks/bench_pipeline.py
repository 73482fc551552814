"""Throughput of ``otelloop serve`` against a bare passthrough, measured in the same run.

Every process is its own: the server under test is pinned to CPU 0 (one core); the client and the sink
share CPU 1. The passthrough receives and forwards bytes with the same gRPC stack and no parsing, so the
ratio is what otelloop's decode, mapping, state, detectors and enrichment cost. Machines here are noisy:
compare ratios from one run, not absolute numbers across runs.

    python benchmarks/bench_pipeline.py [--seconds 8] [--modes passthrough,mapping,all]
        [--live-sessions 100000] [--event-clients 10]

``--live-sessions N`` fills the server with N other sessions before the timed run (as a busy deployment
holds); ``--event-clients N`` keeps N console-like clients (``sse_clients.py``: open event streams that
reload the session lists while events arrive) connected during it, on CPU 1 with the load generator.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from procinfo import cpu_seconds
from workload import build_batch

HERE = Path(__file__).parent
DETECTORS = ("divergence", "rate", "drift", "entropy", "stall", "trajectory")


def pinned(cpu: int, cmd: list[str]) -> list[str]:
    return (["taskset", "-c", str(cpu)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []) + cmd


def start(cmd: list[str], **kw: Any) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)
    line = p.stdout.readline().strip()  # type: ignore[union-attr]
    return p, line


def start_otelloop(tmp: Path, upstream: str, detectors: str,
                   live_sessions: int = 0) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    import yaml

    config = {"exporter": {"endpoint": upstream, "compression": "none"},
              "state": {"idle_timeout": "1h", "max_sessions": max(100_000, live_sessions + 10_000)}}
    if detectors == "none":
        config["detectors"] = {d: {"enabled": False} for d in DETECTORS}
    cfg = tmp / f"otelloop-{detectors}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    ready = tmp / f"ready-{detectors}.json"
    ready.unlink(missing_ok=True)
    p = subprocess.Popen(pinned(0, [sys.executable, "-m", "otelloop", "serve", "--config", str(cfg),
                                    "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                                    "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(ready)]),
                         stderr=subprocess.DEVNULL, env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING"})
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline or p.poll() is not None:
            raise RuntimeError("otelloop did not start")
        time.sleep(0.05)
    return p, json.loads(ready.read_text())


def prefill(target: str, sessions: int) -> None:
    """Create ``sessions`` live sessions (4 steps each) that the timed workload never touches."""
    import grpc

    per = 2048
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
        call = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        for k in range(0, sessions, per):
            n = min(per, sessions - k)
            call(build_batch(4 * n, n, seed=10_000 + k, session_base=1_000_000_000 + k), timeout=120)


def run_mode(mode: str, tmp: Path, batch_file: Path, seconds: float, concurrency: int, live_sessions: int = 0,
             event_clients: int = 0) -> dict[str, Any]:
    sink, sink_port = start(pinned(1, [sys.executable, str(HERE / "sink.py"), "0"]))
    upstream = f"127.0.0.1:{sink_port}"
    watchers = None
    server: subprocess.Popen[Any]  # text from passthrough.py's first line, bytes from otelloop's ready file
    if mode == "passthrough":
        server, port = start(pinned(0, [sys.executable, str(HERE / "passthrough.py"), "0", upstream]))
        target = f"127.0.0.1:{port}"
    else:
        server, addresses = start_otelloop(tmp, f"grpc://{upstream}", "none" if mode == "mapping" else "all",
                                           live_sessions)
        target = addresses["grpc"]
        if live_sessions:
            prefill(target, live_sessions)
        if event_clients:
            watchers, line = start(pinned(1, [sys.executable, str(HERE / "sse_clients.py"), addresses["admin"],
                                              str(event_clients)]))
            assert line == "ready", line
    try:
        cpu0 = cpu_seconds(server.pid)
        out = subprocess.run(pinned(1, [sys.executable, str(HERE / "bench_client.py"), target, str(seconds),
                                        str(concurrency), str(batch_file)]),
                             capture_output=True, text=True, check=True).stdout
        cpu = cpu_seconds(server.pid) - cpu0
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    finally:
        if watchers is not None:
            watchers.send_signal(signal.SIGTERM)
            result_line = watchers.communicate(timeout=30)[0].strip().splitlines()
            watched = json.loads(result_line[-1]) if result_line else {}
        for p in (server, sink):
            p.send_signal(signal.SIGTERM)
            p.wait(30)
    result["mode"] = mode
    result["spans_per_s"] = result["spans"] / result["seconds"]
    result["server_cpu_us_per_span"] = 1e6 * cpu / max(result["spans"], 1)
    if watchers is not None:
        result["event_clients"] = watched
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--modes", default="passthrough,mapping,all")
    ap.add_argument("--sessions-per-batch", type=int, default=16)
    ap.add_argument("--distinct-batches", type=int, default=64)
    ap.add_argument("--live-sessions", type=int, default=0, help="other live sessions held during the run")
    ap.add_argument("--event-clients", type=int, default=0, help="console-like event stream clients")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        batches = [build_batch(512, args.sessions_per_batch, seed=i, session_base=i * args.sessions_per_batch)
                   for i in range(args.distinct_batches)]
        batch_file = tmp / "batches.pkl"
        batch_file.write_bytes(pickle.dumps([(b, 512) for b in batches]))
        print(f"workload: 512-span batches, {len(batches[0]) // 512} B/span, {args.sessions_per_batch} sessions "
              f"per batch, {args.distinct_batches} distinct batches; {args.seconds:.0f}s per mode, "
              f"{args.concurrency} in flight; server on CPU 0, client and sink on CPU 1", flush=True)
        results = {}
        for mode in args.modes.split(","):
            r = results[mode] = run_mode(mode, tmp, batch_file, args.seconds, args.concurrency,
                                         args.live_sessions, args.event_clients)
            watched = f"   event clients {r['event_clients']}" if "event_clients" in r else ""
            print(f"{mode:12} {r['spans_per_s']:>10,.0f} spans/s   server CPU {r['server_cpu_us_per_span']:6.2f} "
                  f"µs/span   refused {r['refused']}{watched}", flush=True)
        base = results.get("passthrough")
        if base:
            for mode, r in results.items():
                if mode != "passthrough":
                    print(f"ratio {mode}/passthrough: {r['spans_per_s'] / base['spans_per_s']:.3f}")


if __name__ == "__main__":
    main()
