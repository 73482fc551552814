"""The entropy detector: uniqueness of recent (intent, tool_call, action_status) tuples."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelloop.config import ConfigError, build_config
from otelloop.detectors.base import StepContext
from otelloop.detectors.entropy import EntropyConfig
from otelloop.model import Step
from tests.helpers import SeedRun, make_step

ALERT = "otelloop.entropy_alert"
N, W, L = "normal", "warning", "loop"


def _steps(names: str, session: str = "s1", **kw: Any) -> list[Step]:
    """One tool step per letter: ``"AAB"`` → search tools A, A, B."""
    return [make_step(name, "tool", i, session=session, **kw) for i, name in enumerate(names)]


def _severities(ctxs: list[StepContext]) -> list[str]:
    return [str(ctx.attributes["otelloop.entropy_severity"]) for ctx in ctxs]


def _scores(ctxs: list[StepContext]) -> list[float]:
    return [float(ctx.attributes["otelloop.entropy_score"]) for ctx in ctxs]  # type: ignore[arg-type]


@pytest.mark.parametrize(("config", "names", "scores", "severities"), [
    pytest.param({"window": 4}, "AAAA", [1.0, 0.5, 0.3333, 0.25], [N, N, W, W],
                 id="0.50-is-normal-0.25-is-warning"),
    pytest.param({"window": 4}, "AABB", [1.0, 0.5, 0.6667, 0.5], [N, N, N, N],
                 id="2-of-4-distinct-is-normal"),
    pytest.param({}, "AAAAB", [1.0, 0.5, 0.3333, 0.25, 0.4], [N, N, W, W, W],
                 id="4-of-5-identical-stays-warning"),
    pytest.param({}, "AAAAA", [1.0, 0.5, 0.3333, 0.25, 0.2], [N, N, W, W, L],
                 id="5-identical-is-loop-after-warning"),
    pytest.param({}, "ABCDEFG", [1.0] * 7, [N] * 7, id="all-distinct"),
    pytest.param({}, "ABAAAAA", [1.0, 1.0, 0.6667, 0.5, 0.4, 0.4, 0.2], [N, N, N, N, W, W, L],
                 id="window-slides"),
    pytest.param({"window": 1}, "AAAA", [1.0] * 4, [N] * 4, id="window-1-never-loops"),
    pytest.param({"loop_threshold": 0.5, "warning_threshold": 0.5}, "AAA", [1.0, 0.5, 0.3333], [N, N, L],
                 id="equal-thresholds-no-warning-band"),
])
def test_score_and_severity(config: dict, names: str, scores: list[float], severities: list[str]) -> None:
    ctxs = SeedRun("entropy", detectors={"entropy": config}).run(_steps(names))
    assert _scores(ctxs) == scores
    assert _severities(ctxs) == severities
    assert [bool(ctx.findings) for ctx in ctxs] == [s == L for s in severities]


@pytest.mark.parametrize(("steps", "severity"), [
    pytest.param([make_step("A", i=i, outcome=o) for i, o in enumerate(["success", "error"] * 3)], "warning",
                 id="outcome-is-part-of-tuple"),
    pytest.param([make_step("A", i=i, intent=t) for i, t in enumerate("pqpqp")], "warning",
                 id="intent-is-part-of-tuple"),
    pytest.param([make_step("A", k, i) for i, k in enumerate(["tool", "llm"] * 3)], "warning",
                 id="kind-as-default-intent"),
    pytest.param([make_step("A", i=i, intent="plan") for i in range(5)], "loop", id="same-everything-loops"),
])
def test_tuple_equality(steps: list[Step], severity: str) -> None:
    ctxs = SeedRun("entropy").run(steps)
    assert ctxs[-1].attributes["otelloop.entropy_severity"] == severity


def test_loop_event_on_every_loop_step() -> None:
    run = SeedRun("entropy")
    ctxs = run.run(_steps("AAAAAAA", intent="search", outcome="error"))
    alerts = [ctx.findings for ctx in ctxs]
    assert [len(f) for f in alerts] == [0, 0, 0, 0, 1, 1, 1]
    finding = alerts[4][0]
    assert (finding.detector, finding.event, finding.severity) == ("entropy", ALERT, "loop")
    assert finding.attributes == {
        "otelloop.entropy_score": 0.2,
        "otelloop.window_size": 5,
        "otelloop.repeated_pattern.intent": "search",
        "otelloop.repeated_pattern.tool_call": "A",
        "otelloop.repeated_pattern.action_status": "error",
        "otelloop.occurrence_count": 5,
    }
    assert finding.message


@pytest.mark.parametrize(("config", "names", "tool_call", "count", "window_size"), [
    pytest.param({"loop_threshold": 0.45}, "AAAAB", "A", 4, 5, id="most-frequent"),
    pytest.param({"window": 4, "loop_threshold": 0.6, "warning_threshold": 0.6}, "ABAB", "B", 2, 4,
                 id="tie-most-recent-B"),
    pytest.param({"window": 4, "loop_threshold": 0.6, "warning_threshold": 0.6}, "ABBA", "A", 2, 4,
                 id="tie-most-recent-A"),
    pytest.param({"loop_threshold": 0.6, "warning_threshold": 0.6}, "AA", "A", 2, 2, id="partial-window"),
])
def test_repeated_pattern(config: dict, names: str, tool_call: str, count: int, window_size: int) -> None:
    ctx = SeedRun("entropy", detectors={"entropy": config}).run(_steps(names))[-1]
    attrs = ctx.findings[0].attributes
    assert attrs["otelloop.repeated_pattern.tool_call"] == tool_call
    assert attrs["otelloop.occurrence_count"] == count
    assert attrs["otelloop.window_size"] == window_size


def test_loop_nudges_and_recovery_withdraws() -> None:
    run = SeedRun("entropy")
    verdicts = []
    for step in _steps("AAAAABCD"):
        ctx = run.step(step)
        verdicts.append((ctx.attributes["otelloop.entropy_severity"], ctx.attributes["otelloop.verdict"]))
    assert verdicts == [
        ("normal", "continue"), ("normal", "continue"), ("warning", "continue"), ("warning", "continue"),
        ("loop", "nudge"), ("warning", "continue"), ("normal", "continue"), ("normal", "continue"),
    ]


def test_nudge_vote_carries_instruction() -> None:
    run = SeedRun("entropy")
    ctx = run.run(_steps("AAAAA"))[-1]
    verdict, reason, message = ctx.votes["entropy"]
    assert (verdict, reason) == ("nudge", "entropy loop")
    assert "'A'" in message
    session = run.session("s1")
    assert (session.verdict, session.reason, session.message) == ("nudge", reason, message)


@pytest.mark.parametrize(("config", "overwrites"), [
    pytest.param({}, {"cognition.entropy_score": 0.2}, id="default-attribute"),
    pytest.param({"authoritative_attribute": "agent.entropy"}, {"agent.entropy": 0.2}, id="custom-attribute"),
    pytest.param({"authoritative_attribute": None}, {}, id="null-disables"),
])
def test_authoritative_overwrite(config: dict, overwrites: dict) -> None:
    ctx = SeedRun("entropy", detectors={"entropy": config}).run(_steps("AAAAA"))[-1]
    assert ctx.overwrites == overwrites


def test_sessions_are_independent() -> None:
    run = SeedRun("entropy")
    steps = [s for pair in zip(_steps("AAAAA", "s1"), _steps("ABCDE", "s2"), strict=True) for s in pair]
    ctxs = run.run(steps)
    assert _severities(ctxs[-2:]) == ["loop", "normal"]


@pytest.mark.parametrize(("reload", "severity", "window_size"), [
    pytest.param({"loop_threshold": 0.45}, "loop", 5, id="loop-threshold-raised"),
    pytest.param({"warning_threshold": 0.3}, "normal", 5, id="warning-threshold-lowered"),
    pytest.param({"window": 3}, "normal", 3, id="window-shrunk"),
    pytest.param({"window": 8, "loop_threshold": 0.4}, "loop", 6, id="window-grown-keeps-entries"),
])
def test_reload_applies_on_next_step(reload: dict, severity: str, window_size: int) -> None:
    run = SeedRun("entropy")
    before = run.run(_steps("AAAAB"))[-1]
    assert before.attributes["otelloop.entropy_severity"] == "warning"  # 0.4
    run.reconfigure({"entropy": reload})
    after = run.step(make_step("A", i=5))
    assert after.attributes["otelloop.entropy_severity"] == severity
    state = run.session("s1").state("entropy")
    assert len(state.window) == window_size


@pytest.mark.parametrize("section", [
    pytest.param({"loop_threshold": "high"}, id="string"),
    pytest.param({"loop_threshold": 1.5}, id="above-1"),
    pytest.param({"loop_threshold": -0.1}, id="negative"),
    pytest.param({"loop_threshold": 0.6}, id="above-default-warning"),
    pytest.param({"loop_threshold": 0.3, "warning_threshold": 0.2}, id="above-warning"),
])
def test_invalid_reload_is_rejected_naming_the_key(section: dict) -> None:
    run = SeedRun("entropy")
    run.run(_steps("AAAA"))
    with pytest.raises(ConfigError) as err:
        run.reconfigure({"entropy": section})
    assert [line.split(":")[0] for line in err.value.errors] == ["detectors.entropy.loop_threshold"]
    ctx = run.step(make_step("A", i=4))  # the settings in force stay
    assert ctx.attributes["otelloop.entropy_severity"] == "loop"


def test_invalid_window_error_matches_spec() -> None:
    with pytest.raises(ConfigError) as err:
        build_config({"detectors": {"entropy": {"window": "x"}}}, env={})
    assert err.value.errors == ['detectors.entropy.window: must be an integer >= 1, got "x"']


def test_state_stays_bounded() -> None:
    run = SeedRun("entropy")
    run.run([make_step(f"tool_{i % 7}", i=i) for i in range(1000)])
    assert len(run.session("s1").state("entropy").window) == 5


def test_summary() -> None:
    run = SeedRun("entropy")
    run.run(_steps("AAAAA"))
    assert run.engine.summaries(run.session("s1"))["entropy"] == {
        "window": [["tool", "A", "success"]] * 5, "entropy_score": 0.2, "entropy_severity": "loop",
    }


def test_config_defaults_match_spec() -> None:
    cfg = EntropyConfig()
    assert (cfg.enabled, cfg.window, cfg.loop_threshold, cfg.warning_threshold) == (True, 5, 0.25, 0.50)
    assert cfg.authoritative_attribute == "cognition.entropy_score"


@given(st.lists(st.lists(st.sampled_from("abcdefg"), min_size=0, max_size=40), max_size=50))
@settings(max_examples=200, deadline=None)
def test_the_score_is_distinct_entries_over_entries_present_to_four_places(windows: list[list[str]]) -> None:
    from otelloop.detectors import entropy

    for letters in windows:
        window = tuple((x, x, "ok", 0) for x in letters)
        expected = round(len(set(letters)) / len(letters), 4) if letters else 1.0
        assert entropy.score(window) == expected
        assert type(entropy.score(window)) is float


def test_the_score_memo_is_bounded() -> None:
    from otelloop.detectors import entropy

    for n in range(1, 120):
        for d in range(1, n + 1):
            assert entropy.score(tuple((str(i % d),) for i in range(n))) == round(d / n, 4)
    assert len(entropy._ratios) <= 4096
