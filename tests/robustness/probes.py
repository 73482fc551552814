"""Shared pieces of the robustness probes: large requests, a raw gRPC client, probe pollers.

Every probe runs a real ``otelloop serve`` subprocess and real sinks on 127.0.0.1 (the ``serve``, ``loop``
and sink fixtures of ``tests/conftest.py``); processes are stopped by their pid.
"""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import Counter

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
T0 = 1_700_000_000_000_000_000
#: Every detector off: the probes that only need volume run at the mapping's speed.
NO_DETECTORS = {name: {"enabled": False} for name in ("divergence", "rate", "drift", "entropy", "stall",
                                                      "trajectory")}


def identical_tool_spans(n: int, first_id: int = 1, trace: int = 7) -> bytes:
    """``n`` identical ``read_file`` tool spans of one trace (distinct span ids), each finding nothing
    (``[]``): 105 bytes each, and every one gets findings and attributes, so the request grows about
    sevenfold through enrichment. (A span without a result would be unjudged and get no finding.)"""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    attributes = [KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file")),
                  KeyValue(key="output.value", value=AnyValue(string_value="[]"))]
    for i in range(n):
        span = ss.spans.add(trace_id=trace.to_bytes(16, "big"), span_id=(first_id + i).to_bytes(8, "big"),
                            name="read_file", start_time_unix_nano=T0)
        span.attributes.extend(attributes)
    return request.SerializeToString()


def span_ids(data: bytes) -> list[bytes]:
    request = ExportTraceServiceRequest.FromString(data)
    return [s.span_id for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def delivered(datas: list[bytes]) -> Counter[bytes]:
    """How often each span id arrived."""
    return Counter(i for data in list(datas) for i in span_ids(data))


def export(target: str, data: bytes, timeout: float = 300) -> ExportTraceServiceResponse:
    """One OTLP/gRPC Export with raw bytes (raises grpc.RpcError on a refusal)."""
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 256 << 20)]) as channel:
        call = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        return ExportTraceServiceResponse.FromString(call(data, timeout=timeout))


class Poller(threading.Thread):
    """Calls ``probe()`` every ``interval`` seconds until stopped; records each latency and failure."""

    def __init__(self, probe, interval: float = 0.1) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.probe, self.interval = probe, interval
        self.latencies: list[float] = []
        self.started_at: list[float] = []
        self.failures: list[str] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.perf_counter()
            self.started_at.append(time.monotonic())
            try:
                self.probe()
            except Exception as e:
                self.failures.append(f"{type(e).__name__}: {e}")
            took = time.perf_counter() - started
            self.latencies.append(took)
            self.stopped.wait(max(0.0, self.interval - took))

    def stop(self) -> None:
        self.stopped.set()
        self.join(30)


def get(url: str, timeout: float) -> int:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        r.read()
        return r.status
