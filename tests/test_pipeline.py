"""The pipeline: byte-identical passthrough, enrichment on the triggering span, detector plug-ins."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest
from spans import attrs_of, events_of, parse, request, span, tool_span

from otelloop.config import build_config
from otelloop.detectors.base import Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import register, unregister
from otelloop.model import Finding, Step
from otelloop.pipeline import InvalidRequest, Pipeline


class EveryThirdStep(Detector):
    """A detector that lives in the tests: reports every third step of a session."""

    name: ClassVar[str] = "every_third"

    class Config(DetectorConfig):
        every: int = 3

    def new_state(self) -> list[int]:
        return [0]

    def observe(self, state: list[int], step: Step, ctx: StepContext) -> None:
        state[0] += 1
        ctx.set_attribute("test.count", state[0])
        if state[0] % self.config.every == 0:  # type: ignore[attr-defined]
            ctx.report(Finding(self.name, "otelloop.test_every_third", "info", {"test.n": state[0]}, "third"))
            ctx.vote(self.name, "nudge", "test", "please vary")


class Exploding(Detector):
    name: ClassVar[str] = "exploding"

    def new_state(self) -> None:
        return None

    def observe(self, state: None, step: Step, ctx: StepContext) -> None:
        raise RuntimeError("detector bug")


@pytest.fixture
def plugin() -> Iterator[None]:
    register(EveryThirdStep)
    register(Exploding)
    yield
    unregister("every_third")
    unregister("exploding")


def test_requests_without_steps_are_forwarded_as_their_original_bytes() -> None:
    p = Pipeline()
    data = request(span("GET /", {"http.method": "GET"}), span("db", {"db.system": "sqlite"}))
    out = p.process(p.decode(data))
    assert out.data is data and not out.modified and out.steps == 0 and out.spans == 2


def test_every_step_span_carries_the_verdict_and_other_spans_are_untouched() -> None:
    p = Pipeline()
    data = request(span("GET /", {"http.method": "GET"}), tool_span(), span("chat", {"gen_ai.operation.name": "chat"}))
    out = parse(p.process(p.decode(data)).data)
    before = parse(data)
    assert out[0] == before[0]
    assert attrs_of(out[1])["otelloop.verdict"] == "continue"
    assert attrs_of(out[2])["otelloop.verdict"] == "continue"


def test_findings_become_events_on_the_triggering_span() -> None:
    p = Pipeline()
    spans = [tool_span(trace=5, i=i) for i in range(5)]
    out = parse(p.process(p.decode(request(*spans))).data)
    names = [[n for n, _ in events_of(s)] for s in out]
    assert "otelloop.divergence_suspected" in names[3]
    assert "otelloop.divergence_suspected" not in names[0] + names[1] + names[2] + names[4]
    ev = dict(events_of(out[3]))["otelloop.divergence_suspected"]
    assert ev["otelloop.detector"] == "divergence" and ev["otelloop.severity"] == "warn"
    assert ev["otelloop.session_id"] == format(5, "032x") and ev["otelloop.agent_id"] == "agent-svc"
    assert ev["otelloop.repeat_count"] == 4
    assert {e.time_unix_nano for e in out[3].events} == {out[3].end_time_unix_nano}


def test_findings_across_requests_keep_session_state() -> None:
    p = Pipeline()
    results = [p.process(p.decode(request(tool_span(trace=9, i=i)))) for i in range(4)]
    assert [len(r.findings) for r in results][:3] == [0, 0, 0]
    assert any(f.event == "otelloop.divergence_suspected" for _, f in results[3].findings)


def test_a_detector_living_in_the_tests_plugs_in_without_other_changes(plugin: None) -> None:
    cfg = build_config({"detectors": {"every_third": {"every": 2}}}, env={})
    p = Pipeline(cfg)
    out = parse(p.process(p.decode(request(*[span("x", {"otelloop.step.kind": "llm"}, i=i) for i in range(4)]))).data)
    assert [attrs_of(s)["test.count"] for s in out] == [1, 2, 3, 4]
    assert [len([e for e in events_of(s) if e[0] == "otelloop.test_every_third"]) for s in out] == [0, 1, 0, 1]
    assert attrs_of(out[1])["otelloop.verdict"] == "nudge"
    assert p.metrics.registry.get_sample_value(
        "otelloop_findings_total", {"detector": "every_third", "finding": "test_every_third", "severity": "info",
                                    "service": "agent-svc"}) == 2


def test_a_failing_detector_loses_no_span_and_is_counted(plugin: None) -> None:
    p = Pipeline()
    data = request(*[tool_span(trace=3, i=i) for i in range(4)])
    out = p.process(p.decode(data))
    spans = parse(out.data)
    assert len(spans) == 4 and all(attrs_of(s)["otelloop.verdict"] for s in spans)
    assert any(f.detector == "divergence" for _, f in out.findings)
    assert p.metrics.registry.get_sample_value("otelloop_detector_errors_total", {"detector": "exploding"}) == 4


def test_authoritative_entropy_score_replaces_the_agents_value() -> None:
    p = Pipeline()
    spans = [tool_span(trace=4, i=i, attrs={"cognition.entropy_score": 0.99}) for i in range(5)]
    out = parse(p.process(p.decode(request(*spans))).data)
    last = out[-1]
    keys = [kv.key for kv in last.attributes]
    assert keys.count("cognition.entropy_score") == 1
    a = attrs_of(last)
    assert a["cognition.entropy_score"] == a["otelloop.entropy_score"] == 0.2


def test_invalid_bytes_are_refused_without_state_change() -> None:
    p = Pipeline()
    for bad in (b"\xff\xff\xff", b"\x0a\x05abc"):
        with pytest.raises(InvalidRequest):
            p.decode(bad)
    assert len(p.store) == 0


def test_decode_changes_no_state() -> None:
    p = Pipeline()
    p.decode(request(tool_span(trace=1)))
    assert len(p.store) == 0


def test_metrics_count_steps_tokens_cost() -> None:
    cfg = build_config({"pricing": {"m": {"input_per_mtok": 1, "output_per_mtok": 2}}}, env={})
    p = Pipeline(cfg)
    p.process(p.decode(request(span("chat m", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
                                               "gen_ai.usage.input_tokens": 1_000_000,
                                               "gen_ai.usage.output_tokens": 500_000}), tool_span())))
    get = p.metrics.registry.get_sample_value
    assert get("otelloop_steps_total", {"kind": "llm", "service": "agent-svc"}) == 1
    assert get("otelloop_steps_total", {"kind": "tool", "service": "agent-svc"}) == 1
    assert get("otelloop_tokens_total", {"direction": "input", "service": "agent-svc", "model": "m"}) == 1_000_000
    assert get("otelloop_cost_usd_total", {"service": "agent-svc", "model": "m"}) == pytest.approx(2.0)


def test_service_label_is_capped() -> None:
    p = Pipeline()
    p.metrics.service_label.cap = 3
    for n in range(6):
        p.process(p.decode(request(tool_span(trace=100 + n), service=f"svc-{n}")))
    text = __import__("prometheus_client").generate_latest(p.metrics.registry).decode()
    services = {line.split('service="')[1].split('"')[0] for line in text.splitlines()
                if line.startswith("otelloop_steps_total{")}
    assert services == {"svc-0", "svc-1", "svc-2", "other"}


def test_session_scores_feed_the_api_view() -> None:
    p = Pipeline()
    p.process(p.decode(request(*[tool_span(trace=8, i=i) for i in range(3)])))
    session = p.store.get(format(8, "032x"))
    assert session is not None and session.steps == 3 and session.entropy_score == pytest.approx(1 / 3, abs=1e-4)
