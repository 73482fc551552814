"""Probe latency while ``otelloop serve`` processes one very large request.

    python benchmarks/bench_health.py [--grpc-spans 731000] [--json-mib 39] [--cases grpc,json]

Starts a counting sink and ``otelloop serve`` (every detector on) forwarding to it, then sends one large
request: ``grpc`` = identical ``read_file`` tool spans over OTLP/gRPC (731,000 spans is 61 MB), ``json`` =
the same spans as an OTLP/JSON body of about ``--json-mib`` MiB over OTLP/HTTP. Meanwhile one thread polls
``/healthz`` and ``/readyz`` every 100 ms (10 s timeout, like a patient probe) and another sends a small
10-span request of another session every 250 ms. Reports the probes' latency (max, p99, how many took over
1 s or failed) and the small requests' (max, failures). With ``--time-callbacks`` it also reports how long
the longest event-loop callbacks held the loop, in CPU time of the loop's thread, a figure that other load
on the machine does not inflate (see ``loop_timing.py``).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from large_requests import METHOD, Otelloop, as_otlp_json, identical_tool_spans, tool_spans

HERE = Path(__file__).parent


class Probes(threading.Thread):
    """GET /healthz and /readyz alternately every ``interval`` seconds, recording each latency."""

    def __init__(self, admin: str, interval: float = 0.1, timeout: float = 10.0) -> None:
        super().__init__(daemon=True)
        self.admin, self.interval, self.timeout = admin, interval, timeout
        self.latencies: list[float] = []
        self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        paths = ("/healthz", "/readyz")
        i = 0
        while not self.stopped.is_set():
            started = time.perf_counter()
            try:
                with urllib.request.urlopen(f"http://{self.admin}{paths[i % 2]}", timeout=self.timeout) as r:
                    r.read()
                    ok = r.status == 200
            except Exception:
                ok = False
            took = time.perf_counter() - started
            self.latencies.append(took)
            self.failures += not ok
            i += 1
            self.stopped.wait(max(0.0, self.interval - took))

    def summary(self) -> str:
        lat = sorted(self.latencies)
        p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else 0.0
        return (f"{len(lat)} probes, max {max(lat, default=0) * 1000:,.0f} ms, p99 {p99 * 1000:,.0f} ms, "
                f"median {statistics.median(lat) * 1000 if lat else 0:,.0f} ms, over 1 s: "
                f"{sum(x > 1 for x in lat)}, failed or timed out: {self.failures}")


class SmallClient(threading.Thread):
    """Another client: a 10-span request of its own session every ``interval`` seconds."""

    def __init__(self, target: str, interval: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.target, self.interval = target, interval
        self.latencies: list[float] = []
        self.failures = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        data = tool_spans(10)
        with grpc.insecure_channel(self.target) as channel:
            call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            while not self.stopped.is_set():
                started = time.perf_counter()
                try:
                    call(data, timeout=10)
                except grpc.RpcError:
                    self.failures += 1
                self.latencies.append(time.perf_counter() - started)
                self.stopped.wait(self.interval)

    def summary(self) -> str:
        return (f"{len(self.latencies)} small requests, max {max(self.latencies, default=0) * 1000:,.0f} ms, "
                f"failed {self.failures}")


def send_grpc(target: str, data: bytes) -> str:
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 256 << 20)]) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        try:
            call(data, timeout=900)
            return "OK"
        except grpc.RpcError as e:
            return str(e.code().name)


def send_json(address: str, body: bytes) -> str:
    request = urllib.request.Request(f"http://{address}/v1/traces", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=900) as r:
            return f"HTTP {r.status}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"


def json_body(mib: float) -> tuple[bytes, int]:
    per_span = len(as_otlp_json(identical_tool_spans(1000))) / 1000
    n = int(mib * (1 << 20) / per_span)
    return as_otlp_json(identical_tool_spans(n)), n


def run(case: str, args: argparse.Namespace, tmp: Path) -> None:
    if case == "grpc":
        data, spans = identical_tool_spans(args.grpc_spans), args.grpc_spans
    else:
        data, spans = json_body(args.json_mib)
    sink = subprocess.Popen([sys.executable, str(HERE / "sink.py"), "0"], stdout=subprocess.PIPE, text=True)
    port = sink.stdout.readline().strip()  # type: ignore[union-attr]
    o = Otelloop(tmp, {"exporter": {"endpoint": f"grpc://127.0.0.1:{port}", "queue_spans": 2_000_000},
                       "state": {"idle_timeout": "1h"}}, time_callbacks=args.time_callbacks)
    try:
        probes, small = Probes(o.addresses["admin"]), SmallClient(o.addresses["grpc"])
        probes.start()
        small.start()
        time.sleep(1)
        started = time.perf_counter()
        status = send_grpc(o.addresses["grpc"], data) if case == "grpc" else send_json(o.addresses["http"], data)
        took = time.perf_counter() - started
        time.sleep(0.5)
        probes.stopped.set()
        small.stopped.set()
        probes.join(15)
        small.join(15)
        size = f"{len(data) / 1e6:.1f} MB ({len(data) / (1 << 20):.1f} MiB)"
        print(f"{case}: {size}, {spans:,} spans: {status} "
              f"in {took:.1f}s\n  probes: {probes.summary()}\n  other client: {small.summary()}", flush=True)
    finally:
        o.stop()
        sink.send_signal(signal.SIGTERM)
        sink.communicate(timeout=60)
    if args.time_callbacks:
        r = o.callback_report()
        print(f"  event loop: {r.get('callbacks', 0):,} callbacks, longest (CPU of the loop's thread) "
              f"{r.get('longest_ms', [])[:5]} ms, over 50 ms: {r.get('over_50ms')}, over 100 ms: "
              f"{r.get('over_100ms')}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="grpc,json")
    ap.add_argument("--grpc-spans", type=int, default=731_000)
    ap.add_argument("--json-mib", type=float, default=39)
    ap.add_argument("--time-callbacks", action="store_true",
                    help="run otelloop under loop_timing.py and report its longest event-loop callbacks")
    args = ap.parse_args()
    for case in args.cases.split(","):
        with tempfile.TemporaryDirectory() as d:
            run(case, args, Path(d))


if __name__ == "__main__":
    main()
