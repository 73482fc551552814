"""Probe: a very large request never blocks health, readiness, scrapes or other clients.

While ``otelloop serve`` processes one 250,000-span request (OTLP/gRPC) or a large OTLP/JSON body, one
thread polls ``/healthz`` and ``/readyz`` every 100 ms with a 1 s timeout (the Helm chart's liveness probe
allows 2 s), another scrapes ``/metrics``, and another client keeps sending small requests of its own
session. Every probe must answer, every small request must be accepted, and some of them must have been
served while the large request was being processed (not only before or after it).

The detectors are off for the volume runs: how long a request takes is not the point, only that nothing
holds the event loop while it is processed (the slices are the same with detectors on; the export-split
probes run them).
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from probes import NO_DETECTORS, Poller, export, get, identical_tool_spans
from served import http_call, wait_for
from sinks import GrpcSink
from spans import request, tool_span

from otelloop.otlp.json_codec import request_to_json

PROBE_TIMEOUT = 1.0


class Traffic:
    """The probes and the other client, started together, each recording when it succeeded."""

    def __init__(self, o: Any) -> None:
        admin = f"http://{o.admin}"
        self.health = Poller(lambda: self._ok(get(f"{admin}/healthz", PROBE_TIMEOUT)))
        self.ready = Poller(lambda: self._ok(get(f"{admin}/readyz", PROBE_TIMEOUT)))
        self.scrape = Poller(lambda: self._ok(get(f"{admin}/metrics", 5.0)), interval=0.5)
        self.served_at: list[float] = []
        channel = grpc.insecure_channel(o.grpc)
        self._channel = channel
        call = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                   request_serializer=None, response_deserializer=None)
        self._n = 0

        def small() -> None:
            self._n += 1
            spans = [tool_span("search_web", trace=900_000 + self._n, i=i) for i in range(10)]
            call(request(*spans), timeout=5)
            self.served_at.append(time.monotonic())

        self.other = Poller(small, interval=0.2)
        self.pollers = (self.health, self.ready, self.scrape, self.other)

    @staticmethod
    def _ok(status: int) -> None:
        assert status == 200, status

    def __enter__(self) -> Traffic:
        for p in self.pollers:
            p.start()
        time.sleep(0.5)
        return self

    def __exit__(self, *exc: Any) -> None:
        for p in self.pollers:
            p.stop()
        self._channel.close()

    def check(self, started: float, finished: float) -> None:
        for name, p in (("healthz", self.health), ("readyz", self.ready), ("metrics", self.scrape),
                        ("other client", self.other)):
            assert not p.failures, (f"{name}: {len(p.failures)} of {len(p.latencies)} failed, "
                                    f"e.g. {p.failures[0]}")
        during = [t for t in self.served_at if started < t < finished]
        assert len(during) >= 3, f"only {len(during)} small requests were served during the large one"
        probed = [t for t in self.health.started_at + self.ready.started_at if started < t < finished]
        assert len(probed) >= 10, f"only {len(probed)} probes ran during the large request"


def serve_volume(serve: Any, sink: GrpcSink) -> Any:
    return serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{sink.port}", "queue_spans": 2_000_000},
                  "detectors": NO_DETECTORS})


def test_health_answers_while_a_250k_span_request_is_processed(serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve_volume(serve, grpc_sink)
    data = identical_tool_spans(250_000)
    with Traffic(o) as traffic:
        started = time.monotonic()
        export(o.grpc, data, timeout=600)
        finished = time.monotonic()
    traffic.check(started, finished)
    wait_for(lambda: o.metric("otelloop_export_queue_spans") == 0, timeout=120, what="queue drained")
    assert o.metric("otelloop_spans_exported_total") == 250_000 + 10 * len(traffic.served_at)


def test_health_answers_while_a_large_otlp_json_body_is_converted(serve: Any, grpc_sink: GrpcSink) -> None:
    import json

    o = serve_volume(serve, grpc_sink)
    spans = 30_000
    body = json.dumps(request_to_json(identical_tool_spans(spans)), separators=(",", ":")).encode()
    with Traffic(o) as traffic:
        started = time.monotonic()
        code, answer = http_call("POST", f"http://{o.http}/v1/traces", body,
                                 {"Content-Type": "application/json"}, timeout=600)
        finished = time.monotonic()
    assert code == 200, answer
    traffic.check(started, finished)
    wait_for(lambda: o.metric("otelloop_export_queue_spans") == 0, timeout=120, what="queue drained")
    assert o.metric("otelloop_spans_exported_total") == spans + 10 * len(traffic.served_at)
