"""Bounded series: capped label values that are freed when idle, and a bound on the total series."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from spans import request, span, tool_span

from otelloop.config import build_config
from otelloop.pipeline import Pipeline
from otelloop.telemetry import OTHER, CappedLabel, Metrics


def _samples(m: Metrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_label_slot_unseen_for_the_idle_timeout_goes_to_a_new_value() -> None:
    freed = []
    label = CappedLabel(cap=2, idle_timeout=60, on_free=freed.append)
    assert label("a", 0) == "a" and label("b", 10) == "b"
    assert label("c", 30) == OTHER  # both seen within the last 60 s
    assert label("a", 50) == "a"  # a is now the most recent; b the least
    assert label("c", 69) == OTHER
    assert label("c", 70) == "c" and freed == ["b"]
    assert label("b", 71) == OTHER
    assert label("", 72) == "unknown"


def test_the_capped_families_hold_at_most_max_series() -> None:
    m = Metrics(limits=build_config({"metrics": {"max_series": 50}}, env={}).metrics)
    for s in range(30):
        for model in range(30):
            m.token_counter("input", m.service_label(f"svc-{s}", 0), m.model_label(f"m-{model}", 0), 0).inc(1)
    series = _samples(m, "otelloop_tokens_total")
    assert len(m.series) == 50
    assert len(series) == 51  # 50 + the one series that counts everything beyond the bound
    assert series[(("direction", "input"), ("model", OTHER), ("service", OTHER))] == 900 - 50
    assert sum(series.values()) == 900


def test_an_idle_series_gives_its_place_to_a_new_one_and_disappears() -> None:
    limits = build_config({"metrics": {"max_series": 2, "label_idle_timeout": "10s"}}, env={}).metrics
    m = Metrics(limits=limits)
    m.step_counter("tool", "a", 0).inc()
    m.step_counter("tool", "b", 5).inc()
    m.step_counter("tool", "c", 9).inc()  # a is idle for 9 s only: counted under other
    m.step_counter("tool", "c", 12).inc()  # a is idle for 12 s: its series goes, c gets one
    steps = _samples(m, "otelloop_steps_total")
    assert steps == {(("kind", "tool"), ("service", "b")): 1, (("kind", "tool"), ("service", OTHER)): 1,
                     (("kind", "tool"), ("service", "c")): 1}


def test_a_freed_service_loses_all_its_series_and_other_never_decreases() -> None:
    cfg = build_config({"metrics": {"max_label_values": 3, "label_idle_timeout": "1h"}}, env={})
    now = [1000.0]
    p = Pipeline(cfg, Metrics(limits=cfg.metrics), clock=lambda: now[0])

    def send(service: str, trace: int) -> None:
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt",
                "gen_ai.usage.input_tokens": 7}
        p.process(p.decode(request(tool_span(trace=trace), span("chat", chat, trace=trace), service=service)))

    for n in range(3):
        send(f"svc-{n}", n + 1)
    send("late", 10)
    other_before = _samples(p.metrics, "otelloop_steps_total")[(("kind", "tool"), ("service", OTHER))]
    now[0] += 1800
    send("svc-1", 11)
    send("svc-2", 12)
    now[0] += 1801  # svc-0 unseen for an hour; svc-1 and svc-2 for half an hour
    send("late", 13)
    steps = _samples(p.metrics, "otelloop_steps_total")
    tokens = _samples(p.metrics, "otelloop_tokens_total")
    services = {dict(k)["service"] for k in steps}
    assert services == {"svc-1", "svc-2", "late", OTHER}
    assert not any(dict(k)["service"] == "svc-0" for k in tokens)
    assert tokens[(("direction", "input"), ("model", "gpt"), ("service", "late"))] == 7
    assert steps[(("kind", "tool"), ("service", OTHER))] == other_before == 1


def test_no_created_series_are_exposed() -> None:
    m = Metrics()
    m.step_counter("tool", "svc", 0).inc()
    assert "_created" not in generate_latest(m.registry).decode()
