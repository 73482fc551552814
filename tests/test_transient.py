"""Transient failures (HTTP 429/503, gRPC UNAVAILABLE, timeouts): decided from status, given a retry allowance.

Unit tests of the classification (``otelloop.mapping.results.transient_failure``): status codes in span
attributes, in ``error.type``, in the error's text next to a reason phrase in any language, in a JSON
``status``/``code`` field; other client errors stay ordinary failures. Then through the real pipeline: a
call that fails transiently seven times and then succeeds is a retry (no finding, no nudge), and a call
that fails with 503 for good is stopped once the allowance is used up, as is the same loop under the
``seed`` profile, which has no allowance.
"""

from __future__ import annotations

import pytest
from spans import request, span, tool_span

from otelloop.config import load_config
from otelloop.detectors.base import POLL_WAITS, TRANSIENT_RETRIES
from otelloop.mapping.results import TRANSIENT, transient_failure
from otelloop.pipeline import Pipeline


@pytest.mark.parametrize("text", [
    "429 Too Many Requests (request_id=req_8fK2pQ0aZr)",
    "Error: 503 Service Unavailable: upstream busy",
    "HTTP/1.1 504 Gateway Timeout",
    "upstream answered HTTP 502",
    "429 Zu viele Anfragen",                               # German reason phrase
    "429 リクエストが多すぎます",                                # Japanese reason phrase
    '{"error": {"status": 429, "message": "slow down"}}',
    '{"code": "503", "detail": "maintenance"}',
    "{'status_code': 500, 'body': 'oops'}",
])
def test_a_transient_status_code_in_the_text_is_transient(text: str) -> None:
    assert transient_failure(text)


@pytest.mark.parametrize("text", [
    "404 Not Found", "400 Bad Request: missing field 'id'", '{"status": 404}', "HTTP 403",
    "found 500 records, 3 invalid", "took 503 ms", "validation failed for 429 rows",
    "RuntimeError('timeout after 30s')",  # a word in a message is not a status: no word lists
    "connection refused (records-api:8080)",
])
def test_other_failures_stay_ordinary(text: str) -> None:
    assert not transient_failure(text)


def test_status_attributes_decide_first() -> None:
    assert transient_failure("boom", http_status="503") and transient_failure("boom", http_status="429")
    assert not transient_failure("429 Too Many Requests", http_status="404"), "the span's status wins"
    assert transient_failure("boom", grpc_status="14") and transient_failure("boom", grpc_status="4")
    assert not transient_failure("boom", grpc_status="3")  # INVALID_ARGUMENT


def test_error_type_holds_a_status_code_or_a_class_hint() -> None:
    assert transient_failure("", error_type="429") and transient_failure("", error_type="UNAVAILABLE")
    assert not transient_failure("", error_type="404") and not transient_failure("", error_type="ValueError")
    for cls in ("TimeoutError", "java.net.SocketTimeoutException", "System.TimeoutException", "RateLimitError"):
        assert transient_failure("", exception_type=cls), cls


def test_the_mapper_flags_transient_failures_from_span_status_attributes() -> None:
    p = Pipeline()
    spans = [tool_span("fetch", args='{"id": 1}', result=None, trace=5, i=0, error="upstream said no",
                       attrs={"http.response.status_code": 503}),
             tool_span("fetch", args='{"id": 1}', result=None, trace=5, i=1, error="upstream said no",
                       attrs={"http.response.status_code": 404}),
             tool_span("fetch", args='{"id": 1}', result=None, trace=5, i=2, error="deadline",
                       attrs={"rpc.grpc.status_code": 14}),
             tool_span("fetch", args='{"id": 1}', result="429 Too Many Requests", trace=5, i=3)]
    steps = [step for _, step, _ in p.decode(request(*spans)).steps]
    assert [bool(s.result_flags & TRANSIENT) for s in steps] == [True, False, True, False], \
        "a successful result is never a transient failure"


def retry_spans(failures: int, message: str, succeed: bool, trace: int) -> list:
    """One call failing ``failures`` times with ``message`` (a fresh request id each time), then maybe succeeding."""
    spans = [tool_span("get_invoice", args='{"invoice_id": "R-7"}', result=None, trace=trace, i=i,
                       error=f"{message} (request_id=req_{i:02d}x{'Zq8' * 6})") for i in range(failures)]
    if succeed:
        spans.append(tool_span("get_invoice", args='{"invoice_id": "R-7"}', result='{"amount": 120}',
                               trace=trace, i=failures))
    return spans


def verdicts(p: Pipeline, spans: list, trace: int) -> tuple[list[str], list[str]]:
    """The session verdict after each span, and the findings' events."""
    seen, events = [], []
    for s in spans:
        out = p.process(p.decode(request(s)))
        events += [f.event for _, f in out.findings]
        session = p.store.get(format(trace, "032x"))
        seen.append(session.verdict if session is not None else "continue")
    return seen, events


def test_a_retry_that_succeeds_after_seven_transient_failures_is_left_alone() -> None:
    assert TRANSIENT_RETRIES == 7
    p = Pipeline()
    seen, events = verdicts(p, retry_spans(7, "429 Too Many Requests", True, trace=31), 31)
    assert set(seen) == {"continue"} and events == []


def test_a_permanent_503_is_stopped_once_the_allowance_is_used_up() -> None:
    p = Pipeline()
    seen, _ = verdicts(p, retry_spans(12, "503 Service Unavailable", False, trace=32), 32)
    assert seen[:TRANSIENT_RETRIES] == ["continue"] * TRANSIENT_RETRIES
    assert seen[TRANSIENT_RETRIES] == "stop", "stopped at the first attempt beyond the allowance"


def test_the_allowance_is_configurable_and_an_ordinary_failure_has_none() -> None:
    config = load_config(None, {"detectors": {name: {"transient_retries": 2}
                                              for name in ("drift", "trajectory", "divergence", "entropy")}}, env={})
    seen, _ = verdicts(Pipeline(config), retry_spans(12, "503 Service Unavailable", False, trace=33), 33)
    assert "stop" in seen and seen.index("stop") < TRANSIENT_RETRIES
    seen, _ = verdicts(Pipeline(), retry_spans(12, "404 Not Found", False, trace=34), 34)
    assert "stop" in seen and seen.index("stop") < TRANSIENT_RETRIES


def test_the_seed_profile_has_no_allowance() -> None:
    config = load_config(None, {"detectors": {"profile": "seed"}}, env={})
    seen, _ = verdicts(Pipeline(config), retry_spans(7, "429 Too Many Requests", True, trace=35), 35)
    assert seen.index("stop") == 3, "the seed tables judge a retry as they always did"


def paced_retry_spans(failures: int, message: str, succeed: bool, trace: int) -> list:
    """As :func:`retry_spans`, with a model call before each attempt: the model chose to send the call again."""
    out = []
    for k in range(failures + succeed):
        out.append(span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
                        trace=trace, i=2 * k))
        ok = k == failures
        out.append(tool_span("get_invoice", args='{"invoice_id": "R-7"}', result='{"amount": 120}' if ok else None,
                             trace=trace, i=2 * k + 1,
                             error=None if ok else f"{message} (request_id=req_{k:02d}x{'Zq8' * 6})"))
    return out


def test_retries_the_model_chose_are_bounded_by_the_loop_window() -> None:
    """A model that sends a call failing with 503 again and again is stopped within 6 calls of the row's
    start (at its 7th attempt), not after the client retry allowance."""
    p = Pipeline()
    spans = paced_retry_spans(12, "503 Service Unavailable", False, trace=36)
    seen, _ = verdicts(p, spans, 36)
    tools = seen[1::2]  # the verdict after each attempt
    assert tools[:POLL_WAITS] == ["continue"] * POLL_WAITS
    assert tools[POLL_WAITS] == "stop"
    assert POLL_WAITS < TRANSIENT_RETRIES


@pytest.mark.parametrize("failures", [3, 4, 6])
def test_a_retry_the_model_chose_that_succeeds_within_the_window_is_left_alone(failures: int) -> None:
    p = Pipeline()
    seen, events = verdicts(p, paced_retry_spans(failures, "429 Too Many Requests", True, trace=37), 37)
    assert set(seen) == {"continue"} and events == []
