"""OTLP/JSON: hex ids (not base64), integer enums, lowerCamelCase, unknown fields ignored."""

from __future__ import annotations

import json

import pytest

from otelloop.otlp.json_codec import JSONDecodeError, json_to_request, request_to_json

DOC = {
    "resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "svc"}}]},
        "scopeSpans": [{"scope": {"name": "s"}, "spans": [{
            "traceId": "5B8EFFF798038103D269B633813FC60C", "spanId": "EEE19B7EC3C1B174",
            "parentSpanId": "EEE19B7EC3C1B173", "name": "execute_tool search_web", "kind": 1,
            "startTimeUnixNano": "1544712660000000000", "endTimeUnixNano": 1544712661000000000,
            "attributes": [{"key": "gen_ai.usage.input_tokens", "value": {"intValue": "12"}}],
            "status": {"code": 2, "message": "boom"}, "someFutureField": {"x": 1},
            "links": [{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}],
        }]}],
    }]
}


def test_hex_ids_decode_to_the_right_bytes() -> None:
    span = json_to_request(json.dumps(DOC)).resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == "5b8efff798038103d269b633813fc60c"
    assert span.span_id.hex() == "eee19b7ec3c1b174" and span.parent_span_id.hex() == "eee19b7ec3c1b173"
    assert span.links[0].trace_id == span.trace_id
    assert span.start_time_unix_nano == 1544712660000000000 and span.kind == 1
    assert span.status.code == 2 and span.attributes[0].value.int_value == 12


def test_round_trip_emits_hex_ids_and_integer_enums() -> None:
    out = request_to_json(json_to_request(json.dumps(DOC)))
    span = out["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span["traceId"] == "5b8efff798038103d269b633813fc60c" and span["kind"] == 1
    assert span["status"]["code"] == 2


@pytest.mark.parametrize("body, fragment", [
    (b"{not json", "not valid JSON"),
    (b"[]", "must be a JSON object"),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}).encode(), "is not hex"),
    (json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"name": 5}]}]}]}).encode(), "name"),
], ids=["syntax", "not-object", "bad-hex", "wrong-type"])
def test_invalid_documents_say_what_is_wrong(body: bytes, fragment: str) -> None:
    with pytest.raises(JSONDecodeError) as e:
        json_to_request(body)
    assert fragment in str(e.value)


def test_ids_of_the_wrong_size_decode_as_they_are_for_their_span_to_be_refused() -> None:
    """Not an error of the document: the receiver refuses that span alone, as in OTLP/protobuf."""
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "abcd", "spanId": "00f067aa0ba902b7", "name": "short"},
        {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "00f067aa0ba902", "parentSpanId": "01",
         "name": "short span"}]}]}]}
    short, short_span = json_to_request(json.dumps(doc)).resource_spans[0].scope_spans[0].spans
    assert short.trace_id == bytes.fromhex("abcd") and len(short.span_id) == 8
    assert len(short_span.span_id) == 7 and short_span.parent_span_id == b"\x01"
