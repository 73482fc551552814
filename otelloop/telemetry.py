"""otelloop's own Prometheus metrics (SPEC §7): the one table of names, types, help and labels.

Labels are bounded: no trace, session or span ids ever; service, agent and model values are capped
(:data:`LABEL_VALUE_CAP` distinct values each, the rest reported as ``other``).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from otelloop import __version__

#: Distinct values kept per capped label (service, agent, model); later ones become ``other``.
LABEL_VALUE_CAP = 200
OTHER = "other"

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SCORE_BUCKETS = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


class CappedLabel:
    """Maps free-form label values (service names, models) onto at most ``cap`` values plus ``other``."""

    __slots__ = ("cap", "_seen")

    def __init__(self, cap: int = LABEL_VALUE_CAP) -> None:
        self.cap = cap
        self._seen: set[str] = set()

    def __call__(self, value: str | None) -> str:
        if not value:
            return "unknown"
        if value in self._seen:
            return value
        if len(self._seen) < self.cap:
            self._seen.add(value)
            return value
        return OTHER


class Metrics:
    """All otelloop metrics, registered in ``registry`` (a fresh one per service, so tests stay isolated)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.service_label = CappedLabel()
        self.model_label = CappedLabel()
        self.agent_label = CappedLabel()
        self.spans_received = Counter("otelloop_spans_received", "Spans received, by transport.",
                                      ["transport"], registry=r)
        self.spans_refused = Counter(
            "otelloop_spans_refused", "Spans refused, by transport and reason "
            "(invalid, too_large, unauthenticated, backpressure).", ["transport", "reason"], registry=r)
        self.requests_aborted = Counter(
            "otelloop_requests_aborted", "Requests abandoned before they were read whole, by transport and "
            "reason (client_gone: the client closed the connection or cancelled; timeout: an HTTP body took "
            "longer than receiver.http.read_body_timeout).",
            ["transport", "reason"], registry=r)
        self.spans_exported = Counter("otelloop_spans_exported", "Spans delivered upstream.", registry=r)
        self.spans_export_failed = Counter(
            "otelloop_spans_export_failed", "Spans that could not be delivered upstream, by reason.",
            ["reason"], registry=r)
        self.spans_enrichment_skipped = Counter(
            "otelloop_spans_enrichment_skipped", "Spans forwarded without otelloop's events and attributes, "
            "by reason (too_large: with them the span would exceed exporter.max_request_mib).", ["reason"],
            registry=r)
        self.export_queue_spans = Gauge("otelloop_export_queue_spans", "Spans waiting in the export queue.",
                                        registry=r)
        self.export_queue_capacity = Gauge("otelloop_export_queue_capacity_spans",
                                           "Capacity of the export queue, in spans.", registry=r)
        self.export_duration = Histogram("otelloop_export_duration_seconds",
                                         "Duration of one upstream export attempt, by outcome.", ["outcome"],
                                         buckets=_LATENCY_BUCKETS, registry=r)
        self.request_duration = Histogram(
            "otelloop_request_duration_seconds", "Time spent inside otelloop per received request.",
            ["transport"], buckets=_LATENCY_BUCKETS, registry=r)
        self.steps = Counter("otelloop_steps", "Agent steps recognised, by kind and service.",
                             ["kind", "service"], registry=r)
        self.findings = Counter("otelloop_findings", "Detector findings.",
                                ["detector", "finding", "severity", "service"], registry=r)
        self.sessions_evicted = Counter("otelloop_sessions_evicted",
                                        "Sessions dropped from state, by reason (capacity, idle).", ["reason"],
                                        registry=r)
        self.entropy_score = Histogram("otelloop_entropy_score", "Entropy scores computed per step.",
                                       buckets=_SCORE_BUCKETS, registry=r)
        self.tokens = Counter("otelloop_tokens", "Tokens used by agents, by direction, service and model.",
                              ["direction", "service", "model"], registry=r)
        self.cost = Counter("otelloop_cost_usd", "Cost of agent steps in USD, by service and model.",
                            ["service", "model"], registry=r)
        self.detector_errors = Counter("otelloop_detector_errors", "Detector exceptions (the span is kept).",
                                       ["detector"], registry=r)
        self.mapping_errors = Counter("otelloop_mapping_errors",
                                      "Span attributes ignored because of a wrong type or value, by field.",
                                      ["field"], registry=r)
        self.config_reloads = Counter("otelloop_config_reloads", "Configuration reloads, by outcome.",
                                      ["outcome"], registry=r)
        self.build_info = Gauge("otelloop_build_info", "otelloop build information.", ["version"], registry=r)
        self.build_info.labels(__version__).set(1)
        for reason in ("capacity", "idle"):
            self.sessions_evicted.labels(reason)
        for outcome in ("applied", "rejected"):
            self.config_reloads.labels(outcome)

    def observe_state(self, active: Callable[[], int], by_verdict: Callable[[], dict[str, int]]) -> None:
        """Register the session gauges, computed at scrape time rather than on every step."""
        self.registry.register(_SessionCollector(active, by_verdict))


class _SessionCollector:
    """``otelloop_sessions_active`` and ``otelloop_sessions{verdict}`` read from the store when scraped."""

    def __init__(self, active: Callable[[], int], by_verdict: Callable[[], dict[str, int]]) -> None:
        self._active = active
        self._by_verdict = by_verdict

    def collect(self):  # type: ignore[no-untyped-def]
        yield GaugeMetricFamily("otelloop_sessions_active", "Sessions held in state.", value=self._active())
        g = GaugeMetricFamily("otelloop_sessions", "Sessions held in state, by verdict.", labels=["verdict"])
        counts = self._by_verdict()
        for verdict in ("continue", "nudge", "stop", "paused"):
            g.add_metric([verdict], counts.get(verdict, 0))
        yield g

    def describe(self):  # type: ignore[no-untyped-def]
        return []
