"""When otelloop forwards, each new alert reaches its log once: real OTel SDK agent → otelloop → sink."""

from __future__ import annotations

import json
import re
from typing import Any

from served import wait_for
from sinks import GrpcSink
from test_serve import sdk_provider


def _loop(provider: Any, calls: int) -> None:
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        for _ in range(calls):
            with tracer.start_as_current_span("execute_tool search_web") as sp:
                sp.set_attribute("gen_ai.operation.name", "execute_tool")
                sp.set_attribute("gen_ai.tool.name", "search_web")
                sp.set_attribute("gen_ai.tool.call.arguments", json.dumps({"q": "same"}))
                sp.set_attribute("gen_ai.tool.call.result", "nothing found")
    provider.force_flush()


def test_each_new_alert_is_logged_once_redacted(serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"}})
    # an agent name with a forged second log line and a key in it
    provider = sdk_provider("grpc", o.grpc, "agent\nWARNING otelloop: forged sk-proj-abcdefghijklmnopqrstuvwx1234")
    try:
        _loop(provider, 12)
        wait_for(lambda: "alert [" in o.stderr, what="an alert in the log")
        _loop(provider, 0)  # nothing new: no new line
        before = o.stderr
        _loop(provider, 12)  # a second session (new trace) loops the same way: logged again, once per kind
        wait_for(lambda: o.stderr.count("alert [") > before.count("alert ["), what="the second session's alerts")
    finally:
        provider.shutdown()
    lines = [ln for ln in o.stderr.splitlines() if "alert [" in ln]
    kinds = [(re.search(r"session=(\S+)", ln)[1], re.search(r"alert \[\w+\] (\S+)", ln)[1]) for ln in lines]  # type: ignore[index]
    assert len(kinds) == len(set(kinds)), lines  # each (session, kind) once
    assert len({s for s, _ in kinds}) == 2
    assert all(" WARNING otelloop: alert [" in ln for ln in lines)
    assert "forged" not in "".join(ln for ln in o.stderr.splitlines() if ln.startswith("WARNING"))
    assert "sk-proj-abcdefghijklmnopqrstuvwx1234" not in o.stderr
    assert all("agent=agent WARNING otelloop: forged" in ln for ln in lines)  # the newline became a space


def test_a_flood_of_alerts_is_rate_limited_and_counted() -> None:
    import logging

    from otelloop.alertlog import AlertLog
    from otelloop.model import Finding
    from tests.helpers import make_step

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("test.alertlog")
    logger.addHandler(Keep())
    sink = AlertLog(logger, per_second=0.001, burst=3)
    finding = Finding("trajectory", "otelloop.intervention", "stop", message="loop score 5")
    for i in range(10):
        sink(make_step("search_web", i=i, session=f"s{i}"), finding)
        sink(make_step("search_web", i=i, session=f"s{i}"), finding)  # the same alert again: never logged
    assert len(records) == 3
    sink._tokens = 1.0  # the bucket refilled
    sink(make_step("search_web", i=99, session="s99"), finding)
    assert records[-1].endswith("(7 more alerts not logged: rate limit)")
