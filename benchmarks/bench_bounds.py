"""Hostile-input bounds of ``otelloop serve``: RSS under long names, and metric series under many labels.

    python benchmarks/bench_bounds.py names [--requests 2000] [--name-kib 768] [--max-sessions 10]
                                            [--field tool|tool-attribute|agent|service|model]
    python benchmarks/bench_bounds.py series [--services 150] [--models 150]

``names`` sends ``--requests`` requests over gRPC, each one tool span whose ``--field`` (by default the tool
name, in the span name ``execute_tool <name>``) is ``--name-kib`` KiB long and differs from every other
request's only in its last characters, and prints the RSS of the server before and after and whether
``/readyz`` still answers 200.
``series`` sends one LLM step per (service, model) pair with token counts and prints the samples, bytes
and duration of one ``/metrics`` scrape.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

sys.path.insert(0, str(Path(__file__).parent))
from bench_pipeline import start
from procinfo import rss_mib

HERE = Path(__file__).parent
METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
T0 = 1_700_000_000_000_000_000


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _kv(key: str, value: str | int) -> KeyValue:
    v = AnyValue(int_value=value) if isinstance(value, int) else AnyValue(string_value=value)
    return KeyValue(key=key, value=v)


def one_span_request(i: int, attrs: dict[str, str | int], name: str, service: str) -> bytes:
    span = Span(name=name, trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                start_time_unix_nano=T0 + i * 10**9, end_time_unix_nano=T0 + i * 10**9 + 10**8,
                attributes=[_kv(k, v) for k, v in attrs.items()])
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])
    rs.resource.attributes.append(_kv("service.name", service))
    data: bytes = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    return data


def service_request(service: int, models: int) -> bytes:
    """One LLM step with token counts per model, all from service ``service-<service>``."""
    spans = []
    for m in range(models):
        i = service * models + m
        attrs = [_kv("gen_ai.operation.name", "chat"), _kv("gen_ai.request.model", f"model-{m}"),
                 _kv("gen_ai.usage.input_tokens", 10), _kv("gen_ai.usage.output_tokens", 5)]
        spans.append(Span(name="chat", trace_id=(i + 1).to_bytes(16, "big"),
                          span_id=(i + 1).to_bytes(8, "big"), start_time_unix_nano=T0,
                          end_time_unix_nano=T0 + 10**8, attributes=attrs))
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    rs.resource.attributes.append(_kv("service.name", f"service-{service}"))
    data: bytes = ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()
    return data


def long_name_request(i: int, field: str, size: int) -> bytes:
    """One tool span whose ``field`` is ``size`` bytes, distinct from request to request at its end."""
    long = ("x" * size)[:size - 12] + f"{i:012d}"
    attrs: dict[str, str | int] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file",
                                   "gen_ai.tool.call.arguments": '{"path": "a.py"}'}
    service, span_name = "svc", "execute_tool read_file"
    if field == "tool":  # in the span name: attribute values over mapping.max_text_bytes are not read
        del attrs["gen_ai.tool.name"]
        span_name = f"execute_tool {long}"
    elif field == "tool-attribute":
        attrs["gen_ai.tool.name"] = long
    elif field == "agent":
        attrs["gen_ai.agent.name"] = long
    elif field == "model":
        attrs["gen_ai.request.model"] = long
        attrs["gen_ai.usage.input_tokens"] = 10
    else:
        service = long
    return one_span_request(i, attrs, span_name, service)


def start_server(tmp: Path, config: dict[str, Any]) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    import yaml

    (tmp / "c.yaml").write_text(yaml.safe_dump(config))
    ready = tmp / "ready.json"
    with open(tmp / "stderr", "wb") as stderr:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "otelloop", "serve", "--config", str(tmp / "c.yaml"),
                                 "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
                                 "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(ready)],
                                stderr=stderr, env={**os.environ, "OTELLOOP_LOG_LEVEL": "WARNING"})
    deadline = time.monotonic() + 30
    while not ready.exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("otelloop did not start:\n" + (tmp / "stderr").read_text())
        time.sleep(0.05)
    return proc, json.loads(ready.read_text())


def names(args: argparse.Namespace, tmp: Path, upstream: str) -> None:
    config = {"exporter": {"endpoint": upstream, "compression": "none"},
              "state": {"max_sessions": args.max_sessions}}
    proc, addr = start_server(tmp, config)
    try:
        size = args.name_kib << 10
        refused = 0
        with grpc.insecure_channel(addr["grpc"], options=[("grpc.max_send_message_length", 64 << 20)]) as ch:
            call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            call(long_name_request(10**9, args.field, 1024), timeout=30)  # warm up
            base = rss_mib(proc.pid)
            peak = base
            started = time.perf_counter()
            for i in range(args.requests):
                try:
                    call(long_name_request(i, args.field, size), timeout=30)
                except grpc.RpcError:
                    refused += 1
                if i % 50 == 0:
                    peak = max(peak, rss_mib(proc.pid))
            elapsed = time.perf_counter() - started
        time.sleep(1.5)
        after = rss_mib(proc.pid)
        status, _ = http_get(f"http://{addr['admin']}/readyz")
        print(f"names: {args.requests:,} requests x one {args.field} name of {args.name_kib} KiB "
              f"(max_sessions {args.max_sessions}) in {elapsed:.1f}s: RSS {base:.0f} -> {after:.0f} MiB "
              f"(+{after - base:.0f} MiB, peak {max(peak, after):.0f}); refused {refused}; /readyz {status}")
    finally:
        proc.terminate()
        proc.wait(30)


def series(args: argparse.Namespace, tmp: Path, upstream: str) -> None:
    config = {"exporter": {"endpoint": upstream, "compression": "none"}}
    proc, addr = start_server(tmp, config)
    try:
        with grpc.insecure_channel(addr["grpc"]) as ch:
            call = ch.unary_unary(METHOD, request_serializer=None, response_deserializer=None)
            for s in range(args.services):
                call(service_request(s, args.models), timeout=30)
        http_get(f"http://{addr['admin']}/metrics")
        started = time.perf_counter()
        _, body = http_get(f"http://{addr['admin']}/metrics")
        took = time.perf_counter() - started
        text = body.decode()
        samples = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        tokens = sum(1 for line in text.splitlines() if line.startswith("otelloop_tokens_total{"))
        print(f"series: {args.services} services x {args.models} models: /metrics {samples:,} samples "
              f"({tokens:,} otelloop_tokens_total), {len(body) / 1e6:.2f} MB, "
              f"scraped in {took * 1e3:.0f} ms; "
              f"RSS {rss_mib(proc.pid):.0f} MiB")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="probe", required=True)
    n = sub.add_parser("names")
    n.add_argument("--requests", type=int, default=2000)
    n.add_argument("--name-kib", type=int, default=768)
    n.add_argument("--max-sessions", type=int, default=10)
    n.add_argument("--field", choices=["tool", "tool-attribute", "agent", "service", "model"], default="tool")
    s = sub.add_parser("series")
    s.add_argument("--services", type=int, default=150)
    s.add_argument("--models", type=int, default=150)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        sink, sink_port = start([sys.executable, str(HERE / "sink.py"), "0"])
        try:
            (names if args.probe == "names" else series)(args, Path(d), f"grpc://127.0.0.1:{sink_port}")
        finally:
            sink.terminate()
            sink.wait(30)


if __name__ == "__main__":
    main()
