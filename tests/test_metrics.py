"""otelloop exposes exactly its contract's metrics, with their labels, types and help, from one table."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from otelloop.telemetry import METRICS, Metrics

#: The contract: every metric name (as exposed; counters end in ``_total``) and its label names. Written
#: out here rather than read from the table, so that renaming a metric in code fails this test: the
#: dashboard, the alert rules and every user's queries depend on these names.
CONTRACT = {
    "otelloop_spans_received_total": {"transport"},
    "otelloop_spans_refused_total": {"transport", "reason"},
    "otelloop_requests_aborted_total": {"transport", "reason"},
    "otelloop_spans_exported_total": set(),
    "otelloop_spans_enrichment_skipped_total": {"reason"},
    "otelloop_spans_duplicate_total": set(),
    "otelloop_spans_export_failed_total": {"reason"},
    "otelloop_export_queue_spans": set(),
    "otelloop_export_queue_capacity_spans": set(),
    "otelloop_export_duration_seconds": {"outcome"},
    "otelloop_request_duration_seconds": {"transport"},
    "otelloop_receive_backlog_requests": set(),
    "otelloop_steps_total": {"kind", "service"},
    "otelloop_steps_unjudged_total": {"service"},
    "otelloop_findings_total": {"detector", "finding", "severity", "service"},
    "otelloop_sessions_active": set(),
    "otelloop_sessions": {"verdict"},
    "otelloop_sessions_evicted_total": {"reason"},
    "otelloop_entropy_score": set(),
    "otelloop_tokens_total": {"direction", "service", "model"},
    "otelloop_cost_usd_total": {"service", "model"},
    "otelloop_detector_errors_total": {"detector"},
    "otelloop_mapping_errors_total": {"field"},
    "otelloop_config_reloads_total": {"outcome"},
    "otelloop_memory_sheds_total": set(),
    "otelloop_memory_accounted_bytes": set(),
    "otelloop_memory_in_flight_bytes": set(),
    "otelloop_event_stream_clients": set(),
    "otelloop_event_stream_clients_dropped_total": set(),
    "otelloop_event_stream_events_lost_total": set(),
    "otelloop_admin_lists_refused_total": set(),
    "otelloop_build_info": {"version"},
}
#: Label names that would make a series per trace, session, span or request: never allowed.
UNBOUNDED = {"trace_id", "span_id", "session", "session_id", "trace", "span", "id", "agent_id", "request_id"}


def test_the_table_is_the_contract() -> None:
    assert {spec.exposed: set(spec.labels) for spec in METRICS} == CONTRACT
    assert len({spec.name for spec in METRICS}) == len(METRICS)
    for spec in METRICS:
        assert not UNBOUNDED & set(spec.labels), spec.name
        assert spec.help.strip() and "\n" not in spec.help, spec.name
        assert bool(spec.buckets) == (spec.type == "histogram"), spec.name


def exposed(m: Metrics) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}


def record(kind: str, metric: Any) -> None:
    """One sample of any value, so the series shows in the exposition."""
    if kind == "counter":
        metric.inc()
    elif kind == "gauge":
        metric.set(1)
    else:
        metric.observe(0.3)


def test_every_metric_of_the_table_is_exposed_with_its_type_help_and_labels() -> None:
    m = Metrics()
    m.observe_state(lambda: 3, lambda: {"nudge": 1})
    m.observe_memory(lambda: 1 << 20)
    for spec in METRICS:
        if spec.attribute is None:
            continue
        metric = getattr(m, spec.attribute)
        labelled = metric.labels(*(f"{label}-value" for label in spec.labels)) if spec.labels else metric
        record(spec.type, labelled)
    families = exposed(m)
    for spec in METRICS:
        family = families[spec.name]  # the parser names a counter's family without _total
        assert family.type == spec.type and family.documentation == spec.help, spec.name
        sample_names = {s.name for s in family.samples}
        assert spec.exposed in sample_names or f"{spec.name}_bucket" in sample_names, spec.name
        sample_labels = {k for s in family.samples for k in s.labels} - {"le"}
        assert sample_labels == set(spec.labels), (spec.name, sample_labels)
    # prometheus_client adds a ``_created`` timestamp family per counter and histogram
    registered = {name for name in families if not name.endswith("_created")}
    assert registered == {spec.name for spec in METRICS}, "a metric outside the table is registered"


def test_session_gauges_are_read_when_scraped() -> None:
    m = Metrics()
    counts = {"nudge": 2}
    m.observe_state(lambda: 5, lambda: counts)
    families = exposed(m)
    assert [s.value for s in families["otelloop_sessions_active"].samples] == [5]
    by_verdict = {s.labels["verdict"]: s.value for s in families["otelloop_sessions"].samples}
    assert by_verdict == {"continue": 0, "nudge": 2, "stop": 0, "paused": 0}
    counts["stop"] = 1
    assert {s.labels["verdict"]: s.value for s in exposed(m)["otelloop_sessions"].samples}["stop"] == 1


@pytest.mark.parametrize("spec", [s for s in METRICS if s.attribute], ids=lambda s: s.name)
def test_each_metric_attribute_has_its_declared_type(spec) -> None:  # type: ignore[no-untyped-def]
    m = Metrics()
    declared = Metrics.__annotations__[spec.attribute]
    assert type(getattr(m, spec.attribute)).__name__ == declared.strip("'\"")


def test_a_tallied_histogram_exposes_what_a_histogram_of_the_same_observations_does() -> None:
    from prometheus_client import CollectorRegistry, Histogram

    from otelloop.telemetry import TallyHistogram

    buckets = (0.1, 0.25, 0.5, 1.0)
    values = [0.0, 0.1, 0.1000001, 0.25, 0.3, 0.5, 0.5, 0.75, 1.0, 1.5, -2.0, 0.3]
    plain_registry, tally_registry = CollectorRegistry(), CollectorRegistry()
    plain = Histogram("h", "help", buckets=buckets, registry=plain_registry)
    tally = TallyHistogram("h", "help", buckets, tally_registry)
    for v in values:
        plain.observe(v)
    tallied: dict[float, int] = {}
    for v in values[:6]:
        tallied[v] = tallied.get(v, 0) + 1
    tally.observe_counts(tallied)
    tally.observe_counts({float("nan"): 3})  # not counted
    for v in values[6:]:
        tally.observe(v)

    def samples(registry: CollectorRegistry) -> list[tuple[str, dict[str, str], float]]:
        return [(s.name, s.labels, round(s.value, 9)) for f in registry.collect() for s in f.samples
                if not s.name.endswith("_created")]

    assert samples(tally_registry) == samples(plain_registry)
    assert generate_latest(tally_registry) == generate_latest(plain_registry)
    with pytest.raises(ValueError, match="Duplicated"):
        TallyHistogram("h", "again", buckets, tally_registry)
