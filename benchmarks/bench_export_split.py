"""Large requests against an upstream that accepts at most 4 MiB: is every acknowledged span delivered once?

    python benchmarks/bench_export_split.py [--protocol grpc|http] [--limit-mib 4]

Starts ``limited_sink.py`` (OTLP/gRPC with ``grpc.max_receive_message_length``, OTLP/HTTP with a body limit)
and ``otelloop serve`` forwarding to it with every detector on, sends two requests over OTLP/gRPC and, once
the export queue has drained, compares what the client had acknowledged with what the sink received:

* ``identical``: 100,000 identical ``read_file`` tool spans (10.5 MB), which enrichment grows about sevenfold;
* ``tools``: 60,000 tool spans over 600 traces (5.7 MB), over the limit before any enrichment.

OTLP/HTTP runs with ``compression: none`` so the body as sent is the request itself.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

sys.path.insert(0, str(Path(__file__).parent))
from large_requests import METHOD, Otelloop, identical_tool_spans, tool_spans

HERE = Path(__file__).parent
CASES = {"identical": lambda: identical_tool_spans(100_000), "tools": lambda: tool_spans(60_000)}
COUNTERS = ("otelloop_spans_exported_total", "otelloop_spans_export_failed_total{reason=too_large}",
            "otelloop_spans_export_failed_total{reason=rejected}",
            "otelloop_spans_refused_total{reason=too_large,transport=grpc}",
            "otelloop_spans_enrichment_skipped_total{reason=too_large}")


def send(target: str, data: bytes) -> tuple[str, float]:
    started = time.perf_counter()
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 256 << 20)]) as channel:
        call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
        try:
            call(data, timeout=600)
            status = "OK"
        except grpc.RpcError as e:
            status = e.code().name
    return status, time.perf_counter() - started


def run_case(case: str, protocol: str, limit: int, tmp: Path) -> dict[str, Any]:
    sink = subprocess.Popen([sys.executable, str(HERE / "limited_sink.py"), str(limit)],
                            stdout=subprocess.PIPE, text=True)
    ports = json.loads(sink.stdout.readline())  # type: ignore[union-attr]
    endpoint = (f"grpc://127.0.0.1:{ports['grpc']}" if protocol == "grpc"
                else f"http://127.0.0.1:{ports['http']}")
    exporter = {"endpoint": endpoint, "retry_initial_interval": "100ms", "retry_max_interval": "1s"}
    if protocol == "http":
        exporter["compression"] = "none"
    data = CASES[case]()
    spans = {"identical": 100_000, "tools": 60_000}[case]
    o = Otelloop(tmp, {"exporter": exporter, "state": {"idle_timeout": "1h"}})
    try:
        status, seconds = send(o.addresses["grpc"], data)
        o.wait_drained()
        metrics = o.metrics()
    finally:
        o.stop()
        sink.send_signal(signal.SIGTERM)
        received = json.loads(sink.communicate(timeout=120)[0].strip().splitlines()[-1])[protocol]
    return {"case": case, "protocol": protocol, "request_bytes": len(data), "spans": spans, "status": status,
            "seconds": round(seconds, 2), "acknowledged": spans if status == "OK" else 0,
            "received": received,
            **{name: metrics.get(name, 0.0) for name in COUNTERS}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", default="grpc,http")
    ap.add_argument("--cases", default="identical,tools")
    ap.add_argument("--limit-mib", type=float, default=4)
    args = ap.parse_args()
    for protocol in args.protocol.split(","):
        for case in args.cases.split(","):
            with tempfile.TemporaryDirectory() as d:
                r = run_case(case, protocol, int(args.limit_mib * (1 << 20)), Path(d))
            got = r["received"]
            failed = {reason: r[f"otelloop_spans_export_failed_total{{reason={reason}}}"]
                      for reason in ("too_large", "rejected")}
            print(f"{protocol:4} {case:9} {r['request_bytes'] / 1e6:5.1f} MB {r['spans']:>7,} spans: client "
                  f"{r['status']} in {r['seconds']}s; upstream got {got['spans']:,} spans "
                  f"({got['distinct']:,} distinct, {got['duplicates']} duplicates) in {got['requests']} "
                  f"requests, largest {got['largest_bytes'] / (1 << 20):.2f} MiB; exported "
                  f"{r['otelloop_spans_exported_total']:,.0f}, failed too_large {failed['too_large']:,.0f} / "
                  f"rejected {failed['rejected']:,.0f}, refused "
                  f"{r['otelloop_spans_refused_total{reason=too_large,transport=grpc}']:,.0f}, unenriched "
                  f"{r['otelloop_spans_enrichment_skipped_total{reason=too_large}']:,.0f}", flush=True)


if __name__ == "__main__":
    main()
