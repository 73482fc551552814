"""otelloop's own Prometheus metrics (SPEC §7): the one table of names, types, help and labels.

Labels are bounded: no trace, session or span ids ever. The families labelled by service or model
(steps, findings, tokens, cost) are bounded twice (see docs/metrics.md, "Bounded series"): each of those
labels keeps at most ``metrics.max_label_values`` distinct values, the rest reported as ``other``, and
the families together hold at most ``metrics.max_series`` series, a new combination beyond it counted
under ``other``. A value or series unseen for ``metrics.label_idle_timeout`` gives up its place when a new
one needs it: its series are removed from the registry (a scrape then no longer shows them; if the value
comes back its counters start again from zero, which ``rate()`` and ``increase()`` read as a reset).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily

from otelloop import __version__

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
        try:
            series.family.remove(*values)
        except KeyError:
            pass
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


class Metrics:
    """All otelloop metrics, registered in ``registry`` (a fresh one per service, so tests stay isolated)."""

    def __init__(self, registry: CollectorRegistry | None = None, limits: Any = None) -> None:
        # No ``*_created`` series: they would double the series count and no rule or dashboard reads them.
        disable_created_metrics()
        r = self.registry = registry or CollectorRegistry()
        self.series = BoundedSeries(MAX_SERIES, LABEL_IDLE_TIMEOUT)
        self.service_label = CappedLabel(on_free=lambda v: self.series.free_value(_SERVICE, v))
        self.model_label = CappedLabel(on_free=lambda v: self.series.free_value(_MODEL, v))
        if limits is not None:
            self.configure(limits)
        self.spans_received = Counter("otelloop_spans_received", "Spans received, by transport.",
                                      ["transport"], registry=r)
        self.spans_refused = Counter(
            "otelloop_spans_refused", "Spans refused, by transport and reason "
            "(invalid, too_large, unauthenticated, backpressure).", ["transport", "reason"], registry=r)
        self.spans_exported = Counter("otelloop_spans_exported", "Spans delivered upstream.", registry=r)
        self.spans_export_failed = Counter(
            "otelloop_spans_export_failed", "Spans that could not be delivered upstream, by reason.",
            ["reason"], registry=r)
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
                                        "Sessions dropped from state, by reason (capacity, idle, memory).",
                                        ["reason"],
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
        self.memory_sheds = Counter("otelloop_memory_sheds",
                                    "Times the memory guard (limits.memory_mib) dropped caches and sessions.",
                                    registry=r)
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

    def finding_counter(self, detector: str, finding: str, severity: str, service: str, now: float) -> Any:
        return self.series.child("findings", self.findings, (detector, finding, severity, service),
                                 _CAPPED_SERVICE_AT_3, now)

    def token_counter(self, direction: str, service: str, model: str, now: float) -> Any:
        return self.series.child("tokens", self.tokens, (direction, service, model), _CAPPED_TOKENS, now)

    def cost_counter(self, service: str, model: str, now: float) -> Any:
        return self.series.child("cost", self.cost, (service, model), _CAPPED_COST, now)

    def observe_memory(self, accounted: Callable[[], int]) -> None:
        """Register ``otelloop_memory_accounted_bytes``, computed when scraped."""
        self.registry.register(_MemoryCollector(accounted))

    def observe_state(self, active: Callable[[], int], by_verdict: Callable[[], dict[str, int]]) -> None:
        """Register the session gauges, computed at scrape time rather than on every step."""
        self.registry.register(_SessionCollector(active, by_verdict))


_SERVICE, _MODEL = 0, 1
_CAPPED_SERVICE_AT_1 = ((1, _SERVICE),)
_CAPPED_SERVICE_AT_3 = ((3, _SERVICE),)
_CAPPED_TOKENS = ((1, _SERVICE), (2, _MODEL))
_CAPPED_COST = ((0, _SERVICE), (1, _MODEL))


class _MemoryCollector:
    """``otelloop_memory_accounted_bytes``: the memory the guard judges recovery on."""

    def __init__(self, accounted: Callable[[], int]) -> None:
        self._accounted = accounted

    def collect(self):  # type: ignore[no-untyped-def]
        yield GaugeMetricFamily("otelloop_memory_accounted_bytes",
                                "Memory otelloop accounts for: startup size, sessions x their estimated "
                                "size, cache budgets in use.", value=self._accounted())

    def describe(self):  # type: ignore[no-untyped-def]
        return []


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
