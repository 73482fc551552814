"""The rate detector: cost per second and output tokens per second, strictly above, once each."""

from __future__ import annotations

import math

import pytest
import yaml

from otelloop.config import build_config
from otelloop.detectors.rate import RateConfig
from otelloop.model import Finding
from tests.helpers import SeedRun, make_step

MS = 1_000_000
S = 1_000_000_000
COST, TOKENS = "otelloop.cost_rate_exceeded", "otelloop.token_velocity_exceeded"


def _events(config: dict, steps: list[tuple[int, int, float, int]]) -> list[list[str]]:
    """Event names per step; a step is (start ns, end ns, cost USD, output tokens) from a common epoch."""
    run = SeedRun("rate", detectors={"rate": config})
    ctxs = run.run([make_step(f"tool_{i}", "tool", start_ns=10 * S + start, end_ns=10 * S + end,
                              cost_usd=cost, output_tokens=tokens)
                    for i, (start, end, cost, tokens) in enumerate(steps)])
    return [[f.event for f in ctx.findings] for ctx in ctxs]


@pytest.mark.parametrize(("config", "steps", "events"), [
    pytest.param({}, [(0, S, 0.10, 0)], [[]], id="cost-exactly-at-threshold-silent"),
    pytest.param({}, [(0, S, 0.1000001, 0)], [[COST]], id="cost-just-above-fires"),
    pytest.param({}, [(0, S, 0.0, 500)], [[]], id="tokens-exactly-at-threshold-silent"),
    pytest.param({}, [(0, S, 0.0, 501)], [[TOKENS]], id="tokens-just-above-fires"),
    pytest.param({}, [(0, S, 5.0, 5000)], [[COST, TOKENS]], id="both-on-one-step"),
    pytest.param({}, [(0, MS - 1, 5.0, 5000)], [[]], id="skipped-under-1ms"),
    pytest.param({}, [(0, MS, 5.0, 5000)], [[COST, TOKENS]], id="checked-at-1ms"),
    pytest.param({}, [(0, MS - 1, 5.0, 0), (MS - 1, 2 * S, 0.0, 0)], [[], [COST]],
                 id="skipped-step-still-counts"),
    pytest.param({}, [(0, S, 0.0, 0), (9 * S, 10 * S, 0.9, 0)], [[], []],
                 id="elapsed-from-session-first-start"),
    pytest.param({}, [(0, S, 0.0, 0), (9 * S, 10 * S, 1.1, 0)], [[], [COST]],
                 id="cumulative-over-session"),
    pytest.param({}, [(5 * S, 6 * S, 0.0, 0), (0, 6 * S, 0.59, 0)], [[], []],
                 id="earlier-start-extends-session"),
    pytest.param({}, [(0, S, 1.0, 1000)] * 3, [[COST, TOKENS], [], []], id="once-per-type"),
    pytest.param({}, [(0, S, 1.0, 0), (S, 2 * S, 0.0, 5000)], [[COST], [TOKENS]],
                 id="types-fire-independently"),
    pytest.param({"cost_usd_per_second": math.inf}, [(0, S, 1e9, 1000)], [[TOKENS]], id="cost-inf-disables"),
    pytest.param({"cost_usd_per_second": None}, [(0, S, 1e9, 1000)], [[TOKENS]], id="cost-null-disables"),
    pytest.param({"output_tokens_per_second": math.inf}, [(0, S, 1.0, 10**9)], [[COST]],
                 id="tokens-inf-disables"),
    pytest.param({"output_tokens_per_second": None}, [(0, S, 1.0, 10**9)], [[COST]],
                 id="tokens-null-disables"),
    pytest.param({"cost_usd_per_second": 0}, [(0, S, 0.0, 0), (S, 2 * S, 0.001, 0)], [[], [COST]],
                 id="zero-threshold-any-spend"),
])
def test_rate_thresholds(config: dict, steps: list[tuple[int, int, float, int]],
                         events: list[list[str]]) -> None:
    assert _events(config, steps) == events


def test_finding_shapes_and_no_vote() -> None:
    run = SeedRun("rate")
    ctx = run.step(make_step(start_ns=S, end_ns=3 * S, cost_usd=1.0, output_tokens=3000))
    assert [(f.detector, f.severity, f.attributes) for f in ctx.findings] == [
        ("rate", "warn", {"otelloop.cost_rate": 0.5, "otelloop.threshold": 0.1}),
        ("rate", "warn", {"otelloop.token_velocity": 1500.0, "otelloop.threshold": 500.0}),
    ]
    assert all(isinstance(f, Finding) and f.message for f in ctx.findings)
    assert ctx.votes == {}
    assert run.session("s1").verdict == "continue"


def test_once_per_type_is_per_session() -> None:
    run = SeedRun("rate")
    steps = [make_step(i=i, session=sid, cost_usd=1.0) for i in range(2) for sid in ("s1", "s2")]
    fired = [s.session for s, ctx in zip(steps, run.run(steps), strict=True) if ctx.findings]
    assert fired == ["s1", "s2"]


def test_reload_applies_from_next_step() -> None:
    run = SeedRun("rate")
    assert not run.step(make_step(i=0, cost_usd=0.04)).findings  # 0.04 / 0.5 s = 0.08 USD/s
    run.reconfigure({"rate": {"cost_usd_per_second": 0.02}})
    assert [f.event for f in run.step(make_step(i=1)).findings] == [COST]  # 0.04 / 1.5 s = 0.027 USD/s


def test_yaml_inf_disables() -> None:
    cfg = build_config(yaml.safe_load("detectors: {rate: {cost_usd_per_second: .inf}}"), env={})
    assert cfg.detectors["rate"].cost_usd_per_second == math.inf


def test_summary() -> None:
    run = SeedRun("rate")
    run.run([make_step(i=i, cost_usd=0.01, output_tokens=10) for i in range(3)])
    assert run.engine.summaries(run.session("s1"))["rate"] == {
        "cost_usd": pytest.approx(0.03), "output_tokens": 30,
        "cost_rate_exceeded": False, "token_velocity_exceeded": False,
    }


def test_config_defaults_match_spec() -> None:
    cfg = RateConfig()
    assert (cfg.enabled, cfg.cost_usd_per_second, cfg.output_tokens_per_second) == (True, 0.10, 500)
