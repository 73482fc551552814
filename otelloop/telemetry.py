"""otelloop's own Prometheus metrics, built from one table (:data:`METRICS`): names, types, labels, help.

The same table generates the metrics reference (``docs/metrics.md``, by ``scripts/gen_metrics_docs.py``)
and drives the metrics tests, so the three cannot disagree.

Labels are bounded: no trace, session or span ids ever. The families labelled by service or model
(steps, unjudged steps, findings, tokens, cost) are bounded twice (see docs/metrics.md, "Bounded series"): each of those
labels keeps at most ``metrics.max_label_values`` distinct values, the rest reported as ``other``, and
the families together hold at most ``metrics.max_series`` series, a new combination beyond it counted
under ``other``. A value or series unseen for ``metrics.label_idle_timeout`` gives up its place when a new
one needs it: its series are removed from the registry (a scrape then no longer shows them; if the value
comes back its counters start again from zero, which ``rate()`` and ``increase()`` read as a reset).
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from otelloop.version import full_version

#: Distinct values kept per capped label (service, model) by default; later ones become ``other``.
LABEL_VALUE_CAP = 200
#: Series the capped families hold together by default.
MAX_SERIES = 2000
#: Seconds a label value or series must go unseen before its place can be given to a new one.
LABEL_IDLE_TIMEOUT = 3600.0
OTHER = "other"

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_SCORE_BUCKETS = (0.1, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)

SeriesKey = tuple[str, tuple[str, ...]]


class CappedLabel:
    """Maps free-form label values (service names, models) onto at most ``cap`` values plus ``other``.

    Values are kept in least-recently-seen order. When a new value finds every slot taken, the least
    recently seen value gives up its slot if it has been unseen for ``idle_timeout`` seconds (its
    series are removed through ``on_free``); otherwise the new value is reported as ``other``.
    """

    __slots__ = ("cap", "idle_timeout", "on_free", "_seen")

    def __init__(self, cap: int = LABEL_VALUE_CAP, idle_timeout: float = LABEL_IDLE_TIMEOUT,
                 on_free: Callable[[str], None] | None = None) -> None:
        self.cap = cap
        self.idle_timeout = idle_timeout
        self.on_free = on_free
        #: value -> when it was last seen (monotonic seconds), least recently seen first
        self._seen: OrderedDict[str, float] = OrderedDict()

    def __call__(self, value: str | None, now: float | None = None) -> str:
        if not value:
            return "unknown"
        if now is None:
            now = time.monotonic()
        seen = self._seen
        if value in seen:
            seen[value] = now
            seen.move_to_end(value)
            return value
        while len(seen) >= self.cap:  # more than one only after a reload lowered the cap
            oldest, last = next(iter(seen.items()))
            if now - last < self.idle_timeout:
                return OTHER
            del seen[oldest]
            if self.on_free is not None:
                self.on_free(oldest)
        seen[value] = now
        return value

    def __len__(self) -> int:
        return len(self._seen)


class BoundedSeries:
    """The series of the families labelled by service or model, at most ``max_series`` of them.

    :meth:`child` is what the pipeline calls instead of ``family.labels(...)``. A new series beyond the
    bound takes the place of the least recently used one if that one has been idle for ``idle_timeout``
    (it is removed from its family), else it is counted in its family's ``other`` series (every capped
    label ``other``; there are few of those, since the other labels take fixed values, and they are not
    counted against the bound).
    """

    def __init__(self, max_series: int = MAX_SERIES, idle_timeout: float = LABEL_IDLE_TIMEOUT) -> None:
        self.max_series = max_series
        self.idle_timeout = idle_timeout
        #: (family name, label values) -> _Series, least recently used first
        self._series: OrderedDict[SeriesKey, _Series] = OrderedDict()
        #: (capped label, value) -> the keys of the series carrying it, to remove them when it is freed
        self._by_value: dict[tuple[int, str], set[SeriesKey]] = {}
        self._overflow: dict[SeriesKey, Any] = {}
        #: series removed so far (freed label values and idle series)
        self.removed = 0

    def __len__(self) -> int:
        return len(self._series)

    def child(self, name: str, family: Any, values: tuple[str, ...], capped: tuple[tuple[int, int], ...],
              now: float) -> Any:
        """The child of ``family`` (called ``name``) for ``values``; ``capped``: (position in ``values``,
        capped label) pairs."""
        key = (name, values)
        series = self._series.get(key)
        if series is not None:
            series.last = now
            self._series.move_to_end(key)
            return series.child
        while len(self._series) >= self.max_series:  # more than one only after a reload lowered the bound
            if not self._free_idle(now):
                return self._other(name, family, values, capped)
        series = self._series[key] = _Series(family, family.labels(*values), now, capped)
        for pos, label in capped:
            self._by_value.setdefault((label, values[pos]), set()).add(key)
        return series.child

    def free_value(self, label: int, value: str) -> None:
        """Remove every series carrying ``value`` in capped label ``label`` (its slot was given up)."""
        for key in self._by_value.pop((label, value), ()):
            series = self._series.pop(key, None)
            if series is not None:
                self._remove(key, series)

    def _free_idle(self, now: float) -> bool:
        key, series = next(iter(self._series.items()))
        if now - series.last < self.idle_timeout:
            return False
        del self._series[key]
        self._remove(key, series)
        return True

    def _remove(self, key: SeriesKey, series: _Series) -> None:
        values = key[1]
        with contextlib.suppress(KeyError):
            series.family.remove(*values)
        self.removed += 1
        for pos, label in series.capped:
            index = self._by_value.get((label, values[pos]))
            if index is not None:
                index.discard(key)
                if not index:
                    del self._by_value[(label, values[pos])]

    def _other(self, name: str, family: Any, values: tuple[str, ...],
               capped: tuple[tuple[int, int], ...]) -> Any:
        folded = list(values)
        for pos, _ in capped:
            folded[pos] = OTHER
        key = (name, tuple(folded))
        child = self._overflow.get(key)
        if child is None:
            child = self._overflow[key] = family.labels(*folded)
        return child


class _Series:
    __slots__ = ("family", "child", "last", "capped")

    def __init__(self, family: Any, child: Any, last: float, capped: tuple[tuple[int, int], ...]) -> None:
        self.family = family
        self.child = child
        self.last = last
        self.capped = capped


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
        tally: an unlabelled histogram observed on every step, fed a request's tally at once
            (:class:`TallyHistogram`).
    """

    name: str
    type: Literal["counter", "gauge", "histogram"]
    labels: tuple[str, ...]
    help: str
    detail: str = ""
    attribute: str | None = None
    buckets: tuple[float, ...] = ()
    tally: bool = False

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
               "refused inside gRPC itself and are not counted. `too_large` also counts, one by one, spans "
               "too large for the upstream even alone (over `exporter.max_request_mib` with their resource "
               "and scope): they are refused inside an OTLP partial success, the rest of their request "
               "accepted. `invalid` likewise counts spans whose ids OTLP calls invalid (a `trace_id` not of "
               "16 bytes or all zero, a `span_id` not of 8 bytes or all zero, a parent or link id of another "
               "size), refused inside a partial success and never forwarded.",
               attribute="spans_refused"),
    MetricSpec("otelloop_requests_aborted", "counter", ("transport", "reason"),
               "Requests abandoned before they were read whole, by transport and reason.",
               "`client_gone`: the client closed the connection or cancelled; `timeout`: an HTTP body took longer "
               "than `receiver.http.read_body_timeout`.", attribute="requests_aborted"),
    MetricSpec("otelloop_spans_exported", "counter", (),
               "Spans delivered upstream.", attribute="spans_exported"),
    MetricSpec("otelloop_spans_export_failed", "counter", ("reason",),
               "Spans that could not be delivered upstream, by reason.",
               "Spans given up on: `rejected` (non-retryable status), `partial_success`, `too_large` (a span "
               "over `exporter.max_request_mib` found in the queue, which only a queue written under a larger "
               "bound can hold), `shutdown`.",
               attribute="spans_export_failed"),
    MetricSpec("otelloop_spans_enrichment_skipped", "counter", ("reason",),
               "Spans forwarded without otelloop's events and attributes, by reason.",
               "`too_large`: with them the span would exceed `exporter.max_request_mib`.",
               attribute="spans_enrichment_skipped"),
    MetricSpec("otelloop_spans_duplicate", "counter", (),
               "Step spans seen again in their session (same trace and span id), which changed nothing.",
               "At-least-once delivery re-sends a request whose answer was lost (OTLP exporters, the "
               "Collector's `retry_on_failure`). Such a span is forwarded as it came, without otelloop's "
               "attributes or events, and no session state changes; see docs/detectors.md#duplicates.",
               attribute="spans_duplicate"),
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
               "Until the client's answer: with `receiver.acknowledge: received`, the reading and checking "
               "of the request, not its processing.",
               attribute="request_duration", buckets=_LATENCY_BUCKETS),
    MetricSpec("otelloop_receive_backlog_requests", "gauge", (),
               "Requests answered on receipt and not yet processed.",
               "With `receiver.acknowledge: received` (the default without a persistent queue): requests "
               "wait here in arrival order for mapping, detection and enrichment. Near zero at moderate "
               "load; when `receiver.backlog_spans` spans wait, detection is behind and clients are asked "
               "to retry (`otelloop_spans_refused_total{reason=\"backpressure\"}`).",
               attribute="receive_backlog_requests"),
    MetricSpec("otelloop_steps", "counter", ("kind", "service"),
               "Agent steps recognised, by kind and service.", attribute="steps"),
    MetricSpec("otelloop_steps_unjudged", "counter", ("service",),
               "Tool steps whose spans carried nothing to judge them by, by service.",
               "No result, no effect known from the arguments, no error message: the agent's instrumentation "
               "does not capture content (docs/mapping.md, \"Turning content capture on\"). Such a step is "
               "neither progress nor evidence of a loop. Counted while detectors run.",
               attribute="steps_unjudged"),
    MetricSpec("otelloop_findings", "counter", ("detector", "finding", "severity", "service"),
               "Detector findings.", "`finding` is the span event name without `otelloop.`.",
               attribute="findings"),
    MetricSpec("otelloop_sessions_active", "gauge", (),
               "Sessions held in state."),
    MetricSpec("otelloop_sessions", "gauge", ("verdict",),
               "Sessions held in state, by verdict.", "Verdicts: `continue`, `nudge`, `stop`, `paused`."),
    MetricSpec("otelloop_sessions_evicted", "counter", ("reason",),
               "Sessions dropped from state, by reason (capacity, idle, memory).",
               "`capacity`: over `state.max_sessions`; `idle`: unseen for `state.idle_timeout`; `memory`: shed "
               "by the memory guard (`limits.memory_mib`).",
               attribute="sessions_evicted"),
    MetricSpec("otelloop_entropy_score", "histogram", (),
               "Entropy scores computed per step.", attribute="entropy_score", buckets=_SCORE_BUCKETS,
               tally=True),
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
    MetricSpec("otelloop_memory_sheds", "counter", (),
               "Times the memory guard (limits.memory_mib) dropped caches and sessions.",
               "See docs/deploy.md, \"Memory\".", attribute="memory_sheds"),
    MetricSpec("otelloop_memory_accounted_bytes", "gauge", (),
               "Memory otelloop accounts for: startup size, sessions x their estimated size, cache budgets in use.",
               "What the memory guard judges recovery on; computed when scraped."),
    MetricSpec("otelloop_memory_in_flight_bytes", "gauge", (),
               "Memory held by requests in flight: received and not yet delivered upstream.",
               "Bodies as received and decompressed, what decoding and enrichment copy, and the in-memory "
               "export queue; held to a share of `limits.memory_mib`, computed when scraped."),
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
    MetricSpec("otelloop_admin_lists_refused", "counter", (),
               "Session lists refused because too many were being computed or waiting (503).",
               "At most `admin.max_concurrent_lists` are computed at once and 64 times as many wait; see "
               "docs/console.md.", attribute="admin_lists_refused"),
    MetricSpec("otelloop_build_info", "gauge", ("version",),
               "otelloop build information.", "Always 1.", attribute="build_info"),
)
SPECS: dict[str, MetricSpec] = {spec.name: spec for spec in METRICS}



class TallyHistogram:
    """An unlabelled histogram fed a request at a time: ``observe_counts({value: count, …})``.

    Why not ``prometheus_client.Histogram``: it takes a lock and walks its buckets on every observation,
    and a score observed on every step made that a measurable part of a step's cost. Scores take few
    distinct values, so a request's are tallied (value → count) and added under one lock. A scrape
    shows the same series as ``Histogram`` would (``_bucket`` with ``le``, ``_count``, ``_sum``). NaN
    values are not counted.
    """

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...],
                 registry: CollectorRegistry) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.name, self.documentation = name, documentation
        self._bounds = bounds
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._lock = threading.Lock()
        registry.register(self)

    def observe(self, value: float) -> None:
        self.observe_counts({value: 1})

    def observe_counts(self, tally: Mapping[float, int]) -> None:
        """Add ``count`` observations of each ``value``."""
        bounds = self._bounds
        placed = [(bisect.bisect_left(bounds, v), n, v * n) for v, n in tally.items() if v == v]
        with self._lock:
            for i, n, total in placed:
                self._counts[i] += n
                self._sum += total

    def collect(self):  # type: ignore[no-untyped-def]
        with self._lock:
            counts, total = list(self._counts), self._sum
        buckets, seen = [], 0
        for bound, n in zip(self._bounds, counts, strict=True):
            seen += n
            buckets.append((floatToGoString(bound), seen))  # type: ignore[no-untyped-call]
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=total)

    def describe(self):  # type: ignore[no-untyped-def]
        yield HistogramMetricFamily(self.name, self.documentation)


def _build(spec: MetricSpec, registry: CollectorRegistry) -> Counter | Gauge | Histogram | TallyHistogram:
    if spec.type == "histogram" and spec.tally:
        if spec.labels:
            raise ValueError(f"{spec.name}: a tallied histogram has no labels")
        return TallyHistogram(spec.name, spec.help, spec.buckets, registry)
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
    requests_aborted: Counter
    spans_exported: Counter
    spans_enrichment_skipped: Counter
    spans_duplicate: Counter
    spans_export_failed: Counter
    export_queue_spans: Gauge
    export_queue_capacity: Gauge
    export_duration: Histogram
    request_duration: Histogram
    receive_backlog_requests: Gauge
    steps: Counter
    steps_unjudged: Counter
    findings: Counter
    sessions_evicted: Counter
    entropy_score: TallyHistogram
    tokens: Counter
    cost: Counter
    detector_errors: Counter
    mapping_errors: Counter
    config_reloads: Counter
    memory_sheds: Counter
    event_stream_clients: Gauge
    event_stream_clients_dropped: Counter
    event_stream_events_lost: Counter
    admin_lists_refused: Counter
    build_info: Gauge

    def __init__(self, registry: CollectorRegistry | None = None, limits: Any = None) -> None:
        # No ``*_created`` series: they would double the series count and no rule or dashboard reads them.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        r = self.registry = registry or CollectorRegistry()
        self.series = BoundedSeries(MAX_SERIES, LABEL_IDLE_TIMEOUT)
        self.service_label = CappedLabel(on_free=lambda v: self.series.free_value(_SERVICE, v))
        self.model_label = CappedLabel(on_free=lambda v: self.series.free_value(_MODEL, v))
        if limits is not None:
            self.configure(limits)
        for spec in METRICS:
            if spec.attribute is not None:
                setattr(self, spec.attribute, _build(spec, r))
        self.build_info.labels(full_version()).set(1)
        for reason in ("capacity", "idle", "memory"):
            self.sessions_evicted.labels(reason)
        for outcome in ("applied", "rejected"):
            self.config_reloads.labels(outcome)

    def configure(self, limits: Any) -> None:
        """Apply ``metrics.*`` bounds (at start and on reload; shrinking frees places as they go idle)."""
        self.series.max_series = limits.max_series
        self.series.idle_timeout = limits.label_idle_timeout
        for label in (self.service_label, self.model_label):
            label.cap = limits.max_label_values
            label.idle_timeout = limits.label_idle_timeout

    def step_counter(self, kind: str, service: str, now: float) -> Any:
        return self.series.child("steps", self.steps, (kind, service), _CAPPED_SERVICE_AT_1, now)

    def unjudged_counter(self, service: str, now: float) -> Any:
        return self.series.child("steps_unjudged", self.steps_unjudged, (service,), _CAPPED_SERVICE_AT_0, now)

    def finding_counter(self, detector: str, finding: str, severity: str, service: str, now: float) -> Any:
        return self.series.child("findings", self.findings, (detector, finding, severity, service),
                                 _CAPPED_SERVICE_AT_3, now)

    def token_counter(self, direction: str, service: str, model: str, now: float) -> Any:
        return self.series.child("tokens", self.tokens, (direction, service, model), _CAPPED_TOKENS, now)

    def cost_counter(self, service: str, model: str, now: float) -> Any:
        return self.series.child("cost", self.cost, (service, model), _CAPPED_COST, now)

    def observe_memory(self, accounted: Callable[[], int], in_flight: Callable[[], int] = lambda: 0) -> None:
        """Register ``otelloop_memory_accounted_bytes`` and ``otelloop_memory_in_flight_bytes``, computed when
        scraped."""
        self.registry.register(_MemoryCollector(accounted, in_flight))

    def observe_state(self, active: Callable[[], int], by_verdict: Callable[[], dict[str, int]]) -> None:
        """Register the session gauges, computed at scrape time rather than on every step."""
        self.registry.register(_SessionCollector(active, by_verdict))


_SERVICE, _MODEL = 0, 1
_CAPPED_SERVICE_AT_0 = ((0, _SERVICE),)
_CAPPED_SERVICE_AT_1 = ((1, _SERVICE),)
_CAPPED_SERVICE_AT_3 = ((3, _SERVICE),)
_CAPPED_TOKENS = ((1, _SERVICE), (2, _MODEL))
_CAPPED_COST = ((0, _SERVICE), (1, _MODEL))


class _MemoryCollector:
    """``otelloop_memory_accounted_bytes`` (state, by the guard's accounting) and
    ``otelloop_memory_in_flight_bytes`` (requests in flight)."""

    def __init__(self, accounted: Callable[[], int], in_flight: Callable[[], int]) -> None:
        self._accounted = accounted
        self._in_flight = in_flight

    def collect(self):  # type: ignore[no-untyped-def]
        spec = SPECS["otelloop_memory_accounted_bytes"]
        yield GaugeMetricFamily(spec.name, spec.help, value=self._accounted())
        spec = SPECS["otelloop_memory_in_flight_bytes"]
        yield GaugeMetricFamily(spec.name, spec.help, value=self._in_flight())

    def describe(self):  # type: ignore[no-untyped-def]
        return []


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
