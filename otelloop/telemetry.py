"""otelloop's own Prometheus metrics, built from one table (:data:`METRICS`): names, types, labels, help.

The same table generates the metrics reference (``docs/metrics.md``, by ``scripts/gen_metrics_docs.py``)
and drives the metrics tests, so the three cannot disagree.

Labels are bounded: no trace, session or span ids ever; service and model values are capped
(:data:`LABEL_VALUE_CAP` distinct values each, the rest reported as ``other``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from otelloop import __version__

#: Distinct values kept per capped label (service, model); later ones become ``other``.
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


class MetricSpec(NamedTuple):
    """One of otelloop's own metrics: the entry the registry, the docs and the tests all read.

    Attributes:
        name: the metric name as registered; a counter is exposed with ``_total`` appended.
        type: ``counter``, ``gauge`` or ``histogram``.
        labels: label names, in the order ``.labels(...)`` takes their values. Never an id.
        help: the HELP line of the exposition (one sentence).
        detail: what the docs add to ``help``: the values a label takes, when a sample is counted.
        attribute: the :class:`Metrics` attribute holding it; None for the session gauges, which are
            computed when scraped (:meth:`Metrics.observe_state`).
        buckets: histogram bucket bounds.
    """

    name: str
    type: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    detail: str = ""
    attribute: str | None = None
    buckets: tuple[float, ...] = ()

    @property
    def exposed(self) -> str:
        """The name Prometheus scrapes (``otelloop_steps_total`` for the counter ``otelloop_steps``)."""
        return f"{self.name}_total" if self.type == "counter" else self.name


#: otelloop's metrics, in the order of docs/metrics.md (generated from this table by
#: ``scripts/gen_metrics_docs.py``). Names and labels are a contract: dashboards and alerts use them.
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("otelloop_spans_received", "counter", ("transport",),
               "Spans received, by transport.",
               "Spans in requests that decoded, whether accepted or refused for backpressure.",
               attribute="spans_received"),
    MetricSpec("otelloop_spans_refused", "counter", ("transport", "reason"),
               "Spans refused, by transport and reason (invalid, too_large, unauthenticated, backpressure).",
               "A request refused before it could be decoded (`invalid`, `too_large`, `unauthenticated`) "
               "counts as 1, since its spans cannot be counted; gRPC requests over the size limit are "
               "refused inside gRPC itself and are not counted.",
               attribute="spans_refused"),
    MetricSpec("otelloop_spans_exported", "counter", (),
               "Spans delivered upstream.", attribute="spans_exported"),
    MetricSpec("otelloop_spans_export_failed", "counter", ("reason",),
               "Spans that could not be delivered upstream, by reason.",
               "Spans given up on: `rejected` (non-retryable status), `partial_success`, `too_large`, "
               "`shutdown`.",
               attribute="spans_export_failed"),
    MetricSpec("otelloop_export_queue_spans", "gauge", (),
               "Spans waiting in the export queue.", "Spans accepted and not yet delivered.",
               attribute="export_queue_spans"),
    MetricSpec("otelloop_export_queue_capacity_spans", "gauge", (),
               "Capacity of the export queue, in spans.", "The setting `exporter.queue_spans`.",
               attribute="export_queue_capacity"),
    MetricSpec("otelloop_export_duration_seconds", "histogram", ("outcome",),
               "Duration of one upstream export attempt, by outcome.",
               "Outcomes: `success`, `retryable`, `permanent`.",
               attribute="export_duration", buckets=_LATENCY_BUCKETS),
    MetricSpec("otelloop_request_duration_seconds", "histogram", ("transport",),
               "Time spent inside otelloop per received request.",
               attribute="request_duration", buckets=_LATENCY_BUCKETS),
    MetricSpec("otelloop_steps", "counter", ("kind", "service"),
               "Agent steps recognised, by kind and service.", attribute="steps"),
    MetricSpec("otelloop_findings", "counter", ("detector", "finding", "severity", "service"),
               "Detector findings.", "`finding` is the span event name without `otelloop.`.",
               attribute="findings"),
    MetricSpec("otelloop_sessions_active", "gauge", (),
               "Sessions held in state."),
    MetricSpec("otelloop_sessions", "gauge", ("verdict",),
               "Sessions held in state, by verdict.", "Verdicts: `continue`, `nudge`, `stop`, `paused`."),
    MetricSpec("otelloop_sessions_evicted", "counter", ("reason",),
               "Sessions dropped from state, by reason (capacity, idle).",
               "`capacity`: over `state.max_sessions`; `idle`: unseen for `state.idle_timeout`.",
               attribute="sessions_evicted"),
    MetricSpec("otelloop_entropy_score", "histogram", (),
               "Entropy scores computed per step.", attribute="entropy_score", buckets=_SCORE_BUCKETS),
    MetricSpec("otelloop_tokens", "counter", ("direction", "service", "model"),
               "Tokens used by agents, by direction, service and model.",
               "Tokens reported by agent spans; `direction` is `input` or `output`.", attribute="tokens"),
    MetricSpec("otelloop_cost_usd", "counter", ("service", "model"),
               "Cost of agent steps in USD, by service and model.",
               "From the spans' cost attributes, else computed with the `pricing` table.", attribute="cost"),
    MetricSpec("otelloop_detector_errors", "counter", ("detector",),
               "Detector exceptions (the span is kept).", "The other detectors still run on the step.",
               attribute="detector_errors"),
    MetricSpec("otelloop_mapping_errors", "counter", ("field",),
               "Span attributes ignored because of a wrong type or value, by field.",
               "A wrong type, NaN or a negative value.", attribute="mapping_errors"),
    MetricSpec("otelloop_config_reloads", "counter", ("outcome",),
               "Configuration reloads, by outcome.", "SIGHUP reloads, `applied` or `rejected`.",
               attribute="config_reloads"),
    MetricSpec("otelloop_event_stream_clients", "gauge", (),
               "Clients connected to the event stream (/v1/events).",
               "Open console pages and other consumers of `/v1/events`.", attribute="event_stream_clients"),
    MetricSpec("otelloop_event_stream_clients_dropped", "counter", (),
               "Event stream clients disconnected for reading too slowly.",
               "A client that falls `admin.event_buffer_kib` behind is disconnected; it reconnects and reloads.",
               attribute="event_stream_clients_dropped"),
    MetricSpec("otelloop_event_stream_events_lost", "counter", (),
               "Events the event stream could not carry (clients were told to reload).",
               "Events dropped when the stream's own queue was full.", attribute="event_stream_events_lost"),
    MetricSpec("otelloop_build_info", "gauge", ("version",),
               "otelloop build information.", "Always 1.", attribute="build_info"),
)
SPECS: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}



def _build(spec: MetricSpec, registry: CollectorRegistry) -> Counter | Gauge | Histogram:
    if spec.type == "histogram":
        return Histogram(spec.name, spec.help, spec.labels, buckets=spec.buckets, registry=registry)
    kind = Counter if spec.type == "counter" else Gauge
    return kind(spec.name, spec.help, spec.labels, registry=registry)


class Metrics:
    """All otelloop metrics, built from :data:`METRICS` in ``registry``.

    Each service has a registry of its own, so tests stay isolated. The attributes are declared here for
    the type checker; the table names the attribute of each metric.
    """

    spans_received: Counter
    spans_refused: Counter
    spans_exported: Counter
    spans_export_failed: Counter
    export_queue_spans: Gauge
    export_queue_capacity: Gauge
    export_duration: Histogram
    request_duration: Histogram
    steps: Counter
    findings: Counter
    sessions_evicted: Counter
    entropy_score: Histogram
    tokens: Counter
    cost: Counter
    detector_errors: Counter
    mapping_errors: Counter
    config_reloads: Counter
    event_stream_clients: Gauge
    event_stream_clients_dropped: Counter
    event_stream_events_lost: Counter
    build_info: Gauge

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        self.service_label = CappedLabel()
        self.model_label = CappedLabel()
        for spec in METRICS:
            if spec.attribute is not None:
                setattr(self, spec.attribute, _build(spec, r))
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
        active, by_verdict = SPECS["otelloop_sessions_active"], SPECS["otelloop_sessions"]
        yield GaugeMetricFamily(active.name, active.help, value=self._active())
        g = GaugeMetricFamily(by_verdict.name, by_verdict.help, labels=list(by_verdict.labels))
        counts = self._by_verdict()
        for verdict in ("continue", "nudge", "stop", "paused"):
            g.add_metric([verdict], counts.get(verdict, 0))
        yield g

    def describe(self):  # type: ignore[no-untyped-def]
        return []
