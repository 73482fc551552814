"""OTLP trace requests at the wire level: byte-level enrichment.

Enrichment never re-serialises a span: new attributes and events are encoded directly and appended to
the span's original bytes (protobuf merges repeated fields by concatenation), so a request whose spans
gain nothing is forwarded as its original bytes and one that gains something costs one splice
(``otelloop.otlp.scan.splice``). Reading requests is ``otelloop.otlp.scan``'s job.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from opentelemetry.proto.trace.v1 import trace_pb2

from otelloop.bounds import Memo
from otelloop.model import AttrValue

_F = descriptor_pb2.FieldDescriptorProto
_pool = descriptor_pool.Default()


def _raw_views() -> Any:
    """A request whose spans stay as bytes, so they can be spliced and re-framed cheaply."""
    fdp = descriptor_pb2.FileDescriptorProto(name="otelloop/view/raw.proto", package="otelloop.view.raw",
                                             syntax="proto3")
    ss = fdp.message_type.add(name="ScopeSpans")
    ss.field.add(name="scope", number=1, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    ss.field.add(name="spans", number=2, type=_F.TYPE_BYTES, label=_F.LABEL_REPEATED)
    ss.field.add(name="schema_url", number=3, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    rs = fdp.message_type.add(name="ResourceSpans")
    rs.field.add(name="resource", number=1, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    rs.field.add(name="scope_spans", number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                 type_name=".otelloop.view.raw.ScopeSpans")
    rs.field.add(name="schema_url", number=3, type=_F.TYPE_BYTES, label=_F.LABEL_OPTIONAL)
    req = fdp.message_type.add(name="Request")
    req.field.add(name="resource_spans", number=1, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                  type_name=".otelloop.view.raw.ResourceSpans")
    try:
        _pool.FindFileByName(fdp.name)
    except KeyError:
        _pool.Add(fdp)
    return message_factory.GetMessageClass(_pool.FindMessageTypeByName("otelloop.view.raw.Request"))


#: A request whose spans are opaque bytes (for splicing enriched spans back in).
RawRequest: Any = _raw_views()


# ---------------------------------------------------------------------------------------------------
# Encoding attributes and events by hand (OTLP field numbers from trace.proto / common.proto)


def encode_varint(n: int) -> bytes:
    """A base-128 varint; negative numbers as their 64-bit two's complement (int64 fields)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def delimited(tag: int, payload: bytes) -> bytes:
    """A length-delimited field with a one-byte tag."""
    return bytes((tag,)) + encode_varint(len(payload)) + payload



def encode_any_value(value: AttrValue) -> bytes:
    """AnyValue: string=1, bool=2, int=3, double=4, array=5 (ArrayValue.values=1)."""
    if isinstance(value, str):
        return delimited(0x0A, value.encode())
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, int):
        return b"\x18" + encode_varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    if isinstance(value, (list, tuple)):
        return delimited(0x2A, b"".join(delimited(0x0A, encode_any_value(v)) for v in value))
    raise TypeError(f"unsupported attribute value type {type(value).__name__}")


def encode_key_value(key: str, value: AttrValue) -> bytes:
    """KeyValue: key=1, value=2."""
    return delimited(0x0A, key.encode()) + delimited(0x12, encode_any_value(value))


#: Encoded scalar attributes by (key, type, value), and whole attribute sets by (keys, values, types):
#: bounded memos (registered with the memory guard, see docs/deploy.md).
_ATTR_CACHE = Memo(16384, 4 << 20)
_SET_CACHE = Memo(1024, 2 << 20)
#: Sets of more attributes, or encoding to more bytes, than these are not kept in _SET_CACHE.
_SET_CACHE_ITEMS = 8
_SET_CACHE_BYTES = 512
_SET_CACHE_ENTRIES = _SET_CACHE.max_entries


def _span_attribute(key: str, value: AttrValue) -> bytes:
    """One Span.attributes (field 9) entry.

    Scalars are memoised by (key, type, value) — verdicts, severities and scores take few distinct
    values; the type is part of the key because ``1 == 1.0 == True`` in Python but not on the wire.
    """
    cacheable = not isinstance(value, (list, tuple)) and (not isinstance(value, str) or len(value) <= 32)
    if cacheable:
        ck = (key, type(value), value)
        hit: bytes | None = _ATTR_CACHE.get(ck)
        if hit is not None:
            return hit
    encoded = delimited(0x4A, encode_key_value(key, value))
    if cacheable:
        _ATTR_CACHE.put(ck, encoded, 200 + len(encoded))
    return encoded


def encode_span_attributes(attributes: dict[str, AttrValue]) -> bytes:
    """Span.attributes entries, ready to append to a serialised span.

    Whole sets are memoised: the detectors give every step the same few keys (verdict, scores, level)
    with few distinct values, so most spans of a busy service carry a set already encoded. The key is one
    flat tuple, the set's keys, then its values, then the values' types (``1 == 1.0 == True`` in Python,
    not on the wire): a set of n attributes always gives 3n items in that order, so two sets share a key
    only when they are the same, and one tuple costs less to build and hash than three. A set with an
    array value is unhashable and simply encoded.
    """
    values = attributes.values()
    key: tuple[Any, ...] | None = (*attributes, *values, *map(type, values))
    try:
        hit: bytes | None = _SET_CACHE.get(key)
    except TypeError:  # an array value
        hit = key = None
    if hit is not None:
        return hit
    encoded = b"".join([_span_attribute(k, v) for k, v in attributes.items()])
    if key is not None and len(encoded) <= _SET_CACHE_BYTES and len(attributes) <= _SET_CACHE_ITEMS:
        # its tuples and strings, at worst about twice the encoded bytes plus 100 per attribute
        _SET_CACHE.put(key, encoded, 200 + 100 * len(attributes) + 2 * len(encoded))
    return encoded


def encode_span_event(name: str, time_unix_nano: int, attributes: dict[str, AttrValue]) -> bytes:
    """One Span.events (field 11) entry: Event{time_unix_nano=1 fixed64, name=2, attributes=3}."""
    body = b"\x09" + struct.pack("<Q", time_unix_nano) + delimited(0x12, name.encode())
    body += b"".join(delimited(0x1A, encode_key_value(k, v)) for k, v in attributes.items())
    return delimited(0x5A, body)


def replace_span_attributes(span_bytes: bytes, replacements: dict[str, AttrValue | None],
                            drop_attribute: Callable[[str], bool] | None = None,
                            drop_event: Callable[[Any], bool] | None = None) -> bytes:
    """Rewrite a span so each key in ``replacements`` appears once, with the new value (a key whose
    value is None is removed and not written again).

    Used only when a span carries an attribute otelloop must overwrite (the authoritative entropy
    score: the agent's value must not survive anywhere in the forwarded span) or carries what an earlier
    otelloop wrote (``drop_attribute`` says which attribute keys, ``drop_event`` which events, given as
    ``trace_pb2.Span.Event``, go), so that what this pass appends is never a second copy.
    """
    span = trace_pb2.Span.FromString(span_bytes)
    kept = [kv for kv in span.attributes
            if kv.key not in replacements and (drop_attribute is None or not drop_attribute(kv.key))]
    del span.attributes[:]
    span.attributes.extend(kept)
    if drop_event is not None and span.events:
        events = [ev for ev in span.events if not drop_event(ev)]
        if len(events) != len(span.events):
            del span.events[:]
            span.events.extend(events)
    kept_bytes: bytes = span.SerializeToString()
    values: dict[str, AttrValue] = {k: v for k, v in replacements.items() if v is not None}
    return kept_bytes + encode_span_attributes(values) if values else kept_bytes
