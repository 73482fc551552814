"""Wire-level views and byte-level enrichment agree with the official protobuf classes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from spans import attrs_of, parse, request, span

from otelloop.otlp import wire


def test_view_reads_what_the_official_classes_read() -> None:
    data = request(span("a", {"k": "v", "n": 3, "f": 1.5, "b": True}), span("b", {"x": [1, 2]}),
                   resource={"service.version": "1"})
    view = wire.ViewRequest.FromString(data)
    rs = view.resource_spans[0]
    assert rs.resource.attributes["service.name"].string_value == "agent-svc"
    a, b = rs.scope_spans[0].spans
    assert (a.name, a.attributes["k"].string_value, a.attributes["n"].int_value) == ("a", "v", 3)
    assert a.attributes["f"].double_value == 1.5 and a.attributes["b"].bool_value is True
    assert [v.int_value for v in b.attributes["x"].array_value.values] == [1, 2]
    assert wire.count_spans(view) == 2


values = st.one_of(st.text(max_size=40), st.booleans(), st.integers(-2**63, 2**63 - 1),
                   st.floats(allow_nan=False), st.lists(st.text(max_size=8), max_size=4),
                   st.lists(st.integers(-1000, 1000), max_size=4))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=20), values, max_size=6))
def test_encoded_attributes_decode_identically(attrs: dict) -> None:
    decoded = attrs_of(Span.FromString(wire.encode_span_attributes(attrs)))
    assert decoded.keys() == attrs.keys()
    for k, v in attrs.items():
        if isinstance(v, float) and math.isnan(v):
            continue
        assert decoded[k] == v


def test_encoded_event_decodes() -> None:
    ev = Span.FromString(wire.encode_span_event("otelloop.x", 42, {"otelloop.repeat_count": 3, "s": "y"})).events[0]
    assert (ev.name, ev.time_unix_nano) == ("otelloop.x", 42)
    assert attrs_of(ev) == {"otelloop.repeat_count": 3, "s": "y"}  # type: ignore[arg-type]


def test_splice_appends_to_the_right_span_and_keeps_everything_else() -> None:
    data = request(span("a", {"k": "v"}), span("b"), span("c"))
    extra = wire.encode_span_attributes({"otelloop.verdict": "continue"})
    out = parse(wire.splice(data, {(0, 0, 1): extra}))
    before = parse(data)
    assert [s.name for s in out] == ["a", "b", "c"]
    assert out[0] == before[0] and out[2] == before[2]
    assert attrs_of(out[1]) == {"otelloop.verdict": "continue"}
    assert out[1].span_id == before[1].span_id


def test_replace_leaves_one_value() -> None:
    data = request(span("a", {"cognition.entropy_score": 0.9, "other": 1}))
    out = parse(wire.splice(data, {}, {(0, 0, 0): {"cognition.entropy_score": 0.2}}))[0]
    keys = [kv.key for kv in out.attributes]
    assert keys.count("cognition.entropy_score") == 1
    assert attrs_of(out) == {"other": 1, "cognition.entropy_score": 0.2}


def test_unsupported_value_type_is_an_error() -> None:
    with pytest.raises(TypeError):
        wire.encode_any_value({"a": 1})  # type: ignore[arg-type]


def test_memoised_encodings_keep_the_value_type() -> None:
    decoded = [attrs_of(Span.FromString(wire.encode_span_attributes({"k": v}))) for v in (True, 1, 1.0)]
    assert [type(d["k"]) for d in decoded] == [bool, int, float]
