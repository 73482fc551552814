"""Probe: a burst of heavy session lists never holds ingest or the probes.

With 100,000 live sessions, 80 clients ask ``/v1/sessions`` for the largest page matching a query that
every session matches, again and again without pause (a 503 does not slow them), for
:data:`BURST_SECONDS`. Meanwhile one thread polls ``/healthz`` and another sends small OTLP/HTTP requests.
The probes and the small requests must answer in under 100 ms (95th percentile) and none may take a
second; the 99th percentile and the slowest are reported. Every one of them must succeed, and the lists
must still be served (full pages), the surplus being refused with 503 and ``Retry-After``. A page larger
than the bound is refused with 400.

Why the 95th percentile: on a shared 2-core host at load 8-10 the same probes against an idle server
already reach 20-60 ms at the 99th percentile (the probe and the server wait for a core), while the
server itself never holds its loop for more than a few milliseconds of CPU during the burst.

Before lists were sliced and capped, the same burst of 1,000-session pages let only 2 ``/healthz`` probes
start in 10 s, both timing out after 5 s, and the 3 OTLP/HTTP requests sent timed out too (pages of 10,000,
refused with 400 now, held ``/healthz`` for 10.5 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from probes import T0, Poller, export, get
from served import http_call
from spans import request, tool_span

SESSIONS = 100_000
CLIENTS = 80
BURST_SECONDS = 12.0
#: What the probes and the small requests must answer within (95th percentile), and the slowest, in seconds.
WITHIN = 0.100
SLOWEST = 1.0
PAGE = 1000  # the largest page the API serves


def sessions_request(first: int, n: int) -> bytes:
    """``n`` tool spans, each of a trace (a session) of its own, agents ``agent-0`` to ``agent-99``."""
    req = ExportTraceServiceRequest()
    rs = req.resource_spans.add()
    rs.resource.attributes.append(KeyValue(key="service.name", value=AnyValue(string_value="svc")))
    ss = rs.scope_spans.add()
    for i in range(first, first + n):
        s = ss.spans.add(trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                         name="execute_tool read_file", start_time_unix_nano=T0, end_time_unix_nano=T0 + 10**8)
        s.attributes.extend([
            KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="execute_tool")),
            KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file")),
            KeyValue(key="gen_ai.agent.name", value=AnyValue(string_value=f"agent-{i % 100}")),
        ])
    return req.SerializeToString()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def test_a_burst_of_heavy_lists_leaves_probes_and_ingest_under_100_ms(serve: Any) -> None:
    o = serve({"state": {"idle_timeout": 3600}})
    for first in range(0, SESSIONS, 20_000):
        export(o.grpc, sessions_request(first, 20_000))
    assert o.metric("otelloop_sessions_active") == SESSIONS

    admin = f"http://{o.admin}"
    health = Poller(lambda: _ok(get(f"{admin}/healthz", 5.0)), interval=0.05)
    n = [0]

    def small() -> None:
        n[0] += 1
        spans = [tool_span("search_web", trace=10 * SESSIONS + n[0], i=i) for i in range(10)]
        code, answer = http_call("POST", f"http://{o.http}/v1/traces", request(*spans),
                                 {"Content-Type": "application/x-protobuf"}, timeout=5)
        assert code == 200, (code, answer)

    ingest = Poller(small, interval=0.1)
    burst = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("list_burst.py")),
         f"{admin}/v1/sessions?limit={PAGE}&q=agent", str(CLIENTS), str(BURST_SECONDS)],
        stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)  # the burst is under way
        health.start()
        ingest.start()
        time.sleep(BURST_SECONDS - 2.0)
        health.stop()
        ingest.stop()
        out, _ = burst.communicate(timeout=120)
    finally:
        if burst.poll() is None:
            burst.kill()
            burst.wait()
    lists = json.loads(out)

    report = {name: {"n": len(p.latencies), "p50_ms": round(percentile(p.latencies, 0.5) * 1000, 1),
                     "p95_ms": round(percentile(p.latencies, 0.95) * 1000, 1),
                     "p99_ms": round(percentile(p.latencies, 0.99) * 1000, 1),
                     "max_ms": round(max(p.latencies) * 1000, 1), "failures": p.failures[:3]}
              for name, p in (("healthz", health), ("otlp_http", ingest))}
    print(f"\nheavy lists: {lists}; probes during the burst: {report}")
    for name, p in (("healthz", health), ("otlp_http", ingest)):
        assert not p.failures, (name, report)
        assert len(p.latencies) >= 20, (name, report)
        assert percentile(p.latencies, 0.95) < WITHIN, (name, report)
        assert max(p.latencies) < SLOWEST, (name, report)
    assert lists.get("full_pages", 0) >= 5, lists  # lists were served all along, a full page each
    assert lists.get("503", 0) == lists.get("retry_after", 0), lists
    assert set(lists) <= {"200", "503", "full_pages", "retry_after"}, lists
    assert o.metric("otelloop_admin_lists_refused_total") == lists.get("503", 0)
    code, body = http_call("GET", f"{admin}/v1/sessions?limit=10000&q=agent")
    assert code == 400 and b"1000" in body, (code, body)


def _ok(status: int) -> None:
    assert status == 200, status


def test_a_list_is_refused_not_shortened_beyond_the_page_bound(serve: Any) -> None:
    o = serve()
    admin = f"http://{o.admin}"
    for limit, status in (("1000", 200), ("1001", 400), ("0", 400), ("-5", 400), ("x", 400)):
        code, body = http_call("GET", f"{admin}/v1/sessions?limit={limit}")
        assert code == status, (limit, code, body)
    with urllib.request.urlopen(f"{admin}/v1/sessions") as r:
        assert json.loads(r.read())["limit"] == 100
