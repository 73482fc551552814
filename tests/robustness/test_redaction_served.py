"""Credentials an agent runs stay masked everywhere a running server shows them.

An agent's shell command fails the same way again and again; the drift detector quotes the command in its
finding, its evidence and its nudge. Every credential form of ``tests/credential_forms.py`` (103 forms:
command-line password options, ``name=value`` spellings, URLs, headers, JSON- and URL-encoded text,
full-width and zero-width characters, provider token shapes, key blocks) is such a command, one session
each, sent over OTLP/gRPC to a real ``otelloop serve`` in detect-only mode. The figure it must hold: none
of the 103 forms leaks (not the secret, nor any 8-character piece of a long one) through ``/v1/sessions``,
``/v1/sessions/{id}``, ``/v1/sessions/{id}/verdict``, ``/v1/alerts``, the ``/v1/events`` stream or the
server's stderr log. Before redaction read decoded views and knew these forms, 48 of the 103 leaked.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
from typing import Any

import grpc
from credential_forms import SECRET_FORMS, leaks
from served import http_call, wait_for
from spans import request, tool_span

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
FAILURES = 4  # the drift detector's test-fail loop holds from the third identical failure


def sid(trace: int) -> str:
    return format(trace, "032x")


class EventLog:
    """The raw ``/v1/events`` stream, read on a thread until closed."""

    def __init__(self, admin: str) -> None:
        self.conn = http.client.HTTPConnection(admin, timeout=60)
        self.conn.request("GET", "/v1/events")
        self.response = self.conn.getresponse()
        assert self.response.status == 200
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for raw in self.response:
                self.lines.append(raw.decode())
        except (OSError, ValueError, AttributeError, http.client.HTTPException):  # closed by the test
            pass

    def findings_of(self, session: str) -> list[str]:
        return [line for line in list(self.lines) if line.startswith("data: ") and f'"session_id":"{session}"' in line
                and '"type":"finding"' in line]

    def close(self) -> None:
        with contextlib.suppress(OSError):  # ends the reading thread's recv; close() alone would not
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        self.conn.close()


def export(target: str, data: bytes) -> None:
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        channel.unary_unary(EXPORT)(data, timeout=60)


def get(served: Any, path: str) -> str:
    code, body = http_call("GET", f"http://{served.admin}{path}")
    assert code == 200, (path, code, body[:200])
    return body.decode()


def test_no_credential_form_leaks_through_the_api_the_stream_or_the_log(serve: Any) -> None:
    o = serve()
    stream = EventLog(o.admin)
    wait_for(lambda: o.metric("otelloop_event_stream_clients") == 1, what="stream client counted")
    spans = []
    for trace, (_, text, _) in enumerate(SECRET_FORMS, start=1):
        for i in range(FAILURES):
            spans.append(tool_span("bash", args=json.dumps({"command": text}), result=None,
                                   error="exit status 1: access denied", trace=trace, i=i))
    export(o.grpc, request(*spans))
    traces = range(1, len(SECRET_FORMS) + 1)
    wait_for(lambda: all(stream.findings_of(sid(t)) for t in traces), timeout=60,
             what="a finding of every session on the stream")

    listed: dict[str, str] = {}  # each session's own entry in the listing and in the alerts
    for offset in range(0, len(SECRET_FORMS), 50):
        for entry in json.loads(get(o, f"/v1/sessions?limit=50&offset={offset}"))["sessions"]:
            listed[entry["session_id"]] = json.dumps(entry)
    for entry in json.loads(get(o, "/v1/alerts?limit=1000"))["alerts"]:
        listed[entry["session_id"]] += json.dumps(entry)
    leaked: dict[str, list[str]] = {}
    quoted = 0
    log = o.stderr
    for trace, (form, _, secrets) in enumerate(SECRET_FORMS, start=1):
        session = sid(trace)
        detail = get(o, f"/v1/sessions/{session}")
        if "drift test_fail_loop" in detail:
            quoted += 1
        verdict = get(o, f"/v1/sessions/{session}/verdict")
        events = "\n".join(stream.findings_of(session))
        log_lines = "\n".join(line for line in log.splitlines() if session in line)
        for where, text in (("/v1/sessions, /v1/alerts", listed[session]), ("/v1/sessions/{id}", detail),
                            ("/v1/sessions/{id}/verdict", verdict), ("/v1/events", events), ("stderr", log_lines)):
            if leaks(secrets, text):
                leaked.setdefault(form, []).append(where)
    stream.close()
    assert quoted == len(SECRET_FORMS), f"only {quoted} sessions quote their command"
    assert "***" in log
    assert leaked == {}, f"{len(leaked)} of {len(SECRET_FORMS)} credential forms leak: {leaked}"
