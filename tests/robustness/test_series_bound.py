"""Metric series stay bounded whatever the label combinations, and capped label slots are recycled.

Each probe runs a real ``otelloop serve`` on 127.0.0.1 and scrapes its ``/metrics``.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from prometheus_client.parser import text_string_to_metric_families
from spans import kvs, span

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _llm_steps(services: list[str], models: int, trace_base: int) -> bytes:
    """For each service, one LLM step with token counts per model (each its own session)."""
    resources = []
    trace = trace_base
    for service in services:
        spans = []
        for m in range(models):
            trace += 1
            spans.append(span("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": f"model-{m}",
                                       "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5},
                              trace=trace, i=1))
        rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
        rs.resource.attributes.extend(kvs({"service.name": service}))
        resources.append(rs)
    return ExportTraceServiceRequest(resource_spans=resources).SerializeToString()


def _scrape(o: Any) -> tuple[list[Any], int, float]:
    o.settle()
    started = time.perf_counter()
    status, body = o.get("/metrics")
    took = time.perf_counter() - started
    assert status == 200
    samples = [s for f in text_string_to_metric_families(body.decode()) for s in f.samples]
    return samples, len(body), took


def _services(samples: list[Any], name: str) -> dict[str, float]:
    """Sum of a family's samples per service."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name:
            out[s.labels["service"]] = out.get(s.labels["service"], 0) + s.value
    return out


def test_150_services_by_150_models_stay_under_10000_samples(serve: Any) -> None:
    o = serve({})
    with grpc.insecure_channel(o.grpc) as ch:
        export = ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        for s in range(0, 150, 10):
            services = [f"service-{k}" for k in range(s, s + 10)]
            export(_llm_steps(services, 150, trace_base=s * 1000), timeout=60)
    samples, size, took = _scrape(o)
    tokens = [s for s in samples if s.name == "otelloop_tokens_total"]
    print(f"robustness: 150 services x 150 models: {len(samples):,} samples ({len(tokens):,} token series), "
          f"{size / 1e3:.0f} kB, scraped in {took * 1e3:.0f} ms")
    assert len(samples) < 10_000
    assert sum(s.value for s in tokens if s.labels["direction"] == "input") == 150 * 150 * 10  # nothing lost
    assert any(s.labels["service"] == "other" for s in tokens)


def test_a_late_service_gets_its_own_label_once_the_others_are_idle(serve: Any) -> None:
    o = serve({"metrics": {"label_idle_timeout": "2s"}})
    early = [f"service-{k}" for k in range(200)]
    with grpc.insecure_channel(o.grpc) as ch:
        export = ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
        export(_llm_steps(early, 1, trace_base=0), timeout=30)
        export(_llm_steps(["late-service"], 1, trace_base=10_000), timeout=30)
        samples, _, _ = _scrape(o)
        steps = _services(samples, "otelloop_steps_total")
        assert "late-service" not in steps and steps["other"] == 1  # every slot is taken and in use
        time.sleep(2.5)
        export(_llm_steps(["service-199"], 1, trace_base=20_000), timeout=30)  # still in use: keeps its slot
        export(_llm_steps(["late-service"], 1, trace_base=30_000), timeout=30)
    samples, _, _ = _scrape(o)
    steps = _services(samples, "otelloop_steps_total")
    tokens = _services(samples, "otelloop_tokens_total")
    assert steps["late-service"] == 1 and tokens["late-service"] == 10 + 5
    assert "service-0" not in steps and "service-0" not in tokens  # the least recently seen gave up its slot
    assert steps["service-199"] == 2 and steps["service-1"] == 1
    assert steps["other"] == 1  # a counter series is never lowered; a freed one is removed instead
