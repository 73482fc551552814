"""Coverage-guided fuzzing (atheris / libFuzzer) of everything otelloop reads from the network.

The first byte of each input picks the target, the rest is the input:

* ``0``: OTLP/JSON bodies → ``json_to_request`` (the HTTP receiver's JSON path);
* ``1``: protobuf bytes → ``Pipeline.decode`` → ``Pipeline.process``, whose output must decode again;
* ``2``: a well-formed span whose attribute values under the keys the mapping reads are fuzzer bytes
  parsed as ``AnyValue`` (any type, any nesting), then decoded and processed like ``1``.

Only the decoders' own refusals (``JSONDecodeError``, ``InvalidRequest``) may escape; anything else is a
crash that libFuzzer reports with the input that caused it. Memory is held to ``-rss_limit_mb`` and time
per input to ``-timeout``. Usage (see fuzz/README.md)::

    python fuzz/fuzz_decode.py -max_total_time=60 /tmp/otelloop-corpus fuzz/corpus
"""

from __future__ import annotations

import contextlib
import sys

import atheris

with atheris.instrument_imports(include=["otelloop"]):
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    from otelloop.config import build_config
    from otelloop.otlp.json_codec import JSONDecodeError, json_to_request
    from otelloop.pipeline import InvalidRequest, Pipeline

#: Keys whose values the mapping interprets (docs/mapping.md); fuzzed values go under them.
MAPPED_KEYS = (
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "input.value", "output.value",
    "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cost", "session.id",
    "gen_ai.conversation.id", "gen_ai.agent.name", "metadata", "error.type", "gen_ai.output.messages",
    "otelloop.progress.failing_tests", "otelloop.state_hash", "cognition.entropy_score", "gen_ai.request.model",
)
KINDS = ("execute_tool", "chat", "invoke_agent")

#: One pipeline for the whole run, so detector state accumulates as it would in a long-lived process.
PIPELINE = Pipeline(build_config({"state": {"group_by": "session", "max_sessions": 1000}}, env={}))


def fuzz_json(data: bytes) -> None:
    with contextlib.suppress(JSONDecodeError):
        json_to_request(data)


def fuzz_protobuf(data: bytes) -> None:
    try:
        decoded = PIPELINE.decode(data)
    except InvalidRequest:
        return
    processed = PIPELINE.process(decoded)
    assert processed.spans == decoded.spans
    if processed.modified:
        again = PIPELINE.decode(processed.data)  # otelloop's output must be valid input
        assert again.spans == decoded.spans


def fuzz_attribute_values(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    kind = KINDS[fdp.ConsumeIntInRange(0, len(KINDS) - 1)]
    attributes = [KeyValue(key="gen_ai.operation.name", value=AnyValue(string_value=kind)),
                  KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file"))]
    for _ in range(fdp.ConsumeIntInRange(1, 4)):
        key = MAPPED_KEYS[fdp.ConsumeIntInRange(0, len(MAPPED_KEYS) - 1)]
        raw = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 4096))
        try:
            value = AnyValue.FromString(raw)
        except DecodeError:
            value = AnyValue(string_value=raw.decode("utf-8", "replace"))
        attributes.append(KeyValue(key=key, value=value))
    span = Span(name=f"{kind} fuzz", trace_id=fdp.ConsumeBytes(16).ljust(16, b"\0"), span_id=b"\1" * 8,
                start_time_unix_nano=fdp.ConsumeIntInRange(0, 2**64 - 1),
                end_time_unix_nano=fdp.ConsumeIntInRange(0, 2**64 - 1), attributes=attributes)
    request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=[span])])])
    fuzz_protobuf(request.SerializeToString())


TARGETS = (fuzz_json, fuzz_protobuf, fuzz_attribute_values)


def test_one_input(data: bytes) -> None:
    if not data:
        return
    TARGETS[data[0] % len(TARGETS)](data[1:])


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
