"""Cutting requests at resource, scope and span boundaries, and reading large requests in chunks.

The invariants: every part within the bound, every span exactly once and in order, each with the
resource and scope (and schema URLs, and unknown fields) it came with; a request read in chunks gives
the same steps, in the same order, and the same forwarded spans as one read whole; a large OTLP/JSON body
read value by value gives the same request as one ``json.loads``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from spans import kvs, parse, request, span, tool_span

from otelloop.otlp.json_codec import json_to_protobuf, json_to_protobuf_pieces, request_to_json
from otelloop.otlp.split import split_all, split_request
from otelloop.otlp.wire import encode_varint
from otelloop.pipeline import Pipeline, run

FIXTURES = Path(__file__).parent / "fixtures"


def flat(data: bytes) -> list[tuple[bytes, str, bytes, str, bytes]]:
    """Every span with the resource and scope it travels with, in order."""
    req = ExportTraceServiceRequest.FromString(data)
    return [(rs.resource.SerializeToString(), rs.schema_url, ss.scope.SerializeToString(), ss.schema_url,
             s.SerializeToString()) for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]


def empty_groups(data: bytes) -> set[tuple[bytes, bytes | None]]:
    """Resources without scopes and scopes without spans (they travel too)."""
    req = ExportTraceServiceRequest.FromString(data)
    out: set[tuple[bytes, bytes | None]] = set()
    for rs in req.resource_spans:
        if not rs.scope_spans:
            out.add((rs.resource.SerializeToString(), None))
        out |= {(rs.resource.SerializeToString(), ss.scope.SerializeToString()) for ss in rs.scope_spans
                if not ss.spans}
    return out


def random_request(seed: int) -> bytes:
    rnd = random.Random(seed)
    req = ExportTraceServiceRequest()
    for r in range(rnd.randint(1, 5)):
        rs = req.resource_spans.add(schema_url=f"https://schema/{r}")
        rs.resource.attributes.extend(kvs({"service.name": f"svc-{r}", "pad": "p" * rnd.randint(0, 400)}))
        for s in range(rnd.randint(0, 4)):
            ss = rs.scope_spans.add(schema_url=f"https://scope/{s}")
            ss.scope.name = f"scope-{r}-{s}"
            for i in range(rnd.randint(0, 200)):
                ss.spans.append(tool_span(args="a" * rnd.randint(0, 3000), trace=r + 1, i=i))
    data = req.SerializeToString()
    # an unknown top-level field, and the schema URL of a scope after its spans (protobuf allows any order)
    return data + b"\xa2\x06\x03abc"


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit, max_spans",
                         [(4000, 0), (20_000, 0), (20_000, 7), (10 ** 8, 0), (10 ** 8, 50)])
def test_parts_hold_every_span_once_in_order_with_its_resource_and_scope(seed: int, limit: int,
                                                                         max_spans: int) -> None:
    data = random_request(seed)
    parts = split_all(data, limit, max_spans=max_spans)
    assert all(len(p) <= limit for p, _ in parts)
    if max_spans:
        assert all(n <= max_spans for _, n in parts)
    for part, n in parts:
        assert len(flat(part)) == n  # each part is a valid request holding what it says
    assert flat(b"".join(p for p, _ in parts)) == flat(data)
    assert empty_groups(b"".join(p for p, _ in parts)) == empty_groups(data)
    assert all(b"\xa2\x06\x03abc" in p for p, _ in parts), "unknown fields travel too"


def test_fields_after_the_spans_still_lead_every_part() -> None:
    spans = [tool_span(trace=1, i=i) for i in range(50)]
    ss = b"".join(b"\x12" + encode_varint(len(s.SerializeToString())) + s.SerializeToString() for s in spans)
    ss += b"\x1a\x0bhttps://s/1"  # ScopeSpans.schema_url after its spans
    rs = b"\x12" + encode_varint(len(ss)) + ss + b"\x1a\x0bhttps://r/1"
    data = b"\x0a" + encode_varint(len(rs)) + rs
    parts = split_all(data, 600)
    assert len(parts) > 3
    for part, _ in parts:
        req = ExportTraceServiceRequest.FromString(part)
        assert req.resource_spans[0].schema_url == "https://r/1"
        assert req.resource_spans[0].scope_spans[0].schema_url == "https://s/1"




def test_a_span_too_large_alone_goes_to_the_callback() -> None:
    small = tool_span(args="s", trace=1)
    big = tool_span(args="b" * 5000, trace=1)
    data = request(small, big, small, big)
    seen: list[tuple[int, int]] = []

    def oversized(index: int, span_bytes: bytes, size: int) -> bytes | None:
        seen.append((index, size))
        assert span_bytes == big.SerializeToString()
        return small.SerializeToString() if index == 1 else None

    parts = split_all(data, 1000, oversized=oversized)
    assert [i for i, _ in seen] == [1, 3] and all(size > 1000 for _, size in seen)
    kept = [s.SerializeToString() for s in parse(b"".join(p for p, _ in parts))]
    assert kept == [small.SerializeToString()] * 3
    alone = split_all(data, 1000)  # no callback: it is sent alone
    assert [n for _, n in alone] == [1, 1, 1, 1]


def test_checkpoints_come_every_few_thousand_spans() -> None:
    data = request(*[span("x", trace=1, i=i) for i in range(20_000)])
    items = list(split_request(data, 10 ** 8))
    assert items.count(None) >= 4


@pytest.mark.parametrize("bad", [b"\x0a\x05\x12", b"\x0a\x02\x12\x09", b"\x0b", b"\x00"])
def test_malformed_framing_is_an_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        split_all(bad * 2, 10)


# -- reading in chunks -----------------------------------------------------------------------------


def looping_request(n: int, traces: int = 7) -> bytes:
    """Tool calls repeating over a few traces, out of time order, so detectors fire and sorting matters."""
    rnd = random.Random(n)
    order = list(range(n))
    rnd.shuffle(order)
    return request(*[tool_span(["read_file", "search_web"][i % 2], args=f'{{"q": {i % 3}}}',
                               trace=1 + i % traces, i=i // traces) for i in order])


def test_a_request_read_in_chunks_gives_the_same_steps_and_output() -> None:
    data = looping_request(3000)
    whole, chunked = Pipeline(), Pipeline()
    a = whole.decode(data)
    b = run(chunked.decode_steps(data, chunk_bytes=20_000))
    assert b.chunks is not None and len(b.chunks) > 5
    assert [(p, s) for p, s, _ in a.steps] == [(p, s) for p, s, _ in b.steps]
    pa, pb = whole.process(a), run(chunked.process_steps(b))
    assert len(pb.parts) == len(b.chunks)
    assert [s.SerializeToString() for s in parse(pa.data)] == [s.SerializeToString() for s in parse(pb.data)]
    assert [(s.span_id, f.event) for s, f in pa.findings] == [(s.span_id, f.event) for s, f in pb.findings]
    assert pa.findings, "the detectors fired"


def test_spans_too_large_for_the_upstream_are_left_out_before_anything_changes() -> None:
    big = tool_span(args="b" * 50_000, trace=2)
    data = request(tool_span(trace=2, i=1), big, tool_span(trace=2, i=3))
    p = Pipeline()
    decoded = run(p.decode_steps(data, chunk_bytes=1 << 20, span_limit=10_000))
    assert [pos for pos, _ in decoded.too_large] == [1] and decoded.spans == 2
    assert len(p.store) == 0
    processed = p.process(decoded)
    assert [s.span_id for s in parse(processed.data)] == [s.span_id for s in parse(data)][::2]


# -- OTLP/JSON value by value ----------------------------------------------------------------------


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.pb")))
def test_json_read_value_by_value_gives_the_same_request(fixture: str) -> None:
    body = json.dumps(request_to_json((FIXTURES / fixture).read_bytes())).encode()
    assert flat(json_to_protobuf_pieces(body)) == flat(json_to_protobuf(body))


def test_json_pieces_of_a_large_body() -> None:
    body = json.dumps(request_to_json(looping_request(2000))).encode()
    pieces = json_to_protobuf_pieces(body)
    assert flat(pieces) == flat(json_to_protobuf(body))
    assert len(ExportTraceServiceRequest.FromString(pieces).resource_spans) == 4  # 500 spans a piece
