"""The sessions API: listing, one session, verdicts, pause/resume guarded by the admin token."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from served import BackgroundLoop, http_call
from spans import request, span, tool_span

from otelloop.config import build_config
from otelloop.service import Service

TOKEN = "admin-s3cret-token"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


@pytest.fixture
def service(caplog: pytest.LogCaptureFixture) -> Iterator[Service]:
    caplog.set_level(logging.DEBUG)
    config = build_config({"receiver": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}},
                           "admin": {"endpoint": "127.0.0.1:0", "token": TOKEN}}, env={})
    bg = BackgroundLoop()
    svc = Service(config)
    bg.run(svc.start())
    yield svc
    bg.run(svc.stop())
    bg.close()


def send(svc: Service, *spans: Any) -> None:
    with grpc.insecure_channel(svc.addresses["grpc"]) as ch:
        ch.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)(request(*spans), timeout=10)


def api(svc: Service, method: str, path: str, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    code, body = http_call(method, f"http://{svc.addresses['admin']}{path}", b"" if method == "POST" else None,
                           headers)
    try:
        return code, json.loads(body)
    except ValueError:
        return code, body.decode()


def sid(trace: int) -> str:
    return format(trace, "032x")


def test_sessions_are_listed_most_severe_first_and_filtered(service: Service) -> None:
    send(service, *[tool_span(trace=1, i=i) for i in range(6)])  # looping: entropy LOOP → nudge or worse
    send(service, tool_span("a", trace=2, i=1), tool_span("b", trace=2, i=2))  # healthy
    code, body = api(service, "GET", "/v1/sessions")
    assert code == 200 and body["total"] == 2
    first, second = body["sessions"]
    assert first["session_id"] == sid(1) and first["verdict"] in ("nudge", "stop")
    assert second["session_id"] == sid(2) and second["verdict"] == "continue"
    assert first["steps"] == 6 and first["agent"] == "agent-svc" and first["service"] == "agent-svc"
    assert first["entropy_score"] == 0.2 and first["loop_score"] >= 2.0
    # stopped at the 4th step; the two repeats after it were held (state.hold_stopped_sessions), the
    # entropy score above still counts them
    assert first["held_steps"] == 2
    # a held step raises no finding: the entropy LOOP the 5th step reached is in the score, not an alert
    assert {f["event"] for f in first["findings"]} == {"otelloop.divergence_suspected", "otelloop.intervention"}
    code, body = api(service, "GET", "/v1/sessions?verdict=continue")
    assert [s["session_id"] for s in body["sessions"]] == [sid(2)]
    assert api(service, "GET", "/v1/sessions?verdict=maybe")[0] == 400


def test_one_session_with_evidence_and_its_verdict(service: Service) -> None:
    send(service, *[tool_span(trace=3, i=i) for i in range(4)])
    code, body = api(service, "GET", f"/v1/sessions/{sid(3)}")
    assert code == 200 and body["session_id"] == sid(3)
    assert set(body["evidence"]) >= {"divergence", "entropy", "trajectory"}
    assert body["votes"]
    code, verdict = api(service, "GET", f"/v1/sessions/{sid(3)}/verdict")
    assert code == 200 and set(verdict) == {"verdict", "reason", "message"}
    assert verdict["verdict"] == body["verdict"] and verdict["message"]


@pytest.mark.parametrize("path", ["/v1/sessions/nope", "/v1/sessions/nope/verdict"])
def test_unknown_sessions_are_404(service: Service, path: str) -> None:
    assert api(service, "GET", path)[0] == 404
    assert api(service, "POST", "/v1/sessions/nope/pause", TOKEN)[0] == 404


def test_pause_and_resume_need_the_token(service: Service, caplog: pytest.LogCaptureFixture) -> None:
    send(service, span("chat", {"gen_ai.operation.name": "chat"}, trace=4))
    assert api(service, "POST", f"/v1/sessions/{sid(4)}/pause", None)[0] == 401
    assert api(service, "POST", f"/v1/sessions/{sid(4)}/pause", "wrong")[0] == 403
    assert api(service, "GET", f"/v1/sessions/{sid(4)}/verdict")[1]["verdict"] == "continue"
    code, body = api(service, "POST", f"/v1/sessions/{sid(4)}/pause", TOKEN)
    assert code == 200 and body == {"verdict": "paused"}
    assert api(service, "GET", f"/v1/sessions/{sid(4)}/verdict")[1]["verdict"] == "paused"
    send(service, span("chat", {"gen_ai.operation.name": "chat"}, trace=4))  # paused holds across steps
    assert api(service, "GET", f"/v1/sessions/{sid(4)}/verdict")[1]["verdict"] == "paused"
    assert api(service, "POST", f"/v1/sessions/{sid(4)}/resume", None)[0] == 401
    code, body = api(service, "POST", f"/v1/sessions/{sid(4)}/resume", TOKEN)
    assert code == 200 and body == {"verdict": "continue"}
    assert TOKEN not in caplog.text
    assert TOKEN not in http_call("GET", f"http://{service.addresses['admin']}/metrics")[1].decode()


def test_stop_holds_until_resume(service: Service) -> None:
    send(service, *[tool_span(trace=5, i=i) for i in range(6)])  # trajectory reaches STOP
    assert api(service, "GET", f"/v1/sessions/{sid(5)}/verdict")[1]["verdict"] == "stop"
    send(service, tool_span("different", args='{"x": 1}', result="new", trace=5, i=7))
    assert api(service, "GET", f"/v1/sessions/{sid(5)}/verdict")[1]["verdict"] == "stop"
    api(service, "POST", f"/v1/sessions/{sid(5)}/resume", TOKEN)
    assert api(service, "GET", f"/v1/sessions/{sid(5)}/verdict")[1]["verdict"] == "continue"


def test_session_gauges_by_verdict(service: Service) -> None:
    send(service, *[tool_span(trace=6, i=i) for i in range(6)])
    send(service, tool_span("a", trace=7, i=1))
    text = http_call("GET", f"http://{service.addresses['admin']}/metrics")[1].decode()
    assert 'otelloop_sessions{verdict="stop"} 1.0' in text
    assert 'otelloop_sessions{verdict="continue"} 1.0' in text
    assert "otelloop_sessions_active 2.0" in text
    assert sid(6) not in text and "search_web" not in text
