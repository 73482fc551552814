"""The processing of one OTLP request: decode → map → detect → enrich.

This is the only module that knows every stage. It is split in two phases so a receiver can refuse a
request after decoding it and before anything changes: :meth:`Pipeline.decode` is free of side effects
on detector state, :meth:`Pipeline.process` updates sessions and returns the bytes to forward. ``serve``
and ``analyze`` both use it, so the same input gives the same findings live and offline.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from otelloop.config import Config, build_config
from otelloop.detectors.base import StepContext
from otelloop.detectors.engine import DetectorEngine
from otelloop.mapping.mapper import Mapper
from otelloop.model import AttrValue, Finding, Step
from otelloop.otlp import scan, wire
from otelloop.otlp.scan import SpanInfo
from otelloop.state import RECENT_STEPS, Session, SessionStore, push_recent
from otelloop.telemetry import Metrics

log = logging.getLogger(__name__)

#: A span's index in its request, in reading order (see ``otelloop.otlp.scan``).
Position = int
FindingSink = Callable[[Step, Finding], None]


class InvalidRequest(ValueError):
    """The request could not be decoded; the message says why (sent back to the client)."""


@dataclass(slots=True)
class Decoded:
    """A decoded request and the steps found in it, before any state has changed."""

    data: bytes
    spans: int
    steps: list[tuple[Position, Step, SpanInfo]]
    mapping_errors: list[str]


@dataclass(slots=True)
class Processed:
    """What became of a request: the bytes to forward and what was found."""

    data: bytes
    spans: int
    steps: int
    modified: bool
    findings: list[tuple[Step, Finding]] = field(default_factory=list)


class Pipeline:
    """Decode, map, detect and enrich OTLP trace requests.

    Args:
        config: configuration in force.
        metrics: where to count steps, findings, tokens and errors (a private registry if omitted).
        clock: monotonic clock for session recency and metric series idleness (injectable for tests).
    """

    def __init__(self, config: Config | None = None, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or build_config({}, env={})
        self.metrics = metrics or Metrics()
        self.mapper = Mapper(self.config)
        self.engine = DetectorEngine(self.config.detectors, on_error=self._detector_failed)
        self.scanner = self._scanner()
        self.store = SessionStore(self.config.state.max_sessions, self.config.state.idle_timeout,
                                  on_evict=self._evicted, clock=clock)
        self.clock = clock
        self.finding_sinks: list[FindingSink] = []

    # -- configuration -----------------------------------------------------------------------------

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded configuration from the next step on (listeners and exporter are not changed)."""
        self.config = config
        self.mapper = Mapper(config)
        self.engine.reconfigure(config.detectors)
        self.scanner = self._scanner()
        self.store.resize(config.state.max_sessions, config.state.idle_timeout)

    def _scanner(self) -> scan.Scanner:
        """A reader that keeps the keys and event attributes the mapping reads and the keys detectors may
        overwrite, and runs the mapper's program (spans carrying an overwritten key keep their attribute
        dict)."""
        overwritten = self.engine.overwritten_keys()
        return scan.Scanner(self.mapper.keys | overwritten, max_value_bytes=self.config.mapping.max_text_bytes,
                            program=self.mapper.program(overwritten),
                            events=[(event, attribute) for _, event, attribute in self.mapper.events])

    # -- phase 1: decode and map (no state changes) ------------------------------------------------

    def decode(self, data: bytes) -> Decoded:
        """Parse an ``ExportTraceServiceRequest`` and map its spans to steps.

        Raises:
            InvalidRequest: the bytes are not a valid request.
        """
        try:
            resources, infos, errors = self.scanner.scan(data)
        except ValueError as e:
            raise InvalidRequest(f"cannot decode ExportTraceServiceRequest: {e}") from None
        map_span = self.mapper.map_span
        steps: list[tuple[Position, Step, SpanInfo]] = []
        for i, info in enumerate(infos):
            if info is not None:
                step = map_span(info, resources[info[0]], errors)
                if step is not None:
                    steps.append((i, step, info))
        steps.sort(key=_start_time)
        return Decoded(data, len(infos), steps, errors)

    # -- phase 2: detect and enrich ----------------------------------------------------------------

    def process(self, decoded: Decoded) -> Processed:
        """Run the detectors over the request's steps and return the (possibly enriched) bytes."""
        if decoded.mapping_errors:
            for fld, n in Counter(decoded.mapping_errors).items():
                self.metrics.mapping_errors.labels(fld).inc(n)
        if not decoded.steps:
            return Processed(decoded.data, decoded.spans, 0, False)
        extras: list[bytes | None] = [None] * decoded.spans
        replacements: dict[Position, dict[str, AttrValue]] = {}
        findings: list[tuple[Step, Finding]] = []
        usage = _Usage(self.metrics, self.clock)
        langfuse = self.config.enrich.langfuse_attributes
        detecting = bool(self.engine.detectors)
        store = self.store
        for group in _by_session(decoded.steps):
            session = self.store.touch(group[0][1].session)
            agent = _account(session, group, usage.by_key)
            if not detecting:
                # Only the verdict is added, which no step of this request can change.
                session.agent = agent or session.agent
                verdict = _verdict_attribute(session.verdict)
                for item in group:
                    extras[item[0]] = verdict
                continue
            before = session.verdict
            for pos, step, info in group:
                session.agent = step.agent or session.agent  # detectors see the agent current at each step
                ctx = self.engine.observe(session, step)
                usage.add_findings(step, ctx)
                _remember_scores(session, ctx)
                extras[pos] = self._encode(step, ctx, langfuse) or None
                if ctx.overwrites and info[8] is not None:
                    carried = info[8]
                    present = {k: v for k, v in ctx.overwrites.items() if k in carried}
                    if present:
                        replacements[pos] = present
                if ctx.findings:
                    store.findings_seen(session, step.trace_id, ctx.findings)
                    for finding in ctx.findings:
                        findings.append((step, finding))
            if session.verdict != before:
                store.verdict_changed(session, before)
        usage.flush()
        for step, finding in findings:
            for sink in self.finding_sinks:
                sink(step, finding)
        data = decoded.data
        if replacements:
            data = _replace_attributes(data, replacements, extras)
        elif any(extras):
            data = scan.splice(data, extras)
        return Processed(data, decoded.spans, len(decoded.steps), data is not decoded.data, findings)

    def _encode(self, step: Step, ctx: StepContext, langfuse: bool) -> bytes:
        out = wire.encode_span_attributes(ctx.attributes) if ctx.attributes else b""
        if not ctx.findings:
            return out
        common = {"otelloop.session_id": ctx.session_id, "otelloop.agent_id": ctx.agent_id}
        for f in ctx.findings:
            attrs: dict[str, AttrValue] = {"otelloop.detector": f.detector, "otelloop.severity": f.severity,
                                           **common, **f.attributes}
            out += wire.encode_span_event(f.event, step.end_ns or step.start_ns, attrs)
        if langfuse:
            out += wire.encode_span_attributes({
                "langfuse.observation.level": "WARNING",
                "langfuse.observation.status_message": "; ".join(f.message or f.event for f in ctx.findings)})
        return out

    # -- hooks -------------------------------------------------------------------------------------

    def _detector_failed(self, name: str) -> None:
        self.metrics.detector_errors.labels(name).inc()

    def _evicted(self, session: Session, reason: str) -> None:
        self.metrics.sessions_evicted.labels(reason).inc()

    def verdict_counts(self) -> dict[str, int]:
        return self.store.verdict_counts()


def _start_time(item: tuple[Position, Step, SpanInfo]) -> int:
    return item[1].start_ns


def _by_session(steps: list[tuple[Position, Step, SpanInfo]]) -> Iterable[list[tuple[Position, Step, SpanInfo]]]:
    """The request's steps grouped by session, each group in time order, so a session is looked up
    (and moved to the recent end of the store) once per request rather than once per step."""
    groups: dict[str, list[tuple[Position, Step, SpanInfo]]] = {}
    for item in steps:
        group = groups.get(item[1].session)
        if group is None:
            groups[item[1].session] = [item]
        else:
            group.append(item)
    return groups.values()


def _account(session: Session, group: list[tuple[Position, Step, SpanInfo]],
             usage: dict[tuple[str, str, str], list[float]]) -> str:
    """Fold a session's steps of one request into its totals (before detectors see them) and into the
    request's usage per (kind, service, model); returns the last agent named (the caller sets it, step
    by step when detectors run)."""
    if session.steps == 0:
        session.first_start_ns = group[0][1].start_ns
    session.steps += len(group)
    cost, tokens_in, tokens_out, last_end, agent = 0.0, 0, 0, session.last_end_ns, ""
    for _, step, _ in group:
        cost += step.cost_usd
        tokens_in += step.input_tokens
        tokens_out += step.output_tokens
        if step.end_ns > last_end:
            last_end = step.end_ns
        agent = step.agent or agent
        key = (step.kind, step.service, step.model or "")
        totals = usage.get(key)
        if totals is None:
            totals = usage[key] = [0, 0, 0, 0.0]
        totals[0] += 1
        totals[1] += step.input_tokens
        totals[2] += step.output_tokens
        totals[3] += step.cost_usd
    last = group[-1][1]
    push_recent(session, [item[1] for item in group[-RECENT_STEPS:]])
    session.service = last.service or session.service
    session.cost_usd += cost
    session.input_tokens += tokens_in
    session.output_tokens += tokens_out
    session.last_end_ns = last_end
    return agent


def _replace_attributes(data: bytes, replacements: dict[Position, dict[str, AttrValue]],
                        extras: list[bytes | None] | None) -> bytes:
    """Rewrite the spans that carry an attribute otelloop overwrites (rare), then splice in the extras."""
    spans = scan.span_bytes(data)
    replaced = {pos: wire.replace_span_attributes(spans[pos], repl) for pos, repl in replacements.items()}
    return scan.rewrite(data, replaced, extras)


@functools.cache
def _verdict_attribute(verdict: str) -> bytes:
    return wire.encode_span_attributes({"otelloop.verdict": verdict})


def _remember_scores(session: Session, ctx: StepContext) -> None:
    attrs = ctx.attributes
    loop = attrs.get("otelloop.loop_score")
    if isinstance(loop, (int, float)):
        session.loop_score = float(loop)
    entropy = attrs.get("otelloop.entropy_score")
    if isinstance(entropy, (int, float)):
        session.entropy_score = float(entropy)


class _Usage:
    """Per-request aggregation of step metrics, flushed once, so the hot path does not touch labels."""

    __slots__ = ("metrics", "clock", "by_key", "findings", "entropy")

    def __init__(self, metrics: Metrics, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.clock = clock
        #: (kind, service, model) -> [steps, input tokens, output tokens, cost], filled by :func:`_account`
        self.by_key: dict[tuple[str, str, str], list[float]] = {}
        self.findings: Counter[tuple[str, str, str, str]] = Counter()
        self.entropy: list[float] = []

    def add_findings(self, step: Step, ctx: StepContext) -> None:
        if ctx.findings:
            for f in ctx.findings:
                self.findings[(f.detector, f.finding, f.severity, step.service)] += 1
        score = ctx.attributes.get("otelloop.entropy_score")
        if score is not None:
            self.entropy.append(score)  # type: ignore[arg-type]

    def flush(self) -> None:
        m = self.metrics
        svc, model = m.service_label, m.model_label
        now = self.clock()
        for (kind, service, model_name), (n, tokens_in, tokens_out, usd) in self.by_key.items():
            service_l = svc(service, now)
            m.step_counter(kind, service_l, now).inc(n)
            if tokens_in or tokens_out or usd:
                model_l = model(model_name, now)
                if tokens_in:
                    m.token_counter("input", service_l, model_l, now).inc(tokens_in)
                if tokens_out:
                    m.token_counter("output", service_l, model_l, now).inc(tokens_out)
                if usd:
                    m.cost_counter(service_l, model_l, now).inc(usd)
        for (detector, finding, severity, service), n in self.findings.items():
            m.finding_counter(detector, finding, severity, svc(service, now), now).inc(n)
        for score in self.entropy:
            m.entropy_score.observe(score)


def map_request(data: bytes, config: Config | None = None) -> list[Step]:
    """The steps otelloop sees in one serialised request, in processing order (no detection)."""
    pipeline = Pipeline(config)
    return [step for _, step, _ in pipeline.decode(data).steps]
