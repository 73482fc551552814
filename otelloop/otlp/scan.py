"""Reading OTLP trace requests for the mapper: what each span says, as plain Python values.

A :class:`Scanner` is built once with the attribute keys the mapping (and any detector that overwrites
attributes) can read, the span-event attributes it can read (``events``: each an event name and an
attribute key, handed over under :func:`event_key`), and optionally the mapper's
:class:`~otelloop.mapping.program.Program`.
``scan(data)`` validates a whole ``ExportTraceServiceRequest`` with protobuf's rules and returns:

* ``resources``: one ``(attributes, service_name, environment)`` per ``ResourceSpans``, where
  ``attributes`` holds the wanted keys the resource carries (``None`` when it carries none) and
  ``environment`` is its ``deployment.environment.name``, or the older ``deployment.environment`` when
  it names none (``""`` when neither does): read like ``service.name``, whatever keys are wanted;
* ``spans``: one entry per span, in request order: a :class:`SpanInfo`, or ``None`` for a span that
  cannot be an agent step (it carries no wanted key and neither does its resource; with a program,
  its own attributes declare no step kind);
* ``errors``: the fields of typed reads the program ran that met a value of the wrong type;
* ``invalid``: ``(index, reason)`` of each span whose ids OTLP calls invalid (its entry in ``spans`` is
  None): see :func:`id_problem`.

With a program, a span's ``kind`` and ``reads`` (the results of that kind's plan) are filled in and its
attribute dict is left out unless the program keeps it for that kind; a span carrying one of the
program's slow keys, and every span without a program, has its attribute dict and no kind.

A wanted event attribute is taken from the first event of its name that carries it (the last
occurrence within that event) and goes into the span's attribute dict under its :func:`event_key`, as
if it were one more attribute: the program's reads list those keys after the attribute keys, so a
span's own attribute always wins. Events of other names are skipped without reading their attributes;
a span without events costs nothing more.

Attribute values become ``str``, ``bool``, ``int``, ``float``, ``bytes``, ``list`` (array) or ``dict``
(key-value list), and ``None`` for an empty value, so the mapper can tell a wrong type from a missing
key. Repeated keys keep the last value, as a protobuf map does. A value whose encoding is longer than
``max_value_bytes`` is not materialised: it becomes an :class:`Oversized` holding a view of its bytes
in the request, so an agent that sends megabytes of arguments costs a hash, not copies.

The native reader (``otelloop._scan``, a C extension built at install time) does this in one pass over
the bytes without creating objects for anything else; where it could not be built the pure-Python
reader below returns identical results through the generated protobuf classes, several times slower.
``splice`` and ``span_bytes`` address spans by their index in ``spans``. A scanner is not re-entrant:
use one per thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple, Protocol, cast

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otelloop import native
from otelloop.otlp import wire

try:
    from otelloop import _scan
except ImportError:  # no C compiler at install time
    _scan = None  # type: ignore[assignment]
#: The native reader's module, or None where it could not be built.
_native = _scan

#: The native reader is in use (``OTELLOOP_PURE_PYTHON=1`` turns it off, for comparison).
NATIVE = _native is not None and not native.pure_python()



def event_key(event: str, attribute: str) -> str:
    """The key under which the reader hands over ``attribute`` of a span's ``event`` event."""
    return f"event:{event}:{attribute}"


class Oversized(NamedTuple):
    """An attribute value too long to materialise, left as its bytes on the wire.

    Attributes:
        kind: ``string`` (``raw`` is its UTF-8 text), ``bytes``, ``array`` (``raw`` is the encoded
            ``ArrayValue``) or ``kvlist`` (the encoded ``KeyValueList``).
        raw: a view into the request's bytes.
    """

    kind: str
    raw: memoryview


class SpanInfo(NamedTuple):
    """What the reader hands over of one span. The native reader's record, ``otelloop._scan.SpanInfo``,
    has the same fields in the same order (both are tuples and compare equal field by field)."""

    #: index of the span's ``ResourceSpans`` in the request (into ``resources``)
    resource: int
    name: str
    #: trace id, hex
    trace_id: str
    #: span id, hex
    span_id: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    #: the wanted attributes (and event attributes, under :func:`event_key`), or None
    attributes: dict[str, Any] | None
    #: (type, message) of the first ``exception`` event, or None
    exception: tuple[str, str] | None
    #: the step kind the program decided, or None
    kind: str | None
    #: the results of the kind's plan, or None
    reads: tuple[Any, ...] | None


Resource = tuple["dict[str, Any] | None", str, str]
Scanned = tuple[list[Resource], list["SpanInfo | None"], list[str], list[tuple[int, str]]]

#: Sizes of valid ids, in bytes (opentelemetry-proto ``trace.proto``: "The ID is a 16-byte array. An ID
#: with all zeroes OR of length other than 16 bytes is considered invalid"; 8 bytes for a span id).
TRACE_ID_BYTES = 16
SPAN_ID_BYTES = 8


def id_problem(trace_id: bytes, span_id: bytes, parent_span_id: bytes,
               links: Iterable[tuple[bytes, bytes]] = ()) -> str | None:
    """Why a span's ids are invalid, or None when they are valid.

    A span's own trace id must be 16 bytes and its span id 8, neither all zero (OTLP requires both and
    calls an all-zero id invalid); its parent span id is empty (a root span) or 8 bytes, and so is each
    link's span id, while each link's trace id is empty or 16 bytes (an empty id in those places reads as
    absent, as the OpenTelemetry Collector reads it; any other length makes the Collector refuse the
    whole request). Checked in this order; the first problem is the reason. The native reader applies
    the same rules and gives the same reasons.
    """
    if len(trace_id) != TRACE_ID_BYTES:
        return f"trace_id of {len(trace_id)} bytes"
    if not any(trace_id):
        return "trace_id all zero"
    if len(span_id) != SPAN_ID_BYTES:
        return f"span_id of {len(span_id)} bytes"
    if not any(span_id):
        return "span_id all zero"
    if len(parent_span_id) not in (0, SPAN_ID_BYTES):
        return f"parent_span_id of {len(parent_span_id)} bytes"
    for link_trace, link_span in links:
        if len(link_trace) not in (0, TRACE_ID_BYTES):
            return f"link trace_id of {len(link_trace)} bytes"
        if len(link_span) not in (0, SPAN_ID_BYTES):
            return f"link span_id of {len(link_span)} bytes"
    return None


class Program(Protocol):
    """What the reader needs of the mapper's program (see ``otelloop.mapping.program``)."""

    def run(self, attrs: dict[str, Any] | None, res: dict[str, Any] | None,
            errors: list[str]) -> tuple[dict[str, Any] | None, str | None, tuple[Any, ...] | None] | None: ...


class Scanner:
    """Validates requests and extracts the attributes named in ``keys``.

    Args:
        keys: attribute keys to extract from spans and resources.
        max_value_bytes: values encoded longer than this become :class:`Oversized`.
        native: use the C reader (default: when it is available and not turned off).
        program: the mapper's program (kinds and typed reads done while reading), or None.
        events: span-event attributes to extract, as (event name, attribute key) pairs.
    """

    def __init__(self, keys: Iterable[str], max_value_bytes: int = 65536, native: bool | None = None,
                 program: Program | None = None, events: Iterable[tuple[str, str]] = ()) -> None:
        self.events = tuple(dict.fromkeys((e, a) for e, a in events))
        # An event's key is never read as an attribute of that name: the two would share a dict entry.
        self.keys = frozenset(keys) - {event_key(e, a) for e, a in self.events}
        self.max_value_bytes = max_value_bytes
        self.program = program
        self.native = NATIVE if native is None else native
        if self.native and _native is None:
            raise RuntimeError("the native reader otelloop._scan is not built")
        self._wanted_events: dict[str, dict[str, str]] = {}
        for e, a in self.events:
            self._wanted_events.setdefault(e, {})[a] = event_key(e, a)
        # The native reader takes the program as the tuple it is (see otelloop.mapping.program.Program).
        self._impl = (_native.Scanner(sorted(self.keys), max_value_bytes, Oversized, cast(Any, program),
                                      [(event_key(e, a), e, a) for e, a in self.events])
                      if self.native else None)

    def scan(self, data: bytes) -> Scanned:
        """Read a serialised request.

        Raises:
            ValueError: the bytes are not a valid ``ExportTraceServiceRequest`` (the message says why).
        """
        if self._impl is not None:
            return cast(Scanned, self._impl.scan(data))  # its records have SpanInfo's fields
        return _scan_python(data, self.keys, self.max_value_bytes, self.program, self._wanted_events)


def without_spans(data: bytes, positions: Iterable[int]) -> bytes:
    """``data`` without the spans at ``positions`` (span indexes in reading order). Resources and scopes
    stay, even when left without spans; every other byte is kept. The slow path (one protobuf parse
    and serialisation), for the rare request that holds spans to refuse."""
    drop = set(positions)
    raw = wire.RawRequest.FromString(data)
    i = 0
    for rs in raw.resource_spans:
        for ss in rs.scope_spans:
            kept = [span for k, span in enumerate(ss.spans, i) if k not in drop]
            i += len(ss.spans)
            if len(kept) != len(ss.spans):
                del ss.spans[:]
                ss.spans.extend(kept)
    out: bytes = raw.SerializeToString()
    return out


def splice(data: bytes, extras: list[bytes | None]) -> bytes:
    """``data`` with ``extras[i]`` appended to the i-th span (``len(extras)`` equals the span count).

    Every other byte is copied unchanged; the length prefixes of the spans and their enclosing
    ``ScopeSpans``/``ResourceSpans`` are rewritten to match.
    """
    if NATIVE:
        return _native.splice(data, extras)
    return rewrite(data, {}, extras)


def rewrite(data: bytes, replaced: dict[int, bytes], extras: list[bytes | None] | None = None) -> bytes:
    """``data`` with the i-th span's bytes replaced by ``replaced[i]``, then ``extras[i]`` appended.

    The slow path (one protobuf parse and serialisation), for the rare span whose own attributes change.
    """
    raw = wire.RawRequest.FromString(data)
    groups = [ss.spans for rs in raw.resource_spans for ss in rs.scope_spans]
    total = sum(len(spans) for spans in groups)
    if extras is not None and len(extras) != total:
        raise ValueError(f"request has {total} spans, {len(extras)} extras given")
    i = 0
    for spans in groups:
        for k in range(len(spans)):
            new = replaced.get(i)
            extra = extras[i] if extras is not None else None
            if new is not None or extra:
                spans[k] = (new if new is not None else spans[k]) + (extra or b"")
            i += 1
    out: bytes = raw.SerializeToString()
    return out


def span_bytes(data: bytes) -> list[bytes]:
    """Each span's serialised bytes, in request order."""
    if NATIVE:
        return _native.span_bytes(data)
    raw = wire.RawRequest.FromString(data)
    return [span for rs in raw.resource_spans for ss in rs.scope_spans for span in ss.spans]


# ---------------------------------------------------------------------------------------------------
# The pure-Python reader: same results through the generated protobuf classes


def _scan_python(data: bytes, keys: frozenset[str], limit: int, program: Program | None,
                 events: dict[str, dict[str, str]]) -> Scanned:
    try:
        req = ExportTraceServiceRequest.FromString(data)
    except (DecodeError, RuntimeError) as e:
        raise ValueError(str(e) or "malformed request") from None
    resources: list[Resource] = []
    spans: list[SpanInfo | None] = []
    errors: list[str] = []
    invalid: list[tuple[int, str]] = []
    for r, rs in enumerate(req.resource_spans):
        ra = rs.resource.attributes
        res_attrs = _wanted(ra, keys, limit)
        service = _string_of(ra, "service.name")
        environment = _string_of(ra, "deployment.environment.name") or _string_of(ra, "deployment.environment")
        resources.append((res_attrs, service, environment))
        for ss in rs.scope_spans:
            for span in ss.spans:
                problem = id_problem(span.trace_id, span.span_id, span.parent_span_id,
                                     [(link.trace_id, link.span_id) for link in span.links])
                if problem is not None:
                    invalid.append((len(spans), problem))
                    spans.append(None)
                    continue
                attrs = _wanted(span.attributes, keys, limit)
                if events and span.events:
                    attrs = _event_values(span.events, events, limit, attrs)
                kind = reads = None
                if program is not None:
                    mapped = program.run(attrs, res_attrs, errors)
                    if mapped is None:
                        spans.append(None)
                        continue
                    attrs, kind, reads = mapped
                elif attrs is None and res_attrs is None:
                    spans.append(None)
                    continue
                spans.append(SpanInfo(r, span.name, span.trace_id.hex(), span.span_id.hex(),
                                      span.start_time_unix_nano, span.end_time_unix_nano, span.status.code,
                                      span.status.message, attrs, _exception(span), kind, reads))
    return resources, spans, errors, invalid


def _wanted(attributes: Any, keys: frozenset[str], limit: int) -> dict[str, Any] | None:
    out = {kv.key: kv.value for kv in attributes if kv.key in keys}  # the last of repeated keys wins
    return {k: _attribute(v, limit) for k, v in out.items()} or None


def _event_values(span_events: Any, wanted: dict[str, dict[str, str]], limit: int,
                  attrs: dict[str, Any] | None) -> dict[str, Any] | None:
    """``attrs`` with the wanted attributes of the span's events added under their event keys: each
    from the first event of its name that carries it."""
    for ev in span_events:
        keys = wanted.get(ev.name)
        if keys is None:
            continue
        found = {kv.key: kv.value for kv in ev.attributes if kv.key in keys}  # the last of repeated keys wins
        for key, value in found.items():
            if attrs is None:
                attrs = {}
            if keys[key] not in attrs:
                attrs[keys[key]] = _attribute(value, limit)
    return attrs


def _string_of(attributes: Any, key: str) -> str:
    value = ""
    for kv in attributes:
        if kv.key == key:
            value = kv.value.string_value
    return value


def _exception(span: Any) -> tuple[str, str] | None:
    for ev in span.events:
        if ev.name == "exception":
            return _string_of(ev.attributes, "exception.type"), _string_of(ev.attributes, "exception.message")
    return None


_OVERSIZED_KINDS = {"string_value": "string", "bytes_value": "bytes", "array_value": "array",
                    "kvlist_value": "kvlist"}


def _attribute(v: Any, limit: int) -> Any:
    if v.ByteSize() > limit:
        which = v.WhichOneof("value")
        kind = _OVERSIZED_KINDS.get(which or "")
        if kind is not None:
            member = getattr(v, which)
            raw = member.encode() if kind == "string" else member if kind == "bytes" else member.SerializeToString()
            return Oversized(kind, memoryview(raw))
    return _value(v)


def _value(v: Any) -> Any:
    """An ``AnyValue`` as a plain Python value (``None`` when empty)."""
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if which is None or which == "string_value_strindex":  # an index into a table traces do not carry
        return None
    return getattr(v, which)
