"""The metric names of SPEC §7 are all exposed, with the label names SPEC gives them."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otelloop.telemetry import Metrics

SPEC = {  # family name as exposed (counters without _total in the family) -> label names
    "otelloop_spans_received": {"transport"},
    "otelloop_spans_refused": {"transport", "reason"},
    "otelloop_spans_exported": set(),
    "otelloop_spans_export_failed": {"reason"},
    "otelloop_export_queue_spans": set(),
    "otelloop_export_queue_capacity_spans": set(),
    "otelloop_export_duration_seconds": {"outcome"},
    "otelloop_request_duration_seconds": {"transport"},
    "otelloop_steps": {"kind", "service"},
    "otelloop_findings": {"detector", "finding", "severity", "service"},
    "otelloop_sessions_active": set(),
    "otelloop_sessions": {"verdict"},
    "otelloop_sessions_evicted": {"reason"},
    "otelloop_entropy_score": set(),
    "otelloop_tokens": {"direction", "service", "model"},
    "otelloop_cost_usd": {"service", "model"},
    "otelloop_detector_errors": {"detector"},
    "otelloop_mapping_errors": {"field"},
    "otelloop_config_reloads": {"outcome"},
    "otelloop_build_info": {"version"},
}


def test_every_spec_metric_is_exposed_with_its_labels() -> None:
    m = Metrics()
    m.observe_state(lambda: 0, lambda: {})
    m.spans_received.labels("grpc").inc()
    m.spans_refused.labels("http", "invalid").inc()
    m.spans_export_failed.labels("rejected").inc()
    m.export_duration.labels("success").observe(0.01)
    m.request_duration.labels("grpc").observe(0.01)
    m.steps.labels("tool", "svc").inc()
    m.findings.labels("divergence", "divergence_suspected", "warn", "svc").inc()
    m.entropy_score.observe(0.5)
    m.tokens.labels("input", "svc", "gpt").inc()
    m.cost.labels("svc", "gpt").inc(0.1)
    m.detector_errors.labels("drift").inc()
    m.mapping_errors.labels("cost").inc()
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    for name, labels in SPEC.items():
        assert name in families, name
        sample_labels = {k for s in families[name].samples for k in s.labels} - {"le"}
        assert sample_labels == labels, (name, sample_labels)
    assert {s.name for s in families["otelloop_spans_received"].samples} >= {"otelloop_spans_received_total"}
