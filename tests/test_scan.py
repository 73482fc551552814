"""The request reader: the native reader and the pure-Python one agree with each other and with protobuf.

The native reader (``otelloop._scan``) must accept exactly the requests protobuf accepts and return the
same values as the pure-Python reader, which reads through the protobuf runtime; splicing must leave
every byte it does not change as it was.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status
from spans import any_value, parse, request, span, tool_span

from otelloop.config import build_config
from otelloop.mapping import reads
from otelloop.mapping.mapper import EVENT_SOURCES, SPAN_KEYS, Mapper
from otelloop.otlp import scan, wire
from otelloop.pipeline import Pipeline

FIXTURES = Path(__file__).parent / "fixtures"
KEYS = SPAN_KEYS | {"k", "a", "b", "n", "cognition.entropy_score"}
#: The event attributes the mapping reads, and one more of an event it reads.
EVENTS = [(event, attribute) for _, event, attribute in EVENT_SOURCES] + [("gen_ai.choice", "k")]
EVENT_NAMES = sorted({e for e, _ in EVENTS})
EVENT_ATTRS = sorted({a for _, a in EVENTS})


def test_the_native_reader_is_built() -> None:
    """CI builds the C extension at install; without it otelloop runs, but several times slower."""
    assert scan._native is not None, "otelloop._scan is missing: reinstall with a C compiler (pip install -e .)"
    assert scan.NATIVE


#: The mapper's program on the default configuration, as ``otelloop serve`` runs it.
PROGRAM = Mapper(build_config({"state": {"group_by": "trace"}}, env={})).program(frozenset({"cognition.entropy_score"}))


def readers(limit: int = 65536, program: Any = None) -> tuple[scan.Scanner, scan.Scanner]:
    return (scan.Scanner(KEYS, limit, native=True, program=program, events=EVENTS),
            scan.Scanner(KEYS, limit, native=False, program=program, events=EVENTS))


def outcome(reader: scan.Scanner, data: bytes) -> Any:
    try:
        return reader.scan(data)
    except ValueError:
        return "refused"


def _nan_free(x: Any) -> Any:
    """``x`` with NaNs replaced by a marker, so that equal readings compare equal."""
    if isinstance(x, float) and x != x:
        return "<nan>"
    if isinstance(x, (list, tuple)) and not isinstance(x, scan.Oversized):
        return type(x)(_nan_free(v) for v in x) if isinstance(x, list) else tuple(_nan_free(v) for v in x)
    if isinstance(x, dict):
        return {k: _nan_free(v) for k, v in x.items()}
    return x


def assert_same(data: bytes, limit: int = 65536) -> Any:
    """Both readers agree, with and without the mapper's program; returns the result without it."""
    results = []
    for program in (None, PROGRAM):
        native, python = readers(limit, program)
        got, want = outcome(native, data), outcome(python, data)
        assert _nan_free(got) == _nan_free(want)
        results.append(got)
    assert (results[0] == "refused") == (results[1] == "refused")
    return results[0]


def _field(number: int, payload: bytes, wire_type: int = 2) -> bytes:
    head = wire.encode_varint(number << 3 | wire_type)
    return head + (wire.encode_varint(len(payload)) + payload if wire_type == 2 else payload)


def _request_of_span(span_bytes: bytes, resource: bytes = b"") -> bytes:
    rs = (_field(1, resource) if resource else b"") + _field(2, _field(2, span_bytes))
    return _field(1, rs)


def _kv(key: bytes, *values: bytes) -> bytes:
    return _field(1, key) + b"".join(_field(2, v) for v in values)


# -- recorded and synthetic requests ---------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.pb")), ids=lambda p: p.name)
def test_recorded_requests_read_the_same(path: Path) -> None:
    _resources, spans, _, _ = assert_same(path.read_bytes())
    assert any(s is not None for s in spans)


def test_values_of_every_type() -> None:
    attrs = {"k": "v", "n": 3, "gen_ai.usage.cost": 1.5, "a": True, "b": b"\x00\xff",
             "gen_ai.tool.call.arguments": ["x", 1, 2.5, False, b"\x01"],
             "gen_ai.tool.call.result": AnyValue(kvlist_value=KeyValueList(values=[
                 KeyValue(key="inner", value=any_value([1, 2])), KeyValue(key="empty", value=AnyValue())])),
             "gen_ai.prompt": AnyValue(), "ignored.key": "not read"}
    events = [Span.Event(name="other"), Span.Event(name="exception", attributes=[
        KeyValue(key="exception.type", value=any_value("ValueError")),
        KeyValue(key="exception.message", value=any_value(7))])]
    data = request(span("s", attrs, error="boom", events=events), resource={"session.id": "r1"})
    resources, spans, _, _ = assert_same(data)
    assert resources == [({"session.id": "r1"}, "agent-svc", "")]
    (r, name, trace, span_id, start, end, code, message, got, exc, kind, reads), = spans
    assert kind is None and reads is None  # no program: the mapper decides
    assert (r, name, code, message, exc) == (0, "s", 2, "boom", ("ValueError", ""))
    assert len(trace) == 32 and len(span_id) == 16 and end > start
    assert got == {"k": "v", "n": 3, "gen_ai.usage.cost": 1.5, "a": True, "b": b"\x00\xff",
                   "gen_ai.tool.call.arguments": ["x", 1, 2.5, False, b"\x01"],
                   "gen_ai.tool.call.result": {"inner": [1, 2], "empty": None}, "gen_ai.prompt": None}


def test_both_readers_hand_over_the_same_named_records() -> None:
    """The native record type has the pure-Python one's fields in its order; each reads the same by name."""
    assert scan._native.SpanInfo.__match_args__ == scan.SpanInfo._fields
    data = request(span("s", {"gen_ai.operation.name": "chat"}, error="boom"), tool_span())
    for program in (None, PROGRAM):
        native, python = readers(program=program)
        got, want = native.scan(data)[1], python.scan(data)[1]
        assert [type(i) for i in got] == [scan._native.SpanInfo] * 2 and [type(i) for i in want] == [scan.SpanInfo] * 2
        for a, b in zip(got, want, strict=True):
            assert a == b and {f: getattr(a, f) for f in b._fields} == b._asdict()


def test_spans_that_cannot_be_steps_are_counted_not_read() -> None:
    data = request(span("plain", {"http.method": "GET"}), span("step", {"gen_ai.operation.name": "chat"}))
    resources, spans, _, _ = assert_same(data)
    assert resources == [(None, "agent-svc", "")] and spans[0] is None and spans[1].name == "step"


def test_several_resources_and_scopes_keep_their_order() -> None:
    def rs(service: str, *names: str) -> ResourceSpans:
        out = ResourceSpans(scope_spans=[ScopeSpans(spans=[span(n, {"k": n}) for n in names[:1]]),
                                         ScopeSpans(spans=[span(n, {"k": n}) for n in names[1:]])])
        out.resource.attributes.add(key="service.name", value=any_value(service))
        return out
    data = ExportTraceServiceRequest(resource_spans=[rs("one", "a", "b", "c"), rs("two", "d")]).SerializeToString()
    resources, spans, _, _ = assert_same(data)
    assert [s for _, s, _ in resources] == ["one", "two"]
    assert [(s[0], s[1]) for s in spans] == [(0, "a"), (0, "b"), (0, "c"), (1, "d")]


ENV, OLD_ENV = "deployment.environment.name", "deployment.environment"


@pytest.mark.parametrize(("attrs", "want"), [
    ([], ""),
    ([(ENV, "prod")], "prod"),
    ([(OLD_ENV, "staging")], "staging"),  # the name before semantic conventions 1.27
    ([(OLD_ENV, "old"), (ENV, "new")], "new"),  # the current name wins, wherever it stands
    ([(ENV, "new"), (OLD_ENV, "old")], "new"),
    ([(ENV, ""), (OLD_ENV, "old")], "old"),  # an empty name names no environment
    ([(ENV, 7), (OLD_ENV, "old")], "old"),  # nor does a value that is not a string
    ([(ENV, 7)], ""),
    ([(ENV, "a"), (ENV, "b")], "b"),  # the last of repeated keys, as protobuf reads them
    ([(OLD_ENV, True)], ""),
])
def test_the_environment_is_read_from_the_resource(attrs: list[tuple[str, Any]], want: str) -> None:
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=[span("s", {"gen_ai.operation.name": "chat"})])])
    rs.resource.attributes.extend([KeyValue(key="service.name", value=any_value("svc"))]
                                  + [KeyValue(key=k, value=any_value(v)) for k, v in attrs])
    resources, spans, _, _ = assert_same(ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString())
    assert resources == [(None, "svc", want)] and spans[0] is not None


def test_the_environment_of_a_resource_sent_in_two_parts_is_merged_as_protobuf_merges_it() -> None:
    """A resource field that occurs twice is one resource: the newer name wins even from the first part."""
    span_bytes = span("s", {"gen_ai.operation.name": "chat"}).SerializeToString()
    part = [KeyValue(key=ENV, value=any_value("prod")).SerializeToString(),
            KeyValue(key=OLD_ENV, value=any_value("legacy")).SerializeToString()]
    rs = _field(1, _field(1, part[0])) + _field(1, _field(1, part[1])) + _field(2, _field(2, span_bytes))
    resources, _, _, _ = assert_same(_field(1, rs))
    assert resources == [(None, "", "prod")]


def test_long_values_are_left_in_the_request() -> None:
    big = "é" * 40
    data = request(tool_span(args=big, result=["x" * 70]), span("b", {"b": b"\x01" * 80, "k": "short"}))
    _, spans, _, _ = assert_same(data, limit=64)
    args = spans[0].attributes["gen_ai.tool.call.arguments"]
    assert isinstance(args, scan.Oversized) and args.kind == "string" and bytes(args.raw) == big.encode()
    assert spans[0].attributes["gen_ai.tool.call.result"].kind == "array"
    assert spans[1].attributes == {"b": scan.Oversized("bytes", memoryview(b"\x01" * 80)), "k": "short"}


def _event(name: str, **attrs: Any) -> Span.Event:
    return Span.Event(name=name, attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs.items()])


def test_wanted_event_attributes_are_read_under_their_own_keys() -> None:
    events = [_event("gen_ai.user.message", content="not wanted"),
              _event("gen_ai.tool.message", role="tool", content='{"path": "a.txt"}', id="tooluse_1"),
              _event("gen_ai.client.inference.operation.details", **{"gen_ai.input.messages": "[1]"}),
              _event("gen_ai.client.inference.operation.details", **{"gen_ai.output.messages": "[2]",
                                                                   "gen_ai.input.messages": "[3]"}),
              _event("gen_ai.choice", message=["t", 1], id="tooluse_1"),
              _event("gen_ai.choice", message="a second choice"),
              _event("exception", **{"exception.type": "E", "exception.message": "m"})]
    data = request(span("execute_tool read_file", {"gen_ai.tool.name": "read_file"}, events=events))
    _, spans, _, _ = assert_same(data)
    key = scan.event_key
    assert spans[0].attributes == {"gen_ai.tool.name": "read_file",
                           key("gen_ai.tool.message", "content"): '{"path": "a.txt"}',
                           key("gen_ai.client.inference.operation.details", "gen_ai.input.messages"): "[1]",
                           key("gen_ai.client.inference.operation.details", "gen_ai.output.messages"): "[2]",
                           key("gen_ai.choice", "message"): ["t", 1]}
    assert spans[0].exception == ("E", "m")


def test_event_values_are_oversized_like_attributes() -> None:
    data = request(span("execute_tool t", {"gen_ai.tool.name": "t"},
                        events=[_event("gen_ai.choice", message="x" * 100)]))
    _, spans, _, _ = assert_same(data, limit=64)
    value = spans[0].attributes[scan.event_key("gen_ai.choice", "message")]
    assert isinstance(value, scan.Oversized) and bytes(value.raw) == b"x" * 100


def test_events_alone_do_not_make_a_step() -> None:
    data = request(span("plain", {"http.method": "GET"}, events=[_event("gen_ai.choice", message="m")]))
    assert readers(program=PROGRAM)[0].scan(data)[1] == [None]
    _, spans, _, _ = assert_same(data)
    assert spans[0].attributes == {scan.event_key("gen_ai.choice", "message"): "m"}  # without a program: for the rules


def test_an_event_key_is_never_read_as_an_attribute() -> None:
    key = scan.event_key("gen_ai.choice", "message")
    data = request(span("execute_tool t", {"gen_ai.tool.name": "t", key: "an attribute"}))
    for native in (True, False):
        _, spans, _, _ = scan.Scanner(KEYS | {key}, native=native, events=EVENTS).scan(data)
        assert spans[0].attributes == {"gen_ai.tool.name": "t"}
    with pytest.raises(ValueError, match="also an attribute key"):
        scan._native.Scanner([key], 64, scan.Oversized, None, [(key, "gen_ai.choice", "message")])


# -- wire-level corner cases ---------------------------------------------------------------------


def _s(value: bytes) -> bytes:
    return _field(1, value)  # AnyValue.string_value


CASES = {
    "repeated key: the last wins": _field(9, _kv(b"k", _s(b"first"))) + _field(9, _kv(b"k", _s(b"second"))),
    "value given twice: merged, last member wins": _field(9, _kv(b"k", _s(b"a"), _field(3, b"\x05", 0))),
    "arrays given twice: concatenated": _field(9, _kv(b"k", _field(5, _field(1, _s(b"a"))),
                                                      _field(5, _field(1, _s(b"b"))))),
    "key after value": _field(9, _field(2, _s(b"v")) + _field(1, b"k")),
    "no value": _field(9, _field(1, b"k")),
    "string index: no value": _field(9, _kv(b"k", _s(b"a") + _field(8, b"\x03", 0))),
    "unknown fields and groups are skipped": _field(9, _kv(b"k", _s(b"v"))) + _field(99, b"\x01", 0)
    + wire.encode_varint(100 << 3 | 3) + _field(1, b"x") + wire.encode_varint(100 << 3 | 4) + _field(5, b"n"),
    "known field with another wire type is unknown": _field(9, b"\x07", 0) + _field(5, b"n"),
    "status given twice: merged": _field(15, _field(3, b"\x02", 0)) + _field(15, _field(2, b"msg")),
    "invalid UTF-8 in an unread key": _field(9, _kv(b"\xff", _s(b"v"))),
    "invalid UTF-8 in an unread value": _field(9, _kv(b"zz", _s(b"\xed\xa0\x80"))),
    "invalid UTF-8 in the name": _field(5, b"\xc0\xaf"),
    "truncated length": _field(9, _kv(b"k", _s(b"v")))[:-1],
    "unterminated group": wire.encode_varint(100 << 3 | 3) + _field(1, b"x"),
    "mismatched end group": wire.encode_varint(100 << 3 | 3) + wire.encode_varint(101 << 3 | 4),
    "stray end group": wire.encode_varint(100 << 3 | 4),
    "field number 0": b"\x02\x00",
    "wire type 7": b"\x0f",
    "overlong varint": _field(6, b"\xff" * 10 + b"\x01", 0),
    "ten-byte varint": _field(6, b"\xff" * 9 + b"\x01", 0),
    "unicode everywhere": _field(5, "ñame ✓ 🙂".encode()) + _field(9, _kv(b"k", _s("välue 🙂".encode()))),
    "event attribute repeated: the last wins": _field(11, _field(2, b"gen_ai.choice") + _field(
        3, _kv(b"message", _s(b"first"))) + _field(3, _kv(b"message", _s(b"second")))),
    "first event carrying it wins": _field(11, _field(2, b"gen_ai.choice") + _field(3, _kv(b"id", _s(b"1"))))
    + _field(11, _field(2, b"gen_ai.choice") + _field(3, _kv(b"message", _s(b"a"))))
    + _field(11, _field(2, b"gen_ai.choice") + _field(3, _kv(b"message", _s(b"b")))),
    "event name given twice: the last wins": _field(11, _field(2, b"other") + _field(2, b"gen_ai.choice")
                                                    + _field(3, _kv(b"message", _s(b"m")))),
    "event name after its attributes": _field(11, _field(3, _kv(b"message", _s(b"m"))) + _field(2, b"gen_ai.choice")),
    "event attribute without a value": _field(11, _field(2, b"gen_ai.choice") + _field(3, _field(1, b"message"))),
    "event attribute value merged": _field(11, _field(2, b"gen_ai.choice") + _field(
        3, _kv(b"message", _s(b"a"), _field(3, b"\x05", 0)))),
    "exception after a wanted event": _field(11, _field(2, b"gen_ai.choice") + _field(3, _kv(b"message", _s(b"m"))))
    + _field(11, _field(2, b"exception") + _field(3, _kv(b"exception.type", _s(b"E")))),
    "invalid UTF-8 in an unread event": _field(11, _field(2, b"zz") + _field(3, _kv(b"k", _s(b"\xff")))),
    "truncated event": _field(11, _field(2, b"gen_ai.choice") + _field(3, _kv(b"message", _s(b"m"))))[:-2],
}


@pytest.mark.parametrize("span_bytes", CASES.values(), ids=CASES.keys())
def test_wire_corner_cases_read_as_protobuf_reads_them(span_bytes: bytes) -> None:
    data = _request_of_span(_field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + span_bytes)
    got = assert_same(data)
    try:
        ExportTraceServiceRequest.FromString(data)
        accepted = True
    except Exception:
        accepted = False
    assert (got != "refused") == accepted


@pytest.mark.parametrize("depth", [10, 47, 48, 60])
def test_nesting_limit_is_protobufs(depth: int) -> None:
    value = _s(b"x")
    for _ in range(depth):
        value = _field(5, _field(1, value))
    assert_same(_request_of_span(_field(9, _kv(b"k", value))))


# -- property tests ------------------------------------------------------------------------------

scalars = st.one_of(st.text(max_size=12), st.booleans(), st.integers(-2**63, 2**63 - 1),
                    st.floats(allow_nan=False), st.binary(max_size=6))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                      max_leaves=8)
keys = st.sampled_from([*sorted(KEYS)[:40], "k", "n", "other", "x.y"])


def _any(v: Any) -> AnyValue:
    if isinstance(v, dict):
        return AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=_any(x)) for k, x in v.items()]))
    if isinstance(v, list):
        return AnyValue(array_value=ArrayValue(values=[_any(x) for x in v]))
    return any_value(v)


events_st = st.lists(st.builds(
    lambda name, attrs: Span.Event(name=name, attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs]),
    st.sampled_from([*EVENT_NAMES, "exception", "other"]),
    st.lists(st.tuples(st.sampled_from([*EVENT_ATTRS, "exception.type", "id"]), values), max_size=4)), max_size=4)

spans_st = st.builds(
    lambda name, attrs, code, msg, exc, events: Span(
        name=name, trace_id=b"\x01" * 16, span_id=b"\x02" * 8, start_time_unix_nano=5, end_time_unix_nano=9,
        attributes=[KeyValue(key=k, value=_any(v)) for k, v in attrs],
        status=Status(code=code, message=msg),
        events=([Span.Event(name="exception", attributes=[KeyValue(key="exception.type", value=_any(exc))])]
                if exc is not None else []) + events),
    st.text(max_size=10), st.lists(st.tuples(keys, values), max_size=6), st.integers(0, 2), st.text(max_size=5),
    st.one_of(st.none(), scalars), events_st)


#: Resource keys: the wanted ones and those the reader picks out of every resource.
resource_keys = st.one_of(keys, st.sampled_from(["service.name", ENV, OLD_ENV]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(spans_st, min_size=1, max_size=4), st.lists(st.tuples(resource_keys, values), max_size=4))
def test_generated_requests_read_the_same(spans: list[Span], resource: list[tuple[str, Any]]) -> None:
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
    rs.resource.attributes.extend([KeyValue(key=k, value=_any(v)) for k, v in resource])
    assert assert_same(ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()) != "refused"


def _valid_request() -> bytes:
    strands = span("execute_tool t", {"gen_ai.operation.name": "execute_tool"}, events=[
        _event("gen_ai.tool.message", content='{"path": "b.py"}', id="t1"), _event("gen_ai.choice", message="[]")])
    return request(tool_span(args='{"path": "a.py"}', result=["ok", 1]), span("chat", {"gen_ai.operation.name": "chat",
                   "gen_ai.usage.input_tokens": 12}, error="bad"), strands, resource={"session.id": "s"})


@settings(max_examples=int(os.environ.get("OTELLOOP_FUZZ_EXAMPLES", "1500")), deadline=None)
@given(st.data())
def test_mutated_requests_are_refused_or_read_as_protobuf_reads_them(data: st.DataObject) -> None:
    raw = bytearray(_valid_request())
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
        i = data.draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "set":
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "cut":
            del raw[i:i + data.draw(st.integers(1, 8))]
        else:
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        if not raw:
            return
    assert_same(bytes(raw))


# -- splicing ------------------------------------------------------------------------------------


def _splice_both(data: bytes, extras: list[bytes | None]) -> bytes:
    native = scan._native.splice(data, extras)
    saved, scan.NATIVE = scan.NATIVE, False
    try:
        python = scan.splice(data, extras)
    finally:
        scan.NATIVE = saved
    assert parse(native) == parse(python)
    return native


def test_splice_appends_to_the_right_spans_and_keeps_everything_else() -> None:
    two = ResourceSpans(scope_spans=[ScopeSpans(spans=[span("a"), span("b")]), ScopeSpans(spans=[span("c")])])
    data = ExportTraceServiceRequest(resource_spans=[two, ResourceSpans(scope_spans=[ScopeSpans(
        spans=[span("d", {"k": "v"})])])]).SerializeToString()
    extra = wire.encode_span_attributes({"otelloop.verdict": "continue"})
    out = parse(_splice_both(data, [None, extra, None, extra * 200]))
    before = parse(data)
    assert [s.name for s in out] == ["a", "b", "c", "d"]
    assert out[0] == before[0] and out[2] == before[2]
    assert [kv.key for kv in out[1].attributes] == ["otelloop.verdict"]
    assert len(out[3].attributes) == 201 and out[3].span_id == before[3].span_id
    assert scan._native.splice(data, [None] * 4) == data


def test_splice_keeps_unknown_fields_and_unchanged_length_prefixes() -> None:
    span_a = _field(5, b"a")
    rs = _field(2, _field(2, span_a) + _field(9, b"\x01", 0)) + _field(7, b"x")  # unknown fields at each level
    data = _field(1, rs) + _field(9, b"tail")
    assert scan._native.splice(data, [None]) == data
    out = scan._native.splice(data, [b"\x2a\x01z"])  # a second name field: the last one wins
    assert out.endswith(_field(9, b"tail"))
    assert ExportTraceServiceRequest.FromString(out).resource_spans[0].scope_spans[0].spans[0].name == "z"
    # ResourceSpans{scope_spans with a non-minimal length prefix 0x83 0x00} next to a span that grows.
    odd = wire.encode_varint(2 << 3 | 2) + b"\x83\x00" + span_a
    data = _field(1, odd + _field(2, _field(2, span_a)))
    out = scan._native.splice(data, [b"\x2a\x01z"])
    assert odd in out and parse(out)[0].name == "z"


def test_splice_refuses_a_wrong_number_of_extras() -> None:
    with pytest.raises(ValueError, match="2 spans"):
        scan._native.splice(request(span("a"), span("b")), [None])


def test_rewrite_replaces_then_appends() -> None:
    data = request(span("a", {"cognition.entropy_score": 0.9}), span("b"))
    spans = scan.span_bytes(data)
    new = wire.replace_span_attributes(spans[0], {"cognition.entropy_score": 0.1})
    out = parse(scan.rewrite(data, {0: new}, [b"\x2a\x01!", b"\x2a\x01?"]))
    assert [s.name for s in out] == ["!", "?"]  # appended name fields: the last one wins
    assert [(kv.key, kv.value.double_value) for kv in out[0].attributes] == [("cognition.entropy_score", 0.1)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=1, max_size=4), min_size=1, max_size=3), st.randoms())
def test_splice_matches_the_protobuf_rebuild(layout: list[list[bool]], rnd: random.Random) -> None:
    rss = [ResourceSpans(scope_spans=[ScopeSpans(spans=[span(f"s{i}") for i in range(len(group))])])
           for group in layout]
    data = ExportTraceServiceRequest(resource_spans=rss).SerializeToString()
    flags = [flag for group in layout for flag in group]
    extras = [wire.encode_span_attributes({"x": "y" * rnd.randint(0, 300)}) if f else None for f in flags]
    _splice_both(data, extras)


# -- the pipeline on both readers ----------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.pb")), ids=lambda p: p.name)
def test_pipeline_steps_are_the_same_on_both_readers(path: Path) -> None:
    data = path.read_bytes()
    native, python = Pipeline(build_config({}, env={})), Pipeline(build_config({}, env={}))
    python.scanner = scan.Scanner(python.scanner.keys, native=False, program=python.scanner.program,
                                  events=python.scanner.events)
    got, want = native.decode(data), python.decode(data)
    assert got.steps == want.steps and got.mapping_errors == want.mapping_errors and got.spans == want.spans
    assert native.process(got).data == python.process(want).data


def test_version_names_the_reader_in_use() -> None:
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "otelloop", "--version"], capture_output=True, text=True, check=True)
    assert "(native request reader)" in out.stdout


# -- typed reads ---------------------------------------------------------------------------------

read_values = st.one_of(st.none(), st.text(max_size=4), st.booleans(), st.integers(-3, 3),
                        st.sampled_from([0.0, 2.0, 2.5, -1.0, float("nan"), float("inf")]), st.binary(max_size=2),
                        st.lists(st.integers(0, 2), max_size=2),
                        st.dictionaries(st.text(max_size=2), st.none(), max_size=1),
                        st.builds(scan.Oversized, st.sampled_from(["string", "bytes", "array", "kvlist"]),
                                  st.builds(memoryview, st.binary(max_size=3))))
read_keys = st.sampled_from(["a", "b", "c"])
attr_dicts = st.dictionaries(read_keys, read_values, max_size=3)
plans = st.lists(st.tuples(st.sampled_from([reads.STRING, reads.TEXT, reads.COUNT, reads.AMOUNT]),
                           st.lists(read_keys, max_size=3).map(tuple), st.sampled_from(["f1", "f2"])),
                 max_size=4).map(tuple)


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


@settings(max_examples=500, deadline=None)
@given(attr_dicts, attr_dicts, plans)
def test_native_typed_reads_match_the_python_ones(span_attrs: dict, res_attrs: dict, plan: tuple) -> None:
    native_errors: list[str] = []
    python_errors: list[str] = []
    got = scan._native.resolve(span_attrs, res_attrs, plan, native_errors)
    want = reads.resolve_python(span_attrs, res_attrs, plan, python_errors)
    assert len(got) == len(want) and all(_same(g, w) and type(g) is type(w) for g, w in zip(got, want, strict=True))
    assert native_errors == python_errors


# -- the mapper's program, run by the reader -------------------------------------------------------

KIND_KEYS = ["gen_ai.operation.name", "openinference.span.kind", "llm.request.type", "traceloop.span.kind",
             "langsmith.span.kind", "langfuse.observation.type", "gen_ai.tool.name", "gen_ai.tool.call.id",
             "gen_ai.request.model", "llm.model_name"]
READ_KEYS = ["gen_ai.conversation.id", "session.id", "gen_ai.agent.name", "graph.node.id", "traceloop.entity.name",
             "gen_ai.tool.call.arguments", "input.value", "gen_ai.tool.call.result", "output.value",
             "gen_ai.usage.input_tokens", "llm.token_count.completion", "gen_ai.usage.cost", "error.type",
             "gen_ai.prompt", "otelloop.intent"]
SLOW_KEYS = ["otelloop.step.kind", "metadata", "logfire.span_type", "otelloop.progress.failing_tests",
             "cognition.entropy_score"]
program_values = st.one_of(
    st.sampled_from(["chat", "execute_tool", "invoke_agent", "TOOL", "LLM", "CHAIN", "tool", "agent", "generation",
                     "", "x", "gpt-4o", '{"a": 1}', "[]", "null", "pytest -q", "tool", "llm", "system", "ignore",
                     "pending_span", '{"langgraph_node": "n", "otelloop.step.kind": "tool"}']),
    st.integers(-2, 5), st.sampled_from([2.0, 2.5, -1.0, float("nan"), float("inf")]), st.booleans(),
    st.binary(max_size=2), st.lists(st.sampled_from(["a", 1]), max_size=2), st.none())
program_attrs = st.lists(st.tuples(st.sampled_from(KIND_KEYS + READ_KEYS + SLOW_KEYS + ["other"]), program_values),
                         max_size=7)


def _attr(key: str, value: Any) -> KeyValue:
    return KeyValue(key=key, value=AnyValue() if value is None else _any(value))


def _program_request(spans: list[list[tuple[str, Any]]], resource: list[tuple[str, Any]],
                     events: list[list[Span.Event]] | None = None) -> bytes:
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=[
        Span(name=f"execute_tool t{i}" if i % 2 else f"s{i}", trace_id=b"\x01" * 16, span_id=bytes([i + 1]) * 8,
             start_time_unix_nano=10 + i, end_time_unix_nano=20 + i, attributes=[_attr(k, v) for k, v in attrs],
             events=(events[i] if events and i < len(events) else []))
        for i, attrs in enumerate(spans)])])
    rs.resource.attributes.extend([_attr(k, v) for k, v in resource])
    return ExportTraceServiceRequest(resource_spans=[rs]).SerializeToString()


def _pipelines() -> tuple[Pipeline, Pipeline]:
    """otelloop's pipeline, and the same with the mapper deciding every span itself."""
    cfg = build_config({}, env={})
    fast, slow = Pipeline(cfg), Pipeline(cfg)
    slow.scanner = scan.Scanner(slow.scanner.keys, max_value_bytes=cfg.mapping.max_text_bytes, program=None,
                                events=slow.scanner.events)
    assert fast.scanner.program is not None
    return fast, slow


def _assert_maps_like_the_mapper(data: bytes) -> None:
    fast, slow = _pipelines()
    got, want = fast.decode(data), slow.decode(data)
    assert [(pos, step) for pos, step, _ in got.steps] == [(pos, step) for pos, step, _ in want.steps]
    assert sorted(got.mapping_errors) == sorted(want.mapping_errors)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.pb")), ids=lambda p: p.name)
def test_the_program_maps_recorded_spans_as_the_mapper_does(path: Path) -> None:
    _assert_maps_like_the_mapper(path.read_bytes())


program_events = st.lists(st.builds(
    lambda name, attrs: Span.Event(name=name, attributes=[_attr(k, v) for k, v in attrs]),
    st.sampled_from(EVENT_NAMES), st.lists(st.tuples(st.sampled_from(EVENT_ATTRS), program_values), max_size=3)),
    max_size=3)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(program_attrs, min_size=1, max_size=4),
       st.lists(st.tuples(st.sampled_from([*READ_KEYS, ENV, OLD_ENV]), program_values), max_size=3),
       st.lists(program_events, max_size=4))
def test_the_program_maps_generated_spans_as_the_mapper_does(spans: list, resource: list, events: list) -> None:
    data = _program_request(spans, resource, events)
    _assert_maps_like_the_mapper(data)
    assert_same(data)


def test_the_program_leaves_only_what_the_mapper_still_needs() -> None:
    data = request(tool_span(), span("chat", {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": -3}),
                   span("agent", {"gen_ai.operation.name": "invoke_agent", "graph.node.id": "n1"}),
                   span("explicit", {"otelloop.step.kind": "tool", "gen_ai.tool.name": "t"}),
                   span("plain", {"http.method": "GET"}), span("unknown op", {"gen_ai.operation.name": "dance"}),
                   resource={"session.id": "s1", "gen_ai.agent.id": "a1"})  # sessions are traces by default
    native, python = readers(program=PROGRAM)
    got = native.scan(data)
    assert got == python.scan(data)
    _, spans, errors, _ = got
    tool, chat, agent, explicit, plain, unknown = spans
    assert (tool.attributes, tool.kind) == (None, "tool") and tool.reads[:3] == ("search_web", None, "a1")
    assert (chat.attributes, chat.kind) == (None, "llm") and chat.reads[9] is None and errors == ["input_tokens"]
    assert agent.kind == "system"
    assert agent.attributes == {"gen_ai.operation.name": "invoke_agent", "graph.node.id": "n1"}
    assert explicit.kind is None and explicit.reads is None and explicit.attributes["otelloop.step.kind"] == "tool"
    assert plain is None and unknown is None


@pytest.mark.parametrize("span_bytes,kind", [
    (_field(9, _kv(b"gen_ai.operation.name", _s(b"chat")))
     + _field(9, _kv(b"gen_ai.operation.name", _s(b"execute_tool"))),
     "tool"),
    (_field(9, _kv(b"gen_ai.operation.name", _s(b"chat"), _field(3, b"\x05", 0))), None),  # merged: last is an int
    (_field(9, _kv(b"gen_ai.operation.name", _s(b"chat") + _field(9, b"\x01", 0))), "llm"),  # unknown member ignored
    (_field(9, _kv(b"gen_ai.operation.name", _s(b"chat") + _field(3, b"\x01", 2))), "llm"),  # wrong wire type: unknown
    (_field(9, _field(2, _s(b"TOOL")) + _field(1, b"openinference.span.kind")), "tool"),  # key after value
    (_field(9, _kv(b"gen_ai.tool.call.id")), "tool"),  # present without a value
])
def test_the_program_reads_kinds_as_protobuf_merges_values(span_bytes: bytes, kind: str | None) -> None:
    data = _request_of_span(_field(1, b"\x01" * 16) + _field(2, b"\x02" * 8) + span_bytes)
    _, spans, _, _ = readers(program=PROGRAM)[0].scan(data)
    assert (spans[0].kind if spans[0] is not None else None) == kind
    _assert_maps_like_the_mapper(data)
    assert_same(data)


def test_a_scanner_refuses_to_be_reentered() -> None:
    inner: list[Any] = []

    def oversized(kind: str, raw: memoryview) -> scan.Oversized:
        try:
            scanner.scan(data)
        except RuntimeError as e:
            inner.append(str(e))
        return scan.Oversized(kind, raw)

    scanner = scan._native.Scanner(["k"], 4, oversized)
    data = request(span("s", {"k": "a long value"}))
    _, spans, _, _ = scanner.scan(data)
    assert isinstance(spans[0].attributes["k"], scan.Oversized) and "already running" in inner[0]
    assert scanner.scan(data)[1][0].attributes["k"].kind == "string"  # and works again afterwards


def test_a_program_naming_a_kind_without_a_plan_is_refused() -> None:
    with pytest.raises(ValueError, match="no plan"):
        scan._native.Scanner(["a"], 64, scan.Oversized, (frozenset(), (("a", None, "tool"),), {}, frozenset()))


_T, _S = _field(1, b"\x01" * 16), _field(2, b"\x02" * 8)
ID_CASES: dict[str, tuple[bytes, str | None]] = {
    "valid": (_T + _S, None),
    "valid root with an empty parent": (_T + _S + _field(4, b""), None),
    "valid with a parent": (_T + _S + _field(4, b"\x03" * 8), None),
    "all-zero parent (read as none)": (_T + _S + _field(4, b"\x00" * 8), None),
    "no ids": (_field(5, b"name"), "trace_id of 0 bytes"),
    "short trace id": (_field(1, b"\x01" * 5) + _S, "trace_id of 5 bytes"),
    "long trace id": (_field(1, b"\x01" * 17) + _S, "trace_id of 17 bytes"),
    "all-zero trace id": (_field(1, b"\x00" * 16) + _S, "trace_id all zero"),
    "short span id": (_T + _field(2, b"\x02" * 4), "span_id of 4 bytes"),
    "missing span id": (_T, "span_id of 0 bytes"),
    "all-zero span id": (_T + _field(2, b"\x00" * 8), "span_id all zero"),
    "both wrong: the trace id is the reason": (_field(1, b"\x01") + _field(2, b"\x02"), "trace_id of 1 bytes"),
    "short parent": (_T + _S + _field(4, b"\x03" * 3), "parent_span_id of 3 bytes"),
    "repeated trace id: the last counts": (_field(1, b"\x01" * 3) + _T + _S, None),
    "repeated trace id: the last is short": (_T + _field(1, b"\x01" * 3) + _S, "trace_id of 3 bytes"),
    "trace id of the wrong wire type is unknown": (_T + _S + _field(1, b"\x05", 0), None),
    "valid links": (_T + _S + _field(13, _T + _S) + _field(13, b""), None),
    "link with a short trace id": (_T + _S + _field(13, _field(1, b"\x01" * 3) + _S), "link trace_id of 3 bytes"),
    "second link with a long span id": (_T + _S + _field(13, _T + _S) + _field(13, _field(2, b"\x02" * 9)),
                                        "link span_id of 9 bytes"),
    "own ids before links": (_field(1, b"\x01" * 2) + _S + _field(13, _field(1, b"\x01")), "trace_id of 2 bytes"),
}


@pytest.mark.parametrize(("span_bytes", "reason"), ID_CASES.values(), ids=ID_CASES.keys())
def test_both_readers_refuse_the_same_ids_for_the_same_reason(span_bytes: bytes, reason: str | None) -> None:
    """opentelemetry-proto trace.proto: a 16-byte trace_id and an 8-byte span_id, not all zero, are required;
    the parent span id is empty for a root span, else 8 bytes."""
    data = _request_of_span(span_bytes + _field(9, _kv(b"gen_ai.tool.name", _s(b"t"))))
    ExportTraceServiceRequest.FromString(data)  # a valid request: only its span is refused
    _, spans, _, invalid = assert_same(data)
    assert invalid == ([] if reason is None else [(0, reason)])
    assert (spans[0] is None) == (reason is not None)


def test_spans_with_invalid_ids_are_listed_by_position_and_can_be_cut_out() -> None:
    good = [tool_span(trace=5, i=i) for i in range(3)]
    bad = Span(name="bad", trace_id=b"\x01" * 5, span_id=b"\x01" * 8)
    data = request(good[0], bad, good[1], bad, good[2])
    _, _, _, invalid = assert_same(data)
    assert invalid == [(1, "trace_id of 5 bytes"), (3, "trace_id of 5 bytes")]
    kept = scan.without_spans(data, [1, 3])
    assert [s.span_id for s in parse(kept)] == [s.span_id for s in good]
    assert scan.Scanner(KEYS, native=True).scan(kept)[3] == []
