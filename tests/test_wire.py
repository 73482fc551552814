"""Byte-level enrichment agrees with the official protobuf classes."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from spans import attrs_of, parse, request, span

from otelloop.otlp import wire

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


def test_replace_leaves_one_value() -> None:
    data = request(span("a", {"cognition.entropy_score": 0.9, "other": 1}))
    out = Span.FromString(wire.replace_span_attributes(parse(data)[0].SerializeToString(),
                                                       {"cognition.entropy_score": 0.2}))
    keys = [kv.key for kv in out.attributes]
    assert keys.count("cognition.entropy_score") == 1
    assert attrs_of(out) == {"other": 1, "cognition.entropy_score": 0.2}


def test_unsupported_value_type_is_an_error() -> None:
    with pytest.raises(TypeError):
        wire.encode_any_value({"a": 1})  # type: ignore[arg-type]


def test_memoised_encodings_keep_the_value_type() -> None:
    decoded = [attrs_of(Span.FromString(wire.encode_span_attributes({"k": v}))) for v in (True, 1, 1.0)]
    assert [type(d["k"]) for d in decoded] == [bool, int, float]


def test_memoised_attribute_sets_keep_every_value_type() -> None:
    sets = [{"a": "x", "k": v} for v in (True, 1, 1.0, False, 0, 0.0)] * 2
    decoded = [attrs_of(Span.FromString(wire.encode_span_attributes(s))) for s in sets]
    assert [type(d["k"]) for d in decoded] == [bool, int, float] * 4
    assert decoded == sets


def test_attribute_sets_with_arrays_or_long_values_are_encoded_each_time() -> None:
    long = {"k": "v" * 2000, "n": 1.5}
    arrays = {"k": ["a", "b"], "n": 2}
    for _ in range(2):
        assert attrs_of(Span.FromString(wire.encode_span_attributes(long))) == long
        assert attrs_of(Span.FromString(wire.encode_span_attributes(arrays))) == {"k": ["a", "b"], "n": 2}
    assert all(len(v) <= wire._SET_CACHE_BYTES for v in wire._SET_CACHE.values())
    assert not any("v" * 2000 in key for key in wire._SET_CACHE)


def test_the_attribute_set_cache_is_bounded_in_sets_attributes_and_bytes() -> None:
    many = {f"k{j}": j for j in range(wire._SET_CACHE_ITEMS + 1)}
    assert attrs_of(Span.FromString(wire.encode_span_attributes(many))) == many
    for i in range(wire._SET_CACHE_ENTRIES + 10):
        attrs = {"otelloop.verdict": "continue", "otelloop.loop_score": i / 7}
        assert attrs_of(Span.FromString(wire.encode_span_attributes(attrs))) == attrs
    assert 0 < len(wire._SET_CACHE) <= wire._SET_CACHE_ENTRIES
    # a set of n attributes is kept under its n keys, n values and n value types
    assert all(len(key) <= 3 * wire._SET_CACHE_ITEMS for key in wire._SET_CACHE)
