"""Agents whose spans carry no content (the OTel GenAI default): counted, shown, never judged by name.

Through the real pipeline: spans become steps without arguments or results, are counted in
``otelloop_steps_unjudged_total{service}`` and in the session's ``unjudged_steps``, and get no finding; an
error is judged by its message, not by its type alone. Then end to end: an agent instrumented with the
real OpenTelemetry SDK exports to a real ``otelloop serve`` over gRPC, and the sessions API and
``/metrics`` say what happened.
"""

from __future__ import annotations

import json
from typing import Any

from console_agents import support_agent_without_content
from served import wait_for
from spans import events_of, parse, request, span, tool_span

from otelloop import progress
from otelloop.pipeline import Pipeline


def unjudged_metric(p: Pipeline, service: str = "agent-svc") -> float | None:
    return p.metrics.registry.get_sample_value("otelloop_steps_unjudged_total", {"service": service})


def test_tool_spans_without_content_are_counted_and_get_no_finding() -> None:
    p = Pipeline()
    spans = []
    for i in range(9):
        spans.append(span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
                          trace=21, i=2 * i))
        spans.append(tool_span("get_reservation_details", args=None, result=None, trace=21, i=2 * i + 1,
                               attrs={"gen_ai.tool.call.id": f"call_{i}"}))
    out = p.process(p.decode(request(*spans)))
    assert out.findings == []
    assert all(n == "otelloop.verdict" or not n.startswith("otelloop.")
               for s in parse(out.data) for n, _ in events_of(s))
    assert unjudged_metric(p) == 9
    session = p.store.get(format(21, "032x"))
    assert session is not None and session.unjudged == 9 and session.verdict == "continue"
    p.process(p.decode(request(tool_span("get_reservation_details", args='{"id": "R1"}', result='{"id": "R1"}',
                                         trace=21, i=40))))
    assert unjudged_metric(p) == 9, "a step with content is not counted"


def test_an_error_is_judged_by_its_message_not_by_its_type() -> None:
    p = Pipeline()
    typed = tool_span("charge_card", args=None, result=None, trace=22, i=1, attrs={"error.type": "ToolError"})
    described = tool_span("charge_card", args=None, result=None, trace=22, i=2, error="card declined: 402")
    steps = [step for _, step, _ in p.decode(request(typed, described)).steps]
    assert [s.outcome for s in steps] == ["error", "error"]
    assert steps[0].error_hash is None and steps[1].error_hash is not None
    state = progress.new_state()
    for step in steps:
        progress.observe(state, step)
    assert [progress.unjudged(s) for s in steps] == [True, False]


def test_a_support_agent_without_content_is_left_alone_end_to_end(serve: Any) -> None:
    """Nine different reservations read through spans that say only the tool's name (real SDK, real server)."""
    served = serve({})
    session = support_agent_without_content(served.grpc)
    wait_for(lambda: served.metric("otelloop_steps_unjudged_total", {"service": "support-agent"}) == 9,
             what="nine unjudged tool steps counted")
    code, body = served.get(f"/v1/sessions/{session}")
    assert code == 200, body
    brief = json.loads(body)
    assert brief["verdict"] == "continue" and brief["findings"] == [] and brief["unjudged_steps"] == 9
    assert not any(f"[{severity}]" in served.stderr for severity in ("warn", "loop", "stop"))
