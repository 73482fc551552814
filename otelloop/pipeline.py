"""The processing of one OTLP request: decode → map → detect → enrich.

This is the only module that knows every stage. It is split in two phases so a receiver can refuse a
request after decoding it and before anything changes: :meth:`Pipeline.decode` is free of side effects
on detector state, :meth:`Pipeline.process` updates sessions and returns the bytes to forward. ``serve``
and ``analyze`` both use it, so the same input gives the same findings live and offline.

Each phase is written as a generator that yields ``None`` at checkpoints (every few hundred steps, and
between the chunks a large request is read in), so the service can run a request of hundreds of thousands
of spans in slices and keep answering probes and other clients in between (see
``otelloop.receiver.ingest``); :meth:`Pipeline.decode` and :meth:`Pipeline.process` run them to the end.
A large request is read as chunks of about :data:`CHUNK_BYTES`: each chunk is a complete request holding a
run of spans with their resource and scope (``otelloop.otlp.split``), so no single read of the native
reader walks more than one chunk, and the steps of all chunks are merged back into time order.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TypeVar

from otelloop import delivery
from otelloop.config import Config, build_config
from otelloop.detection import DetectorEngine
from otelloop.detectors.base import StepContext
from otelloop.joins import TraceJoins
from otelloop.mapping.mapper import Mapper
from otelloop.model import VERDICT_RANK, AttrValue, Finding, Step
from otelloop.otlp import scan, wire
from otelloop.otlp.scan import SpanInfo
from otelloop.otlp.split import Part, split_request
from otelloop.state import RECENT_STEPS, Session, SessionStore, push_recent
from otelloop.telemetry import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

#: A span's index in its request, in reading order (see ``otelloop.otlp.scan``).
Position = int
#: A step of a request: its span's position, the step, and what the reader handed over of the span.
Item = tuple[Position, Step, SpanInfo]
#: position -> attributes to set in place on that span (None: remove the key)
Replacements = dict[Position, dict[str, AttrValue | None]]
FindingSink = Callable[[Step, Finding], None]
#: A request larger than this is read in chunks of about this size (when the caller asks for slices).
CHUNK_BYTES = 1 << 20
#: At most this many spans per chunk, so a chunk of tiny spans is not a long read either.
CHUNK_SPANS = 8192
#: Steps detected (or spans mapped) between two checkpoints.
CHECKPOINT_STEPS = 64
#: Spans mapped between two checkpoints of :meth:`Pipeline.map_scan`: mapping a tool step with its
#: arguments and result takes up to about 0.1 ms, so 16 keep a slice near a millisecond.
MAP_CHECKPOINT_SPANS = 16
#: Steps of one session folded into its totals between two checkpoints.
_ACCOUNT_SLICE = 8192


class InvalidRequest(ValueError):
    """The request could not be decoded; the message says why (sent back to the client)."""


@dataclass(slots=True)
class Decoded:
    """A decoded request and the steps found in it, before any state has changed.

    Attributes:
        data: the request as received, or without the spans left out as invalid when it was read whole.
        spans: spans kept (every span, unless some were left out as too large or invalid).
        steps: (position, step, span info) in processing order.
        mapping_errors: fields of attributes that had the wrong type.
        chunks: the kept spans as complete smaller requests, when the request was read in chunks; None
            when ``data`` itself holds them.
        too_large: (position, size) of each span left out because a request holding only it would
            exceed the upstream's limit.
        invalid: the reason of each span left out because OTLP calls its ids invalid (a trace id not
            of 16 bytes, a span id not of 8, either all zero: see ``otelloop.otlp.scan.id_problem``).
    """

    data: bytes
    spans: int
    steps: list[Item]
    mapping_errors: list[str]
    chunks: list[Part] | None = None
    too_large: list[tuple[Position, int]] = field(default_factory=list)
    session_ids: list[str] | None = None
    invalid: list[str] = field(default_factory=list)
    #: (trace, conversation) of traces first seen with a conversation id in this request
    #: (``otelloop.joins``): a session named by such a trace may become the conversation's
    joined: list[tuple[str, str]] = field(default_factory=list)

    def sessions(self) -> list[str]:
        """The distinct sessions of this request's steps (gathered while decoding in chunks), and the trace
        sessions it may rename."""
        if self.session_ids is None:
            self.session_ids = list(dict.fromkeys(item[1].session for item in self.steps))
            self.session_ids += [trace for trace, _ in self.joined]
        return self.session_ids


@dataclass(slots=True)
class Scan:
    """A request the native reader has read, not yet mapped (:meth:`Pipeline.read`).

    Attributes:
        data: the request, without the spans left out as invalid.
        spans: spans kept.
        errors: fields of attributes that had the wrong type, so far.
        invalid: the reason of each span left out because OTLP calls its ids invalid.
        scanner: the reader it was read with (a reload replaces it and the mapper together).
        resources: the request's resources, as the reader hands them over.
        infos: what the reader handed over of each kept span (None: not a step).
    """

    data: bytes
    spans: int
    errors: list[str]
    invalid: list[str]
    scanner: scan.Scanner
    resources: list[scan.Resource] = field(default_factory=list)
    infos: list[SpanInfo | None] = field(default_factory=list)


@dataclass(slots=True)
class Processed:
    """What became of a request: the requests to forward and what was found.

    Attributes:
        parts: the (possibly enriched) spans as one or more complete requests with their span counts; the
            original bytes as one part when nothing was added.
        spans: spans forwarded.
        steps: steps seen.
        modified: whether anything was added to (or rewritten in) a span.
        findings: (step, finding) in processing order.
        originals: when modified, the same parts before enrichment (same cut, same span counts), so a span
            that enrichment made too large for the upstream can be sent as it came.
    """

    parts: list[Part]
    spans: int
    steps: int
    modified: bool
    findings: list[tuple[Step, Finding]] = field(default_factory=list)
    originals: list[Part] | None = None

    @property
    def data(self) -> bytes:
        """Everything to forward as one request (parts concatenate into one valid request)."""
        return self.parts[0][0] if len(self.parts) == 1 else b"".join(p for p, _ in self.parts)


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
        self.engine = DetectorEngine(self.config.detectors, on_error=self._detector_failed,
                                     hold=self.config.holds_stopped_sessions)
        self.scanner = self._scanner()
        self.store = SessionStore(self.config.state.max_sessions, self.config.state.idle_timeout,
                                  on_evict=self._evicted, clock=clock)
        self.clock = clock
        self.finding_sinks: list[FindingSink] = []
        #: trace → conversation joins (``state.group_by: auto``; None otherwise)
        self.joins = TraceJoins() if self.config.state.group_by == "auto" else None
        #: every (trace id, span id) seen, when duplicates are recognised over a whole run instead of
        #: per session (``otelloop analyze``: offline, its memory grows with its input)
        self.seen_all: set[tuple[str, str]] | None = None

    # -- configuration -----------------------------------------------------------------------------

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded configuration from the next step on (listeners and exporter are not changed)."""
        self.config = config
        self.mapper = Mapper(config)
        self.engine.reconfigure(config.detectors)
        self.engine.hold = config.holds_stopped_sessions
        self.scanner = self._scanner()
        self.store.resize(config.state.max_sessions, config.state.idle_timeout)
        if config.state.group_by != "auto":
            self.joins = None
        elif self.joins is None:
            self.joins = TraceJoins()

    def _scanner(self) -> scan.Scanner:
        """A reader that keeps the keys and event attributes the mapping reads and the keys detectors may
        overwrite, and runs the mapper's program (spans carrying an overwritten key keep their attribute
        dict)."""
        overwritten = self.engine.overwritten_keys() | delivery.OUTPUT_KEYS
        return scan.Scanner(self.mapper.keys | overwritten, max_value_bytes=self.config.mapping.max_text_bytes,
                            program=self.mapper.program(overwritten),
                            events=[(event, attribute) for _, event, attribute in self.mapper.events])

    # -- phase 1: decode and map (no state changes) ------------------------------------------------

    def decode(self, data: bytes) -> Decoded:
        """Parse an ``ExportTraceServiceRequest`` and map its spans to steps.

        Raises:
            InvalidRequest: the bytes are not a valid request.
        """
        return run(self.decode_steps(data))

    def decode_steps(self, data: bytes, chunk_bytes: int | None = None,
                     span_limit: int | None = None) -> Generator[None, None, Decoded]:
        """:meth:`decode` in slices: a request over ``chunk_bytes`` is read in chunks of about that size.

        With ``span_limit``, a span that would not fit in a request of that size even alone (with its
        resource and scope) is left out and listed in :attr:`Decoded.too_large`; everything else is kept.

        Raises:
            InvalidRequest: the bytes are not a valid request (nothing is kept then).
        """
        scanner, map_span = self.scanner, self.mapper.map_span
        bound = min(x for x in (chunk_bytes, span_limit, len(data)) if x is not None)
        if len(data) <= bound:
            steps, spans, errors, kept, invalid = _read(scanner, map_span, data, 0)
            return self._decoded(Scan(kept, spans, errors, invalid, scanner), steps)
        too_large: list[tuple[Position, int]] = []

        def oversized(index: int, span: bytes, size: int) -> bytes | None:
            if span_limit is not None and size > span_limit:
                too_large.append((index, size))
                return None
            return span  # larger than a chunk, not than the upstream's limit: a chunk of its own

        chunks: list[Part] = []
        try:
            for part in split_request(data, bound, max_spans=CHUNK_SPANS, oversized=oversized):
                if part is None:
                    yield
                else:
                    chunks.append(part)
        except ValueError as e:
            raise InvalidRequest(f"cannot decode ExportTraceServiceRequest: {e}") from None
        runs: list[list[Item]] = []
        errors = []
        sessions: dict[str, None] = {}
        joined: list[tuple[str, str]] = []
        base = 0
        invalid = []
        kept_chunks: list[Part] = []
        for chunk, _ in chunks:
            chunk_steps, spans, chunk_errors, kept, chunk_invalid = yield from _read_steps(
                scanner, map_span, chunk, base)
            if spans or not chunk_invalid:  # a chunk whose every span was left out is not forwarded
                kept_chunks.append((kept, spans))
            invalid += chunk_invalid
            chunk_steps.sort(key=_start_time)
            if self.joins is not None:
                joined += self.joins.join(chunk_steps)
            runs.append(chunk_steps)
            errors += chunk_errors
            base += spans
            sessions.update(dict.fromkeys(item[1].session for item in chunk_steps))
            yield
        if len(runs) == 1:
            steps = runs[0]
        else:  # a stable merge of stable sorts: the order one sort of the whole request would give
            steps = []
            for item in heapq.merge(*runs, key=_start_time):
                steps.append(item)
                if len(steps) % 4096 == 0:
                    yield
        return Decoded(data, base, steps, errors, kept_chunks, too_large,
                       list(sessions) + [trace for trace, _ in joined], invalid, joined)

    def read(self, data: bytes) -> Scan:
        """Only the first part of :meth:`decode`, for a request no larger than :data:`CHUNK_BYTES` nor than
        the upstream's limit: the native reader's pass, which validates the request, counts its spans and
        leaves out those with invalid ids, at a few percent of the cost of mapping them
        (:meth:`map_scan`). No state changes.

        Raises:
            InvalidRequest: the bytes are not a valid request.
        """
        resources, infos, errors, kept, invalid = _scanned(self.scanner, data)
        return Scan(kept, len(infos), errors, invalid, self.scanner, resources, infos)

    def map_scan(self, scanned: Scan) -> Generator[None, None, Decoded]:
        """The rest of :meth:`decode` for a request :meth:`read` read: its spans mapped to steps, a
        checkpoint every :data:`MAP_CHECKPOINT_SPANS` spans. A request read before the configuration was
        reloaded is read again first, so its reading, mapping and detection follow one configuration."""
        if scanned.scanner is not self.scanner:
            scanned = dataclasses.replace(self.read(scanned.data), invalid=scanned.invalid)
        steps = yield from _map_spans(self.mapper.map_span, scanned.resources, scanned.infos, scanned.errors, 0,
                                      MAP_CHECKPOINT_SPANS)
        return self._decoded(scanned, steps)

    def _decoded(self, scanned: Scan, steps: list[Item]) -> Decoded:
        """A request read whole, with its steps in processing order (trace joins noted)."""
        steps.sort(key=_start_time)
        return Decoded(scanned.data, scanned.spans, steps, scanned.errors, invalid=scanned.invalid,
                       joined=self.joins.join(steps) if self.joins is not None else [])

    # -- phase 2: detect and enrich ----------------------------------------------------------------

    def process(self, decoded: Decoded) -> Processed:
        """Run the detectors over the request's steps and return the (possibly enriched) bytes."""
        return run(self.process_steps(decoded))

    def process_steps(self, decoded: Decoded) -> Generator[None, None, Processed]:
        """:meth:`process` in slices (a checkpoint every :data:`CHECKPOINT_STEPS` steps).

        The caller must keep other requests of the same sessions from being processed between two slices
        (``otelloop.receiver.ingest`` does), so each session sees its steps in order. The request goes
        through four stages: its steps are grouped by session; each session's group is checked for spans
        seen before, folded into the session's totals and run through the detectors
        (:meth:`_process_session`); the findings go to the finding sinks; and the spans to forward are
        assembled, enriched where anything was added (:func:`_assemble`).
        """
        for fld, n in Counter(decoded.mapping_errors).items():
            self.metrics.mapping_errors.labels(fld).inc(n)
        originals = decoded.chunks if decoded.chunks is not None else [(decoded.data, decoded.spans)]
        if not decoded.steps:
            return Processed(self._unmodified(decoded, originals), decoded.spans, 0, False)
        if decoded.joined:
            self._adopt(decoded.joined)
        work = _Work(decoded.spans, _Usage(self.metrics, self.clock), self.config.enrich.langfuse_attributes)
        groups = yield from _by_session(decoded.steps)
        for group in groups:
            yield from self._process_session(group, work)
        work.usage.flush()
        yield from self._tell_sinks(work.findings)
        parts = yield from _assemble(originals, work.extras, work.replacements)
        modified = any(new is not old for (new, _), (old, _) in zip(parts, originals, strict=True))
        if not modified:
            parts = self._unmodified(decoded, originals)
        return Processed(parts, decoded.spans, len(decoded.steps), modified, work.findings,
                         originals if modified else None)

    def _process_session(self, group: list[Item], work: _Work) -> Generator[None, None, None]:
        """One session's steps of the request: drop those seen before, fold the rest into the session's
        totals, then detect step by step (or, with every detector off, only stamp the verdict)."""
        session = self.store.touch(group[0][1].session)
        group = yield from self._fresh_sliced(session, group, work.replacements)
        if not group:
            return
        agent = yield from _account_sliced(session, group, work.usage.by_key)
        if not self.engine.detectors:
            # Only the verdict is added, which no step of this request can change.
            session.agent = agent or session.agent
            verdict = _verdict_attribute(session.verdict)
            for item in group:
                work.extras[item[0]] = verdict
            if work.checkpoint(len(group)):
                yield
            return
        before = session.verdict
        for item in group:
            self._detect(session, item, work)
            if work.checkpoint(1):
                yield
        if session.verdict != before:
            self.store.verdict_changed(session, before)

    def _detect(self, session: Session, item: Item, work: _Work) -> None:
        """Run the detectors on one step and record what its span gains: attributes and events to append,
        attributes to overwrite in place, and the step's findings."""
        pos, step, info = item
        session.agent = step.agent or session.agent  # detectors see the agent current at each step
        prior = session.verdict
        ctx = self.engine.observe(session, step)
        work.usage.add_findings(step, ctx)
        _remember_scores(session, ctx)
        change = (session.verdict, session.reason) if session.verdict != prior else None
        work.extras[pos] = self._encode(step, ctx, work.langfuse, change) or None
        replacements = work.replacements
        if ctx.overwrites and info.attributes is not None:
            carried = info.attributes
            present = {k: v for k, v in ctx.overwrites.items() if k in carried}
            if present:
                replacements.setdefault(pos, {}).update(present)
        if ctx.findings:
            if work.langfuse and pos in replacements:
                replacements[pos].update(_LANGFUSE_DROP)
            self.store.findings_seen(session, step.trace_id, ctx.findings)
            work.findings += [(step, finding) for finding in ctx.findings]

    def _fresh_sliced(self, session: Session, group: list[Item],
                      replacements: Replacements) -> Generator[None, None, list[Item]]:
        """:meth:`_fresh`, a slice of :data:`_ACCOUNT_SLICE` steps at a time for a large group."""
        if len(group) <= _ACCOUNT_SLICE:
            return self._fresh(session, group, replacements)
        fresh: list[Item] = []
        for start in range(0, len(group), _ACCOUNT_SLICE):
            fresh += self._fresh(session, group[start:start + _ACCOUNT_SLICE], replacements)
            yield
        return fresh

    def _tell_sinks(self, findings: list[tuple[Step, Finding]]) -> Generator[None, None, None]:
        """Hand each finding to the finding sinks (the log of detect-only mode, the event stream)."""
        if not self.finding_sinks:
            return
        for n, (step, finding) in enumerate(findings, 1):
            for sink in self.finding_sinks:
                sink(step, finding)
            if n % CHECKPOINT_STEPS == 0:
                yield

    @staticmethod
    def _unmodified(decoded: Decoded, originals: list[Part]) -> list[Part]:
        """What to forward when nothing was added: the original bytes, unless spans were left out."""
        return originals if decoded.too_large or decoded.invalid else [(decoded.data, decoded.spans)]

    def _fresh(self, session: Session, group: list[Item],
               replacements: Replacements) -> list[Item]:
        """The steps of ``group`` not seen before, in order (docs/detectors.md#duplicates); a span seen again
        is counted and left as it came. The spans of the others that an otelloop enriched before are
        marked for a rewrite in ``replacements``, so their enrichment is replaced, not written twice."""
        fresh = _drop_seen(session, group, self.seen_all)
        if len(fresh) != len(group):
            self.metrics.spans_duplicate.inc(len(group) - len(fresh))
        for pos, _, info in fresh:
            carried = info.attributes
            if carried is not None and not delivery.OUTPUT_KEYS.isdisjoint(carried):
                replacements.setdefault(pos, {})
        return fresh

    def _adopt(self, joined: list[tuple[str, str]]) -> None:
        """Rename the session of each trace that turned out to belong to a conversation with no session yet
        (its earlier steps carried no conversation id), so the conversation keeps them."""
        store = self.store
        for trace, conversation in joined:
            if store.get(trace) is not None:
                store.rename(trace, conversation)

    def session_for(self, session_id: str) -> Session | None:
        """The session with this id, or the conversation a trace with this id joined (so a client that
        knows only its trace id finds its conversation's session)."""
        session = self.store.get(session_id)
        if session is None and self.joins is not None:
            joined = self.joins.get(session_id)
            if joined is not None:
                session = self.store.get(joined)
        return session

    def _encode(self, step: Step, ctx: StepContext, langfuse: bool,
                change: tuple[str, str] | None = None) -> bytes:
        """The attributes and events this step's span gains; ``change``: (verdict, reason) when this step
        changed the session's verdict, written as an evaluation event too."""
        out = wire.encode_span_attributes(ctx.attributes) if ctx.attributes else b""
        if change is not None:
            out += _evaluation_event(step.end_ns or step.start_ns, *change)
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


def _start_time(item: Item) -> int:
    return item[1].start_ns


def run(steps: Generator[None, None, T]) -> T:
    """Run a sliced phase to its end, without pausing."""
    try:
        while True:
            next(steps)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


#: What reading a (chunk of a) request gives: its steps (positions offset by the chunk's base), the count of
#: spans kept, the mapping errors, the bytes to forward (without the spans of invalid ids) and the reason
#: each of those was left out.
Read = tuple[list[Item], int, list[str], bytes, list[str]]


def _scanned(scanner: scan.Scanner, data: bytes) -> tuple[list[scan.Resource], list[SpanInfo | None], list[str],
                                                          bytes, list[str]]:
    """Scan ``data``; spans with invalid ids are left out of it and of the span list (the positions of the
    others then index the bytes returned)."""
    try:
        resources, infos, errors, invalid = scanner.scan(data)
    except ValueError as e:
        raise InvalidRequest(f"cannot decode ExportTraceServiceRequest: {e}") from None
    if not invalid:
        return resources, infos, errors, data, []
    left_out = {i for i, _ in invalid}
    infos = [info for i, info in enumerate(infos) if i not in left_out]
    return resources, infos, errors, scan.without_spans(data, left_out), [reason for _, reason in invalid]


def _read(scanner: scan.Scanner, map_span: Callable[..., Step | None], data: bytes, base: Position) -> Read:
    """Read one (chunk of a) request (see :data:`Read`)."""
    resources, infos, errors, kept, invalid = _scanned(scanner, data)
    steps = run(_map_spans(map_span, resources, infos, errors, base, max(len(infos), 1)))
    return steps, len(infos), errors, kept, invalid


def _read_steps(scanner: scan.Scanner, map_span: Callable[..., Step | None], data: bytes, base: Position
                ) -> Generator[None, None, Read]:
    """:func:`_read` with a checkpoint every :data:`CHECKPOINT_STEPS` spans mapped."""
    resources, infos, errors, kept, invalid = _scanned(scanner, data)
    yield
    steps = yield from _map_spans(map_span, resources, infos, errors, base, CHECKPOINT_STEPS)
    return steps, len(infos), errors, kept, invalid


def _map_spans(map_span: Callable[..., Step | None], resources: list[scan.Resource],
               infos: list[SpanInfo | None], errors: list[str], base: Position, every: int
               ) -> Generator[None, None, list[Item]]:
    """The steps of the spans the reader handed over, as (``base`` + position, step, span info), with a
    checkpoint every ``every`` spans."""
    steps: list[Item] = []
    for start in range(0, len(infos), every):
        for i in range(start, min(start + every, len(infos))):
            info = infos[i]
            if info is not None:
                step = map_span(info, resources[info.resource], errors)
                if step is not None:
                    steps.append((base + i, step, info))
        yield
    return steps


class _Work:
    """What processing one request gathers as it goes, session by session.

    Attributes:
        extras: per span position, the encoded attributes and events it gains (None: nothing).
        usage: step metrics of the request, flushed once at its end.
        langfuse: whether spans with findings also get the Langfuse level attributes.
        replacements: attributes to overwrite in place, per span position.
        findings: (step, finding) in processing order.
        since_checkpoint: steps processed since the last checkpoint.
    """

    __slots__ = ("extras", "usage", "langfuse", "replacements", "findings", "since_checkpoint")

    def __init__(self, spans: int, usage: _Usage, langfuse: bool) -> None:
        self.extras: list[bytes | None] = [None] * spans
        self.usage = usage
        self.langfuse = langfuse
        self.replacements: Replacements = {}
        self.findings: list[tuple[Step, Finding]] = []
        self.since_checkpoint = 0

    def checkpoint(self, steps: int) -> bool:
        """Count ``steps`` processed; True when a checkpoint is due (every :data:`CHECKPOINT_STEPS`)."""
        self.since_checkpoint += steps
        if self.since_checkpoint < CHECKPOINT_STEPS:
            return False
        self.since_checkpoint = 0
        return True


def _by_session(steps: list[Item]) -> Generator[None, None, list[list[Item]]]:
    """The request's steps grouped by session, each group in processing order, groups in order of first
    appearance."""
    groups: dict[str, list[Item]] = {}
    for n, item in enumerate(steps, 1):
        group = groups.get(item[1].session)
        if group is None:
            groups[item[1].session] = [item]
        else:
            group.append(item)
        if n % 4096 == 0:
            yield
    return list(groups.values())


def _account_sliced(session: Session, group: list[Item],
                    usage: dict[tuple[str, str, str], list[float]]) -> Generator[None, None, str]:
    """:func:`_account`, a slice of :data:`_ACCOUNT_SLICE` steps at a time for a large group (the same
    totals); returns the last agent named."""
    if len(group) <= _ACCOUNT_SLICE:
        return _account(session, group, usage)
    agent = ""
    for start in range(0, len(group), _ACCOUNT_SLICE):
        agent = _account(session, group[start:start + _ACCOUNT_SLICE], usage) or agent
        yield
    return agent


def _assemble(originals: list[Part], extras: list[bytes | None],
              replacements: Replacements) -> Generator[None, None, list[Part]]:
    """The parts to forward: each original part as it came when none of its spans gained anything (the
    same object, so the caller can tell), else with the additions spliced in, rewritten where attributes
    are replaced."""
    parts: list[Part] = []
    base = 0
    by_chunk = _by_chunk(replacements, originals)
    for k, (chunk, spans) in enumerate(originals):
        chunk_extras = extras[base:base + spans] if len(originals) > 1 else extras
        chunk_repl = by_chunk.get(k)
        if chunk_repl:
            parts.append((_replace_attributes(chunk, chunk_repl, chunk_extras), spans))
        elif any(chunk_extras):
            parts.append((scan.splice(chunk, chunk_extras), spans))
        else:
            parts.append((chunk, spans))
        base += spans
        if len(originals) > 1:
            yield
    return parts


def _account(session: Session, group: list[Item],
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
    session.environment = last.environment or session.environment
    session.cost_usd += cost
    session.input_tokens += tokens_in
    session.output_tokens += tokens_out
    session.last_end_ns = last_end
    return agent


def _by_chunk(replacements: Replacements,
              chunks: list[Part]) -> dict[int, dict[Position, dict[str, AttrValue | None]]]:
    """Replacements per chunk, keyed by the span's position inside its chunk."""
    if not replacements:
        return {}
    if len(chunks) == 1:
        return {0: replacements}
    starts = list(itertools.accumulate((n for _, n in chunks), initial=0))
    out: dict[int, dict[Position, dict[str, AttrValue | None]]] = {}
    for pos, repl in replacements.items():
        k = bisect.bisect_right(starts, pos) - 1
        out.setdefault(k, {})[pos - starts[k]] = repl
    return out


def _replace_attributes(data: bytes, replacements: Replacements,
                        extras: list[bytes | None] | None) -> bytes:
    """Rewrite the spans that carry an attribute otelloop overwrites or what an otelloop wrote before (rare),
    then splice in the extras."""
    spans = scan.span_bytes(data)
    replaced = {pos: wire.replace_span_attributes(spans[pos], repl, delivery.is_output_key, delivery.is_output_event)
                for pos, repl in replacements.items()}
    return scan.rewrite(data, replaced, extras)


#: With ``enrich.langfuse_attributes``, a span rewritten because an otelloop enriched it before loses the
#: Langfuse level and message it carries when this pass writes them anew.
_LANGFUSE_DROP: dict[str, AttrValue | None] = dict.fromkeys(delivery.LANGFUSE_KEYS)


def _drop_seen(session: Session, group: list[Item],
               seen_all: set[tuple[str, str]] | None) -> list[Item]:
    """The steps of ``group`` whose span the session has not seen (all of them, usually)."""
    if seen_all is not None:
        fresh = []
        for item in group:
            key = (item[1].trace_id, item[1].span_id)
            if not key[1] or key not in seen_all:
                seen_all.add(key)
                fresh.append(item)
        return fresh
    seen = session.seen
    if seen is None:
        seen = session.seen = delivery.SeenSpans()
    return delivery.unseen(seen, group)


def _evaluation_event(time_unix_nano: int, verdict: str, reason: str) -> bytes:
    """The verdict as the GenAI semantic conventions' evaluation result (docs/detectors.md#verdicts):
    the score is the verdict's rank (0 continue, 1 nudge, 2 stop), the label the verdict, the explanation
    its reason (redacted when the session took it)."""
    attrs: dict[str, AttrValue] = {"gen_ai.evaluation.name": delivery.EVALUATION_NAME,
                                   "gen_ai.evaluation.score.value": float(VERDICT_RANK[verdict]),
                                   "gen_ai.evaluation.score.label": verdict}
    if reason:
        attrs["gen_ai.evaluation.explanation"] = reason
    return wire.encode_span_event(delivery.EVALUATION_EVENT, time_unix_nano, attrs)


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

    __slots__ = ("metrics", "clock", "by_key", "findings", "entropy", "unjudged")

    def __init__(self, metrics: Metrics, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self.clock = clock
        #: (kind, service, model) -> [steps, input tokens, output tokens, cost], filled by :func:`_account`
        self.by_key: dict[tuple[str, str, str], list[float]] = {}
        self.findings: Counter[tuple[str, str, str, str]] = Counter()
        #: entropy score -> steps of the request that got it (scores take few distinct values)
        self.entropy: dict[float, int] = {}
        #: service -> tool steps of the request that carried nothing to judge them by
        self.unjudged: Counter[str] = Counter()

    def add_findings(self, step: Step, ctx: StepContext) -> None:
        """Tally what detecting ``step`` gave: its findings, its entropy score, and whether it was unjudged."""
        if step.novel is None and step.kind == "tool":
            self.unjudged[step.service] += 1
        if ctx.findings:
            for f in ctx.findings:
                self.findings[(f.detector, f.finding, f.severity, step.service)] += 1
        score = ctx.attributes.get("otelloop.entropy_score")
        if score is not None:
            entropy = self.entropy
            entropy[score] = entropy.get(score, 0) + 1  # type: ignore[index,arg-type]

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
        for service, n in self.unjudged.items():
            m.unjudged_counter(svc(service, now), now).inc(n)
        if self.entropy:
            m.entropy_score.observe_counts(self.entropy)


def map_request(data: bytes, config: Config | None = None) -> list[Step]:
    """The steps otelloop sees in one serialised request, in processing order (no detection)."""
    pipeline = Pipeline(config)
    return [step for _, step, _ in pipeline.decode(data).steps]
