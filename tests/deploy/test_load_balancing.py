"""Scaling out by the load-balancing topology gives the same findings as one otelloop process.

One process uses about one core; more load means more replicas behind the OpenTelemetry Collector's
``load_balancing`` exporter with ``routing_key: traceID``, so that every span of a session reaches the
same replica. That the shipped gateway config routes by ``traceID`` is asserted in
``tests/deploy/test_collector_config.py::test_gateway_load_balances_by_trace_over_the_headless_service``.

No Collector binary exists on this machine, so :class:`TraceIdRouter` plays the gateway: it places the
replicas on a consistent-hash ring and sends each span to the replica that owns its trace id, splitting
each incoming request into one request per replica (resource and scope kept, span order kept, requests
to one replica sent in order). A mixed workload of many sessions, with loops for every detector, goes
(a) to one ``otelloop serve`` and (b) through the router to three; the findings read back from the
upstream sinks (event, span id, attributes) and the ``otelloop.*`` attributes of every span must be
identical, and so must the findings counters summed over the replicas.
"""

from __future__ import annotations

import bisect
import json
import random
import zlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from served import BackgroundLoop, Served, wait_for
from sinks import GrpcSink
from spans import attrs_of, kvs

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
T0 = 1_750_000_000_000_000_000
REPLICAS = 3
SESSIONS_PER_KIND = 6
SERVICES = ["coder-agent", "research-agent", "support-agent"]


# ------------------------------------------------------------------------------------------ workload
class Session:
    """One agent run (one trace): its spans in the order the agent emits them."""

    def __init__(self, kind: str, rnd: random.Random, service: str) -> None:
        self.kind = kind
        self.service = service
        self.trace_id = rnd.randbytes(16)
        self.rnd = rnd
        self.spans: list[Span] = []
        self.root = self._span("invoke_agent main", {"gen_ai.operation.name": "invoke_agent",
                                                     "gen_ai.agent.name": "main"}, parent=b"")

    def _span(self, name: str, attrs: dict[str, Any], parent: bytes | None = None, error: str | None = None,
              duration_ms: int = 400) -> Span:
        start = T0 + len(self.spans) * 1_000_000_000
        s = Span(name=name, trace_id=self.trace_id, span_id=self.rnd.randbytes(8),
                 parent_span_id=self.root.span_id if parent is None else parent,
                 start_time_unix_nano=start, end_time_unix_nano=start + duration_ms * 1_000_000,
                 attributes=kvs(attrs))
        if error is not None:
            s.status.CopyFrom(Status(code=Status.STATUS_CODE_ERROR, message=error))
        self.spans.append(s)
        return s

    def tool(self, name: str, args: dict[str, Any], result: str | None = "ok",
             error: str | None = None) -> Span:
        attrs: dict[str, Any] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                                 "gen_ai.tool.call.arguments": json.dumps(args, sort_keys=True)}
        if result is not None:
            attrs["gen_ai.tool.call.result"] = result
        return self._span(f"execute_tool {name}", attrs, error=error)

    def chat(self, input_tokens: int, output_tokens: int, cost: float, duration_ms: int = 400) -> Span:
        return self._span("chat gpt-lb", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-lb",
                                          "gen_ai.usage.input_tokens": input_tokens,
                                          "gen_ai.usage.output_tokens": output_tokens,
                                          "gen_ai.usage.cost": cost}, duration_ms=duration_ms)

    def turn(self, node: str, output: str) -> Span:
        return self._span(f"invoke_agent {node}", {"gen_ai.operation.name": "invoke_agent",
                                                   "gen_ai.agent.name": node, "output.value": output})


def build_session(kind: str, n: int, rnd: random.Random) -> Session:
    s = Session(kind, rnd, SERVICES[n % len(SERVICES)])
    if kind == "repeat":  # the same call again and again: divergence, trajectory stutter, entropy
        s.chat(300, 40, 0.001)
        for _ in range(5 + n % 3):
            s.tool("search_web", {"query": f"status of ticket {n}"}, "no results")
    elif kind == "entropy":  # the same tool, reworded queries, the same "not found" each time: entropy LOOP
        # (different order ids answering "not found" would be a batch of lookups of absent records: work)
        for wording in ("where is order", "status of order", "order tracking for", "find my order",
                        "lookup order", "order details"):
            s.tool("lookup_order", {"query": f"{wording} {n}"}, result="order not found")
    elif kind == "read_loop":  # the same file read over and over, nothing written
        for i in range(4):
            s.tool("read_file", {"path": f"src/module_{n}.py"}, f"def f_{n}(): pass")
            s.tool("search_web", {"query": f"python error {n} {i}"}, f"hit {i}")
    elif kind == "edit_revert":  # a write restores what the file held two writes ago
        for content in ("x = 1", "x = 2", "x = 1", "x = 2", "x = 1"):
            s.tool("write_file", {"path": f"app/{n}.py", "content": content}, "written")
            s.tool("read_file", {"path": f"README_{n}.md"}, "readme")
    elif kind == "test_fail":  # the same command failing the same way
        for i in range(4):
            s.tool("write_file", {"path": f"fix_{n}.py", "content": f"attempt {i}"}, "written")
            s.tool("run_command", {"command": f"pytest tests/test_{n}.py"}, "1 failed",
                   error=f"AssertionError: expected 200, got 500 in test_{n}")
    elif kind == "stall":  # planner <-> coder cycle past its iteration budget
        for i in range(10):
            s.turn("planner", f"plan {n}.{i}")
            s.turn("coder", f"patch {n}.{i}")
    elif kind == "ping_pong":  # two tools alternating with the same outputs
        for _ in range(4):
            s.tool("open_ticket", {"id": n}, "ticket open")
            s.tool("close_ticket", {"id": n}, "cannot close")
    elif kind == "burn":  # expensive, verbose model calls in quick succession for 10 s and more: rate
        for _ in range(14):
            s.chat(8000, 1500, 0.40, duration_ms=900)
    elif kind == "healthy":
        s.chat(500, 60, 0.002)
        s.tool("search_web", {"query": f"docs {n}"}, "3 hits")
        s.tool("read_file", {"path": f"docs/{n}.md"}, "# doc")
        s.tool("write_file", {"path": f"out/{n}.md", "content": "summary"}, "written")
        s.chat(900, 120, 0.004)
    else:
        raise ValueError(kind)
    s.spans.append(s.root)  # the SDK exports the root when it ends, after its children
    return s


KINDS = ["repeat", "entropy", "read_loop", "edit_revert", "test_fail", "stall", "ping_pong", "burn",
         "healthy"]


def workload(seed: int = 20261122) -> tuple[list[Session], list[bytes]]:
    """Sessions of every kind and the requests an agent-side Collector would send for them: each request
    carries the next one to three spans of every unfinished session, grouped by service."""
    rnd = random.Random(seed)
    sessions = [build_session(kind, n, rnd) for n in range(SESSIONS_PER_KIND) for kind in KINDS]
    rnd.shuffle(sessions)
    cursor = {id(s): 0 for s in sessions}
    requests = []
    while any(cursor[id(s)] < len(s.spans) for s in sessions):
        by_service: dict[str, list[Span]] = defaultdict(list)
        for s in sessions:
            k = cursor[id(s)]
            take = rnd.randint(1, 3)
            by_service[s.service] += s.spans[k:k + take]
            cursor[id(s)] = min(k + take, len(s.spans))
        req = ExportTraceServiceRequest()
        for service in sorted(by_service):
            if by_service[service]:
                rs = ResourceSpans(scope_spans=[ScopeSpans(spans=by_service[service])])
                rs.resource.attributes.extend(kvs({"service.name": service}))
                rs.scope_spans[0].scope.name = "lb-test-agent"
                req.resource_spans.append(rs)
        requests.append(req.SerializeToString())
    return sessions, requests


# ------------------------------------------------------------------------------------------ the router
class TraceIdRouter:
    """What the gateway's ``load_balancing`` exporter does with ``routing_key: traceID``: a consistent-hash
    ring of the backends, each span sent to the owner of its trace id, one request per backend."""

    def __init__(self, backends: list[str], points_per_backend: int = 128) -> None:
        self.backends = backends
        ring = sorted((zlib.crc32(f"{b}#{v}".encode()), i) for i, b in enumerate(backends)
                      for v in range(points_per_backend))
        self._hashes = [h for h, _ in ring]
        self._owners = [i for _, i in ring]

    def owner(self, trace_id: bytes) -> int:
        k = bisect.bisect_left(self._hashes, zlib.crc32(trace_id)) % len(self._hashes)
        return self._owners[k]

    def route(self, span: Span) -> int:
        return self.owner(span.trace_id)

    def split(self, data: bytes) -> dict[int, bytes]:
        """One request per backend that owns some of the spans; resource, scope and span order kept."""
        req = ExportTraceServiceRequest.FromString(data)
        out: dict[int, ExportTraceServiceRequest] = {}
        for rs in req.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    b = self.route(span)
                    part = out.setdefault(b, ExportTraceServiceRequest())
                    if not part.resource_spans or part.resource_spans[-1].resource != rs.resource:
                        new_rs = part.resource_spans.add()
                        new_rs.resource.CopyFrom(rs.resource)
                        new_rs.schema_url = rs.schema_url
                    target_rs = part.resource_spans[-1]
                    if not target_rs.scope_spans or target_rs.scope_spans[-1].scope != ss.scope:
                        new_ss = target_rs.scope_spans.add()
                        new_ss.scope.CopyFrom(ss.scope)
                        new_ss.schema_url = ss.schema_url
                    target_rs.scope_spans[-1].spans.append(span)
        return {b: part.SerializeToString() for b, part in sorted(out.items())}


class SpanRoundRobin(TraceIdRouter):
    """The negative control: spans dealt out one by one, as a plain (non-trace-aware) balancer would."""

    def __init__(self, backends: list[str]) -> None:
        super().__init__(backends)
        self._next = 0

    def route(self, span: Span) -> int:
        self._next = (self._next + 1) % len(self.backends)
        return self._next


def send_all(targets: list[str], requests: list[bytes], router: TraceIdRouter | None) -> None:
    channels = [grpc.insecure_channel(t) for t in targets]
    try:
        exports = [ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
                   for ch in channels]
        for data in requests:
            parts = router.split(data) if router else {0: data}
            for b, part in parts.items():
                exports[b](part, timeout=10)
    finally:
        for ch in channels:
            ch.close()


# ------------------------------------------------------------------------------------------ findings
def frozen(v: Any) -> Any:
    return tuple(frozen(x) for x in v) if isinstance(v, (list, tuple)) else v


def delivered(sink: GrpcSink) -> list[Span]:
    return [s for data in list(sink.delivered)
            for rs in ExportTraceServiceRequest.FromString(data).resource_spans
            for ss in rs.scope_spans for s in ss.spans]


def findings(spans: list[Span]) -> set[tuple[str, str, str, tuple[tuple[str, Any], ...]]]:
    """(session, span id, event, attributes) of every otelloop event."""
    out = set()
    for s in spans:
        for e in s.events:
            if e.name.startswith("otelloop."):
                attrs = attrs_of(e)  # type: ignore[arg-type]
                out.add((s.trace_id.hex(), s.span_id.hex(), e.name,
                         tuple(sorted((k, frozen(v)) for k, v in attrs.items()))))
    return out


def span_annotations(spans: list[Span]) -> dict[str, tuple[tuple[str, Any], ...]]:
    """The otelloop.* attributes of every span, by span id."""
    return {s.span_id.hex(): tuple(sorted((k, frozen(v)) for k, v in attrs_of(s).items()
                                          if k.startswith("otelloop.")))
            for s in spans}


def findings_counters(o: Served) -> dict[tuple[str, ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, ...], float] = defaultdict(float)
    for family in text_string_to_metric_families(o.get("/metrics")[1].decode()):
        for s in family.samples:
            if s.name == "otelloop_findings_total":
                key = tuple(s.labels[k] for k in ("detector", "finding", "severity", "service"))
                out[key] += s.value
    return out


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def sinks(loop: BackgroundLoop) -> Iterator[list[GrpcSink]]:
    started = [loop.run(GrpcSink().start()) for _ in range(REPLICAS + 1)]
    yield started
    for s in started:
        loop.run(s.stop())


@pytest.fixture
def replicas(tmp_path: Path, sinks: list[GrpcSink]) -> Iterator[list[Served]]:
    """Index 0: the single process of setup (a); 1..3: the replicas of setup (b); each with its own sink."""
    started: list[Served] = []
    try:
        for i, sink in enumerate(sinks):
            d = tmp_path / f"otelloop{i}"
            d.mkdir()
            exporter = {"endpoint": f"grpc://127.0.0.1:{sink.port}", "timeout": "5s"}
            # every detector's findings, also those a stopped session's later steps raise (the hold off):
            # the more findings both setups must agree on, the more the comparison says
            started.append(Served(d, {"exporter": exporter, "state": {"hold_stopped_sessions": False}}))
        yield started
    finally:
        for o in started:
            o.stop()


# ------------------------------------------------------------------------------------------ tests
def test_router_is_consistent_and_spreads_traces() -> None:
    router = TraceIdRouter(["a:4317", "b:4317", "c:4317"])
    rnd = random.Random(7)
    ids = [rnd.randbytes(16) for _ in range(3000)]
    owners = [router.owner(t) for t in ids]
    assert owners == [router.owner(t) for t in ids]
    shares = Counter(owners)
    assert set(shares) == {0, 1, 2} and min(shares.values()) > 600, shares
    # adding a replica moves only the traces the new one takes over
    bigger = TraceIdRouter(["a:4317", "b:4317", "c:4317", "d:4317"])
    moved = [(o, bigger.owner(t)) for t, o in zip(ids, owners, strict=True) if bigger.owner(t) != o]
    assert all(new == 3 for _, new in moved) and 0 < len(moved) < len(ids) / 2


def test_router_keeps_span_order_and_resources() -> None:
    sessions, requests = workload()
    router = TraceIdRouter(["r0", "r1", "r2"])
    per_trace_sent: dict[bytes, list[bytes]] = defaultdict(list)
    per_trace_routed: dict[bytes, list[bytes]] = defaultdict(list)
    for data in requests:
        for rs in ExportTraceServiceRequest.FromString(data).resource_spans:
            for s in rs.scope_spans[0].spans:
                per_trace_sent[s.trace_id].append(s.span_id)
        for b, part in router.split(data).items():
            for rs in ExportTraceServiceRequest.FromString(part).resource_spans:
                service = attrs_of(rs.resource)["service.name"]  # type: ignore[arg-type]
                for ss in rs.scope_spans:
                    assert ss.scope.name == "lb-test-agent"
                    for s in ss.spans:
                        assert router.owner(s.trace_id) == b
                        per_trace_routed[s.trace_id].append(s.span_id)
                        assert service == next(x.service for x in sessions if x.trace_id == s.trace_id)
    assert per_trace_routed == per_trace_sent
    assert len(per_trace_sent) == len(KINDS) * SESSIONS_PER_KIND


def test_three_replicas_behind_trace_id_routing_find_what_one_process_finds(
        replicas: list[Served], sinks: list[GrpcSink]) -> None:
    sessions, requests = workload()
    total = sum(len(s.spans) for s in sessions)
    single, scaled = replicas[0], replicas[1:]
    router = TraceIdRouter([o.grpc for o in scaled])

    send_all([single.grpc], requests, None)                       # (a) everything to one process
    send_all([o.grpc for o in scaled], requests, router)           # (b) split by trace id over three

    def all_delivered() -> bool:
        return (len(delivered(sinks[0])) == total
                and sum(len(delivered(s)) for s in sinks[1:]) == total)

    wait_for(all_delivered, timeout=60, what=f"all {total} spans at the sinks of both setups")

    # every trace went to exactly one replica, the one the ring names, and each replica got a share
    owner_of = {s.trace_id: router.owner(s.trace_id) for s in sessions}
    for b, sink in enumerate(sinks[1:]):
        assert {s.trace_id for s in delivered(sink)} == {t for t, o in owner_of.items() if o == b}
    shares = Counter(owner_of.values())
    assert len(shares) == REPLICAS and min(shares.values()) >= 5, shares
    for b, o in enumerate(scaled):
        assert o.metric("otelloop_sessions_active") == shares[b]
    assert single.metric("otelloop_sessions_active") == len(sessions)

    # the same findings, on the same spans, with the same attributes
    spans_one = delivered(sinks[0])
    spans_three = [s for sink in sinks[1:] for s in delivered(sink)]
    one, three = findings(spans_one), findings(spans_three)
    assert one == three, (f"only with one process: {sorted(one - three)[:5]}\n"
                          f"only with three replicas: {sorted(three - one)[:5]}")
    assert span_annotations(spans_one) == span_annotations(spans_three)

    # the workload really exercises every detector and pattern
    events = Counter(name for _, _, name, _ in one)
    detectors = {dict(attrs)["otelloop.detector"] for *_, attrs in one}
    assert detectors == {"divergence", "rate", "drift", "entropy", "stall", "trajectory"}, events
    drift_patterns = {dict(attrs)["otelloop.drift.pattern"] for _, _, name, attrs in one
                      if name == "otelloop.drift"}
    assert drift_patterns == {"read_loop", "edit_revert", "test_fail_loop"}
    loop_types = {t for _, _, name, attrs in one if name == "otelloop.intervention"
                  for t in dict(attrs)["otelloop.loop_types"]}
    assert {"stutter", "ping_pong"} <= loop_types, loop_types
    rate_events = {name for _, _, name, attrs in one if dict(attrs)["otelloop.detector"] == "rate"}
    assert rate_events == {"otelloop.cost_rate_exceeded", "otelloop.token_velocity_exceeded"}
    by_kind = Counter(next(s.kind for s in sessions if s.trace_id.hex() == t) for t, *_ in one)
    assert by_kind["healthy"] == 0 and all(by_kind[k] for k in KINDS if k != "healthy"), by_kind

    # the metrics add up: the replicas' findings counters sum to the single process's
    summed: dict[tuple[str, ...], float] = defaultdict(float)
    for o in scaled:
        for key, value in findings_counters(o).items():
            summed[key] += value
    reference = findings_counters(single)
    assert {k: v for k, v in summed.items() if v} == {k: v for k, v in reference.items() if v}
    assert sum(reference.values()) >= len(one)
    assert sum(o.metric("otelloop_spans_received_total", {"transport": "grpc"}) for o in scaled) == total


def test_without_trace_affinity_the_replicas_miss_loops(replicas: list[Served],
                                                        sinks: list[GrpcSink]) -> None:
    """The control that gives the comparison above its teeth: deal the same workload's spans out to the
    replicas without regard to their trace, and each replica sees only fragments of every session."""
    sessions, requests = workload(seed=7)
    total = sum(len(s.spans) for s in sessions)
    single, scaled = replicas[0], replicas[1:]
    send_all([single.grpc], requests, None)
    send_all([o.grpc for o in scaled], requests, SpanRoundRobin([o.grpc for o in scaled]))
    wait_for(lambda: len(delivered(sinks[0])) == total and sum(len(delivered(s)) for s in sinks[1:]) == total,
             timeout=60, what=f"all {total} spans at the sinks of both setups")
    one = findings(delivered(sinks[0]))
    scattered = findings([s for sink in sinks[1:] for s in delivered(sink)])
    missed = one - scattered
    assert len(scattered) < len(one) and len(missed) > len(one) / 2, (len(scattered), len(missed), len(one))
    assert sum(o.metric("otelloop_sessions_active") for o in scaled) > len(sessions)
