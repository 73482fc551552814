"""Property tests of everything that reads untrusted input: OTLP/JSON, protobuf requests, and the mapping
of arbitrary attribute values. The only exceptions allowed out are the decoders' own (``JSONDecodeError``,
``InvalidRequest``), which the receivers turn into 400 / INVALID_ARGUMENT; nothing may crash, hang or
allocate out of proportion to the input. The coverage-guided counterpart is ``fuzz/fuzz_decode.py``,
whose short run is the last test here.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from otelloop.config import build_config
from otelloop.otlp import scan
from otelloop.otlp.json_codec import JSONDecodeError, json_to_protobuf_pieces, json_to_request
from otelloop.pipeline import InvalidRequest, Pipeline

ROOT = Path(__file__).resolve().parents[1]
FUZZ = settings(max_examples=int(os.environ.get("OTELLOOP_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

#: Attribute keys the mapping reads (docs/mapping.md), so arbitrary values land where they are interpreted.
MAPPED_KEYS = [
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.id", "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result", "input.value", "output.value", "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens", "gen_ai.usage.cost", "llm.cost.total", "gen_ai.request.model",
    "gen_ai.conversation.id", "session.id", "gen_ai.agent.name", "gen_ai.agent.id", "openinference.span.kind",
    "traceloop.span.kind", "langsmith.span.kind", "langfuse.observation.type", "otelloop.step.kind",
    "otelloop.progress.failing_tests", "otelloop.progress.diff_hash", "otelloop.state_hash", "error.type",
    "metadata", "gen_ai.output.messages", "gen_ai.prompt", "gen_ai.completion", "cognition.entropy_score",
    "otelloop.intent", "graph.node.id", "tool_arguments", "llm.token_count.prompt",
]
KINDS = ["execute_tool", "chat", "invoke_agent", "TOOL", "LLM", "AGENT", "tool", "generation", "ignore", ""]


def pipeline(group_by: str = "session") -> Pipeline:
    return Pipeline(build_config({"state": {"group_by": group_by, "max_sessions": 1000}}, env={}))


#: One long-lived pipeline per grouping for the property tests: building one per example would cost most
#: of the time, and state that accumulates across examples is a harder input than a fresh one.
_SHARED: dict[str, Pipeline] = {}


def shared(group_by: str = "session") -> Pipeline:
    if group_by not in _SHARED:
        _SHARED[group_by] = pipeline(group_by)
    return _SHARED[group_by]


# ---------------------------------------------------------------------------------------------------
# Strategies


def json_values(max_leaves: int = 30) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=max_leaves)


#: json_values(n) built once per size, for the same reason as ANY_VALUE below.
JSON = {n: json_values(n) for n in (1, 2, 3, 4, 6)}
HEXISH = st.one_of(st.text("0123456789abcdefABCDEF", max_size=34), JSON[3])


def _hexish() -> st.SearchStrategy[Any]:
    return HEXISH


@st.composite
def otlp_json_docs(draw: st.DrawFn) -> Any:
    """Documents shaped like OTLP/JSON, with any value in any place (wrong types included)."""
    def maybe(strategy: st.SearchStrategy[Any]) -> Any:
        return draw(st.one_of(strategy, JSON[4]))

    def attribute() -> Any:
        field, strategy = draw(st.sampled_from([
            ("stringValue", st.text(max_size=30)), ("intValue", st.integers().map(str)),
            ("doubleValue", st.floats()), ("boolValue", st.booleans()), ("bytesValue", st.text(max_size=12)),
            ("arrayValue", JSON[4]), ("kvlistValue", JSON[4])]))
        value = draw(st.one_of(st.just({field: maybe(strategy)}), JSON[6]))
        return {"key": maybe(st.sampled_from(MAPPED_KEYS)), "value": value}

    def span() -> Any:
        fields = {"traceId": _hexish(), "spanId": _hexish(), "parentSpanId": _hexish(), "name": JSON[2],
                  "kind": JSON[1], "startTimeUnixNano": JSON[1], "endTimeUnixNano": JSON[1],
                  "status": JSON[3],
                  "attributes": st.builds(lambda n: [attribute() for _ in range(n)], st.integers(0, 4))
                  | JSON[3],
                  "links": st.lists(st.fixed_dictionaries({"traceId": _hexish(), "spanId": _hexish()}), max_size=2)
                  | JSON[2]}
        keys = draw(st.lists(st.sampled_from(sorted(fields)), unique=True))
        return {k: draw(fields[k]) for k in keys}

    spans = [span() for _ in range(draw(st.integers(0, 3)))]
    scope = {"spans": maybe(st.just(spans))}
    resource = {"scopeSpans": maybe(st.just([scope, *draw(st.lists(JSON[2], max_size=1))]))}
    return {"resourceSpans": maybe(st.just([resource])), **draw(st.dictionaries(st.text(max_size=8),
                                                                               JSON[2], max_size=2))}


def any_values(max_leaves: int = 12) -> st.SearchStrategy[AnyValue]:
    """Every AnyValue type, including empty ones, NaN and infinities, and nested arrays and kvlists."""
    scalars = st.one_of(
        st.text().map(lambda s: AnyValue(string_value=s)),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: AnyValue(double_value=f)),
        st.booleans().map(lambda b: AnyValue(bool_value=b)),
        st.binary(max_size=64).map(lambda b: AnyValue(bytes_value=b)),
        st.just(AnyValue()),
        st.sampled_from(['{"path": "/tmp/a.py"}', '{"command": "pytest -x"}', "[]", "{}", "null", "",
                         '{"content": "x", "tool_call_id": "call_1"}', "1e999", "-1", "NaN"])
        .map(lambda s: AnyValue(string_value=s)))

    def nest(inner: st.SearchStrategy[AnyValue]) -> st.SearchStrategy[AnyValue]:
        arrays = st.lists(inner, max_size=4).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs)))
        kvlists = st.lists(st.tuples(st.sampled_from(["path", "command", "content", "a", ""]), inner), max_size=4
                           ).map(lambda kv: AnyValue(kvlist_value=KeyValueList(
                               values=[KeyValue(key=k, value=v) for k, v in kv])))
        return arrays | kvlists

    return st.recursive(scalars, nest, max_leaves=max_leaves)


#: Built once: constructing a recursive strategy per draw would cost more than the test itself.
ANY_VALUE = any_values()
ATTRIBUTE_KEYS = st.lists(st.sampled_from(MAPPED_KEYS) | st.text(max_size=10), max_size=8)


@st.composite
def requests(draw: st.DrawFn) -> ExportTraceServiceRequest:
    """Structurally valid requests whose spans carry arbitrary values under the keys the mapping reads."""
    def attributes() -> list[KeyValue]:
        return [KeyValue(key=k, value=draw(ANY_VALUE)) for k in draw(ATTRIBUTE_KEYS)]

    resource_spans = []
    for _ in range(draw(st.integers(1, 2))):
        spans = []
        for _ in range(draw(st.integers(0, 4))):
            kind = draw(st.sampled_from(KINDS))
            s = Span(name=draw(st.text(max_size=20)), trace_id=draw(st.binary(min_size=0, max_size=17)),
                     span_id=draw(st.binary(max_size=9)),
                     start_time_unix_nano=draw(st.integers(0, 2**64 - 1)),
                     end_time_unix_nano=draw(st.integers(0, 2**64 - 1)), attributes=attributes())
            s.attributes.append(KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value=kind)))
            if draw(st.booleans()):
                s.status.CopyFrom(Status(code=draw(st.integers(0, 2)), message=draw(st.text(max_size=20))))
            if draw(st.booleans()):
                s.events.add(name="exception", attributes=attributes())
            spans.append(s)
        rs = ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])
        rs.resource.attributes.extend(attributes())
        resource_spans.append(rs)
    return ExportTraceServiceRequest(resource_spans=resource_spans)


# ---------------------------------------------------------------------------------------------------
# OTLP/JSON


@FUZZ
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_json_decoder_on_arbitrary_bytes(body: bytes) -> None:
    with contextlib.suppress(JSONDecodeError):
        json_to_request(body)


@FUZZ
@given(otlp_json_docs())
@example({"resourceSpans": [{"scopeSpans": [{"spans": [{"kind": math.inf}]}]}]})
def test_json_decoder_on_otlp_shaped_documents_with_any_values(doc: Any) -> None:
    try:
        request = json_to_request(json.dumps(doc))
    except JSONDecodeError:
        return
    # Ids of any size decode as they are; both readers then agree on the spans to refuse for them.
    data = request.SerializeToString()
    native, python = (scan.Scanner(["k"], native=True).scan(data), scan.Scanner(["k"], native=False).scan(data))
    assert native[3] == python[3] and all(python[1][index] is None for index, _ in python[3])


@pytest.mark.parametrize("value", ["Infinity", "-Infinity", "NaN", "1e400", '"x"', "[]", "{}", "true"])
@pytest.mark.parametrize("field", ["kind", "startTimeUnixNano", "droppedAttributesCount"])
def test_json_decoder_turns_odd_numbers_into_client_errors(field: str, value: str) -> None:
    """Both decoders (whole body and piece by piece) answer every odd value with their own error:
    ``json_format`` lets ``OverflowError`` escape for ``Infinity`` where an enum belongs."""
    body = '{"resourceSpans": [{"scopeSpans": [{"spans": [{"%s": %s}]}]}]}' % (field, value)  # noqa: UP031  (JSON braces)
    for decode in (json_to_request, json_to_protobuf_pieces):
        try:
            decode(body)
        except JSONDecodeError as e:
            assert str(e)


@pytest.mark.parametrize("depth", [10, 1_000, 100_000])
def test_json_decoder_on_deep_nesting(depth: int) -> None:
    for body in ("[" * depth + "]" * depth, '{"a":' * depth + "1" + "}" * depth,
                 '{"resourceSpans": [{"resource": {"attributes": [{"key": "k", "value": ' + '{"kvlistValue": '
                 '{"values": [{"key": "k", "value": ' * depth + "{}" + "}]}}" * depth + "}]}}]}"):
        with contextlib.suppress(JSONDecodeError):
            json_to_request(body)


# ---------------------------------------------------------------------------------------------------
# Protobuf


@FUZZ
@given(st.binary(max_size=400))
def test_pipeline_on_arbitrary_bytes(data: bytes) -> None:
    p = shared()
    try:
        decoded = p.decode(data)
    except InvalidRequest:
        return
    processed = p.process(decoded)
    assert processed.spans == decoded.spans


@FUZZ
@given(requests(), st.data())
def test_pipeline_on_mutated_valid_requests(request: ExportTraceServiceRequest, data: st.DataObject) -> None:
    """Bit flips, truncations and splices of a valid request: decoded or refused, never crashed."""
    raw = bytearray(request.SerializeToString())
    for _ in range(data.draw(st.integers(1, 4))):
        if not raw:
            break
        at = data.draw(st.integers(0, len(raw) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            raw[at] ^= 1 << data.draw(st.integers(0, 7))
        elif action == "cut":
            del raw[at:at + data.draw(st.integers(1, 8))]
        else:
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=6))
    p = shared()
    try:
        decoded = p.decode(bytes(raw))
    except InvalidRequest:
        return
    p.process(decoded)


@FUZZ
@given(requests(), st.sampled_from(["trace", "session"]))
def test_pipeline_on_arbitrary_attribute_values(request: ExportTraceServiceRequest, group_by: str) -> None:
    """Any AnyValue under any mapped key: mapped or counted as a mapping error, and the forwarded bytes
    are the same spans (enriched, never lost or duplicated), but for those with invalid ids, left out."""
    data = request.SerializeToString()
    p = shared(group_by)
    decoded = p.decode(data)
    processed = p.process(decoded)
    out = ExportTraceServiceRequest.FromString(processed.data)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    problems = [scan.id_problem(s.trace_id, s.span_id, s.parent_span_id,
                                [(link.trace_id, link.span_id) for link in s.links]) for s in spans]
    before = [s.span_id for s, problem in zip(spans, problems, strict=True) if problem is None]
    after = [s.span_id for rs in out.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert after == before and processed.spans == len(before)
    assert decoded.invalid == [problem for problem in problems if problem is not None]
    assert processed.modified == (processed.data != decoded.data)
    p.process(p.decode(processed.data))  # otelloop's own output is valid input (a chain of two)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field, written by hand: the generated classes refuse to build values
    nested deeper than their own parser would accept, and the point here is to send such values."""
    length, size = bytearray(), len(payload)
    while True:
        length.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            break
    return bytes([number << 3 | 2]) + bytes(length) + payload


def _nested_request(depth: int) -> bytes:
    """One tool span whose arguments are a kvlist nested ``depth`` levels deep."""
    value = _field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):  # AnyValue.kvlist_value → KeyValueList.values → KeyValue{key, value}
        value = _field(6, _field(1, _field(1, b"content") + _field(2, value)))
    span = Span(name="t", trace_id=b"\x01" * 16, span_id=b"\x02" * 8, attributes=[
        KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="execute_tool")),
        KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="t"))]).SerializeToString()
    args = _field(1, b"gen_ai.tool.call.arguments") + _field(2, value)
    span += _field(9, args)  # Span.attributes: one more KeyValue, appended
    return _field(1, _field(2, _field(2, span)))  # request.resource_spans.scope_spans.spans


@pytest.mark.parametrize("depth", [5, 30, 200, 5000])
def test_deeply_nested_values_are_decoded_or_refused(depth: int) -> None:
    """protobuf's own nesting limit refuses the deepest requests; whatever decodes is processed."""
    p = pipeline()
    try:
        decoded = p.decode(_nested_request(depth))
    except InvalidRequest:
        assert depth > 30
        return
    assert p.process(decoded).spans == 1


@pytest.mark.parametrize("kind", ["string", "bytes", "array", "kvlist"])
def test_huge_values_are_not_copied_around(kind: str) -> None:
    """Spans with 8 MiB arguments and results (a 48 MiB request): values longer than
    ``mapping.max_text_bytes`` are hashed, not parsed, and no memo keeps them afterwards. Besides the
    enriched copy of the request that is forwarded (one splice), at most two values are materialised at a
    time, and the pipeline retains next to nothing once it is done."""
    size = 8 << 20
    chunk = AnyValue(string_value="y" * 1024)
    big = {"string": AnyValue(string_value="x" * size), "bytes": AnyValue(bytes_value=b"\xff" * size),
           "array": AnyValue(array_value=ArrayValue(values=[chunk] * (size // 1024))),
           "kvlist": AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=f"k{i}", value=chunk)
                                                               for i in range(size // 1024)]))}[kind]
    spans = [Span(name="execute_tool read_file", trace_id=b"\x01" * 16, span_id=bytes([0] * 7 + [i + 1]),
                  start_time_unix_nano=i, end_time_unix_nano=i + 1,
                  attributes=[KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="execute_tool")),
                              KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file")),
                              KeyValue(key="gen_ai.tool.call.arguments", value=big),
                              KeyValue(key="gen_ai.tool.call.result", value=big)])
             for i in range(3)]
    data = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
                                     ).SerializeToString()
    del spans, big
    p = pipeline()
    p.process(p.decode(request_of_small_span()))  # warm caches outside the measurement
    tracemalloc.start()
    started = time.perf_counter()
    try:
        before, _ = tracemalloc.get_traced_memory()
        processed = p.process(p.decode(data))
        elapsed = time.perf_counter() - started
        _, peak = tracemalloc.get_traced_memory()
        forwarded = len(processed.data)
        del processed
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    print(f"\nhuge {kind}: request {len(data) >> 20} MiB, peak Python allocation {peak >> 20} MiB, "
          f"retained {retained >> 10} KiB, {elapsed:.2f} s")
    assert forwarded >= len(data)
    assert peak - before < forwarded + 2 * size + (1 << 20), f"peak {peak >> 20} MiB, {len(data) >> 20} MiB request"
    assert retained < 1 << 20
    assert elapsed < 5.0


def request_of_small_span() -> bytes:
    span = Span(name="execute_tool t", trace_id=b"\x09" * 16, span_id=b"\x09" * 8,
                attributes=[KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="t"))])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
                                     ).SerializeToString()


def test_nan_and_infinite_numbers_are_ignored_not_fatal() -> None:
    span = Span(name="chat", trace_id=b"\x03" * 16, span_id=b"\x04" * 8, attributes=[
        KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value="chat")),
        KeyValue(key="gen_ai.usage.cost", value=AnyValue(double_value=math.inf)),
        KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(double_value=math.nan)),
        KeyValue(key="gen_ai.usage.output_tokens", value=AnyValue(int_value=-(2**63)))])
    p = pipeline()
    data = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])]
                                     ).SerializeToString()
    assert p.process(p.decode(data)).spans == 1


# ---------------------------------------------------------------------------------------------------
# The coverage-guided run (atheris)


def test_short_atheris_run(tmp_path: Path) -> None:
    """A bounded coverage-guided run of fuzz/fuzz_decode.py (OTELLOOP_FUZZ_SECONDS, default 20). New
    corpus entries go to a temporary directory, the checked-in seeds are only read; a crash exits
    non-zero and leaves the input in ``tmp_path``."""
    pytest.importorskip("atheris")
    seconds = int(os.environ.get("OTELLOOP_FUZZ_SECONDS", "20"))
    (tmp_path / "corpus").mkdir()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "fuzz" / "fuzz_decode.py"), f"-max_total_time={seconds}", "-rss_limit_mb=1024",
         "-timeout=10", f"-artifact_prefix={tmp_path}/", str(tmp_path / "corpus"), str(ROOT / "fuzz" / "corpus")],
        capture_output=True, text=True, timeout=seconds + 120, cwd=tmp_path, check=False)
    tail = proc.stderr[-3000:]
    assert proc.returncode == 0, tail
    assert "Done" in proc.stderr and "runs in" in proc.stderr, tail
    runs = int(proc.stderr.rsplit("Done ", 1)[1].split()[0])
    print(f"\natheris: {runs} runs in {seconds} s, no crash")
    assert runs > 1000
