"""The agent-side verdict client against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext

from otelloop.admin import AdminAPI
from otelloop.client import Verdict, acheck_verdict, check_verdict, format_trace_id
from otelloop.pipeline import Pipeline
from tests.helpers import make_step

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
TRACE_HEX = "0af7651916cd43dd8448eb211c80319c"


class FakeOtelloop:
    """A tiny admin API: ``routes`` maps a path to (status, body); ``delay`` stalls every response."""

    def __init__(self) -> None:
        self.routes: dict[str, tuple[int, bytes]] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.delay = 0.0
        self.release = threading.Event()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.requests.append((self.path, self.headers.get("Authorization")))
                if fake.delay:
                    fake.release.wait(fake.delay)
                status, body = fake.routes.get(self.path, (404, b'{"error": "unknown session"}'))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client may have given up
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def verdict(self, session: str, body: object, status: int = 200) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.routes[f"/v1/sessions/{session}/verdict"] = (status, raw)


@pytest.fixture
def otelloop() -> Iterator[FakeOtelloop]:
    fake = FakeOtelloop()
    thread = threading.Thread(target=fake.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield fake
    fake.release.set()
    fake.server.shutdown()
    fake.server.server_close()


def test_verdict_is_returned(otelloop: FakeOtelloop) -> None:
    otelloop.verdict("sess-1", {"verdict": "nudge", "reason": "trajectory loop score 2",
                                "message": "Try a different tool."})
    verdict = check_verdict(otelloop.url, session_id="sess-1", token="s3cret")
    assert verdict == Verdict("nudge", "trajectory loop score 2", "Try a different tool.")
    assert verdict.should_nudge and not verdict.should_stop
    assert otelloop.requests == [("/v1/sessions/sess-1/verdict", "Bearer s3cret")]


@pytest.mark.parametrize("trace_id", [TRACE_ID, TRACE_HEX.upper(), "0x" + TRACE_HEX, TRACE_HEX[1:]],
                         ids=["int", "upper_hex", "0x_prefix", "short_hex"])
def test_trace_id_is_formatted_as_32_lowercase_hex(otelloop: FakeOtelloop, trace_id: int | str) -> None:
    otelloop.verdict(TRACE_HEX, {"verdict": "stop", "reason": "loop_halted", "message": ""})
    assert check_verdict(otelloop.url + "/", trace_id=trace_id).should_stop


def test_current_span_trace_id_is_the_default(otelloop: FakeOtelloop) -> None:
    otelloop.verdict(TRACE_HEX, {"verdict": "stop"})
    span = NonRecordingSpan(SpanContext(trace_id=TRACE_ID, span_id=0x00F067AA0BA902B7, is_remote=False))
    with trace.use_span(span):
        assert check_verdict(otelloop.url).verdict == "stop"


def test_no_session_and_no_trace_continues_without_a_request(otelloop: FakeOtelloop) -> None:
    verdict = check_verdict(otelloop.url)
    assert verdict.verdict == "continue" and "no session id" in verdict.reason
    assert otelloop.requests == []


def test_session_ids_are_url_quoted(otelloop: FakeOtelloop) -> None:
    otelloop.verdict("conv%2F42%20a", {"verdict": "paused"})
    assert check_verdict(otelloop.url, session_id="conv/42 a").verdict == "paused"


def test_unknown_session_continues(otelloop: FakeOtelloop) -> None:
    verdict = check_verdict(otelloop.url, session_id="never-seen")
    assert verdict.verdict == "continue" and "unknown session" in verdict.reason


@pytest.mark.parametrize("status, body", [
    (200, b"<html>proxy error</html>"),
    (200, b'["stop"]'),
    (200, b'{"verdict": "explode"}'),
    (200, b"\xff\xfe"),
    (500, b'{"verdict": "stop"}'),
], ids=["not_json", "not_an_object", "unknown_verdict", "not_utf8", "server_error"])
def test_bad_answers_continue(otelloop: FakeOtelloop, status: int, body: bytes) -> None:
    otelloop.verdict("s", body, status)
    assert check_verdict(otelloop.url, session_id="s").verdict == "continue"


def test_missing_fields_are_empty(otelloop: FakeOtelloop) -> None:
    otelloop.verdict("s", {"verdict": "nudge", "reason": 3})
    assert check_verdict(otelloop.url, session_id="s") == Verdict("nudge", "", "")


def test_server_down_continues_quickly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    verdict = check_verdict(f"http://127.0.0.1:{port}", session_id="s", timeout=0.5)
    assert verdict.verdict == "continue" and "unreachable" in verdict.reason
    assert time.monotonic() - started < 0.5


def test_slow_server_continues_within_the_timeout(otelloop: FakeOtelloop) -> None:
    otelloop.verdict("s", {"verdict": "stop"})
    otelloop.delay = 5.0
    started = time.monotonic()
    verdict = check_verdict(otelloop.url, session_id="s", timeout=0.2)
    assert verdict.verdict == "continue"
    assert time.monotonic() - started < 0.2 + 0.3


@pytest.mark.parametrize("bad", ["not-hex", "", 0, 1 << 128, -1, object()],
                         ids=["not_hex", "empty", "zero", "too_big", "negative", "object"])
def test_invalid_trace_ids_continue(bad: object) -> None:
    verdict = check_verdict("http://127.0.0.1:9", trace_id=bad)  # type: ignore[arg-type]
    assert verdict.verdict == "continue" and "not checked" in verdict.reason


def test_malformed_base_url_continues() -> None:
    assert check_verdict("no-scheme", session_id="s").verdict == "continue"


def test_format_trace_id() -> None:
    assert format_trace_id(1) == "0" * 31 + "1"
    with pytest.raises(ValueError):
        format_trace_id("xyz")


async def test_async_variant(otelloop: FakeOtelloop) -> None:
    otelloop.verdict(TRACE_HEX, {"verdict": "nudge", "message": "m"})
    span = NonRecordingSpan(SpanContext(trace_id=TRACE_ID, span_id=1, is_remote=False))
    with trace.use_span(span):  # resolved in the caller's context, not in the worker thread
        verdict = await acheck_verdict(otelloop.url)
    assert verdict == Verdict("nudge", "", "m")
    assert (await acheck_verdict(otelloop.url)).reason.startswith("otelloop verdict not checked")


async def test_against_the_real_admin_api() -> None:
    pipeline = Pipeline()
    session = pipeline.store.touch("conv/42")
    for i in range(4):  # four identical tool calls with the same result: the trajectory detector nudges
        pipeline.engine.observe(session, make_step("search_web", i=i, session="conv/42", args_hash=1,
                                                   args_text='{"q": "x"}', output_hash=7))
    runner = web.AppRunner(AdminAPI(pipeline, lambda: (True, "")).app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        verdict = await acheck_verdict(url, session_id="conv/42")
        assert verdict.verdict == "nudge" and "search_web" in verdict.message and verdict.reason
        assert (await acheck_verdict(url, session_id="other")).reason.endswith("unknown session")
    finally:
        await runner.cleanup()


def test_flush_makes_the_first_steps_verdict_known_without_waiting_for_the_batch(serve) -> None:  # type: ignore[no-untyped-def]
    """With the SDK's BatchSpanProcessor the spans wait in memory; ``flush=True`` exports them first."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    o = serve()
    provider = TracerProvider(resource=Resource.create({"service.name": "flush-agent"}))
    # a delay far longer than the test: without a flush nothing would reach otelloop while it runs
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=o.grpc, insecure=True),
                                                   schedule_delay_millis=600_000))
    tracer = provider.get_tracer("agent")
    base = f"http://{o.admin}"
    try:
        with tracer.start_as_current_span("invoke_agent") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            for _ in range(6):
                with tracer.start_as_current_span("execute_tool search_web") as sp:
                    sp.set_attribute("gen_ai.operation.name", "execute_tool")
                    sp.set_attribute("gen_ai.tool.name", "search_web")
                    sp.set_attribute("gen_ai.tool.call.arguments", '{"q": "same"}')
                    sp.set_attribute("gen_ai.tool.call.result", "nothing found")
            unflushed = check_verdict(base, timeout=5)
            flushed = check_verdict(base, timeout=5, flush=provider)
        assert unflushed.reason == "otelloop verdict unavailable: unknown session"
        assert flushed.verdict in ("nudge", "stop") and "unknown session" not in flushed.reason, flushed
    finally:
        provider.shutdown()


def test_flush_of_the_global_provider_without_an_sdk_still_asks(otelloop: FakeOtelloop) -> None:
    from otelloop.client import flush_spans

    assert "cannot be flushed" in flush_spans(object(), 1.0)
    otelloop.verdict("sess-2", {"verdict": "nudge", "reason": "r", "message": "m"})
    v = check_verdict(otelloop.url, session_id="sess-2", flush=object())
    assert (v.verdict, v.message) == ("nudge", "m") and "cannot be flushed" in v.reason
    assert otelloop.requests == [("/v1/sessions/sess-2/verdict", None)]  # asked despite the failed flush
