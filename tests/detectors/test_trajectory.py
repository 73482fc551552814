"""The trajectory detector: the four loop types, the score tables, events, votes, reloads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from otelloop import similarity
from otelloop.config import ConfigError, build_config
from otelloop.model import Step
from tests.helpers import SeedRun, make_step

OFF = {"similarity": "off"}


def call(i: int, name: str, args: int | None = 1, output: int | None = None, **kw: Any) -> Step:
    """Tool step ``i`` calling ``name`` with args hash ``args`` and output hash ``output``."""
    kw.setdefault("args_text", f'{{"arg": {args}}}')
    kw.setdefault("outcome", "empty" if output is None else "success")
    return make_step(name, i=i, args_hash=args, output_hash=output, **kw)


def identical(n: int) -> list[Step]:
    return [call(i, "search_web", args=1, output=7) for i in range(n)]


def alternating(n: int, changing: bool) -> list[Step]:
    """A/B alternation; outputs absent, or a new output every step."""
    return [call(i, "AB"[i % 2], args=i % 2, output=100 + i if changing else None) for i in range(n)]


def two_agents_frozen_page(n: int) -> list[Step]:
    """A planner and an executor take turns on the same browser tool while the page never changes."""
    return [call(i, "browser", args=i % 2, agent=("planner", "executor")[i % 2], state_hash="page-1")
            for i in range(n)]


def frozen_result(n: int) -> list[Step]:
    """Different tools one after another, all returning the same result."""
    return [call(i, f"tool_{i}", args=i, output=42) for i in range(n)]


def recovery() -> list[Step]:
    """Three identical calls (nudge), then steps that make progress."""
    return identical(3) + [call(3 + i, f"step_{i}", args=10 + i, output=200 + i) for i in range(4)]


def two_test_runs() -> list[Step]:
    return [call(i, "run_tests", args=5, output=9, args_text='{"command": "pytest -q"}') for i in range(2)]


@dataclass
class Table:
    steps: list[Step]
    scores: list[float]
    levels: str  # one letter per step: o(bserve), n(udge), s(top)
    config: dict[str, Any] = field(default_factory=dict)
    types: dict[int, list[str]] = field(default_factory=dict)  # step index -> loop types of its event


TABLES = {
    "identical_off": Table(identical(6), [0, 0, 2.0, 4.0, 5.0, 5.0], "oonsss", OFF,
                           {2: ["stutter"], 3: ["stutter"]}),
    "identical_lexical": Table(identical(6), [0, 0, 2.0, 5.0, 5.0, 5.0], "oonsss", {},
                               {2: ["stutter"], 3: ["stutter", "semantic_repeat"]}),
    "alternation_without_results": Table(alternating(8, changing=False), [0, 0, 0, 0, 1.0, 2.5, 4.0, 5.0],
                                         "ooooonss", OFF, {5: ["ping_pong"], 6: ["ping_pong"]}),
    "alternation_with_changing_results": Table(alternating(8, changing=True), [0] * 8, "o" * 8, OFF),
    "two_agents_frozen_page": Table(two_agents_frozen_page(7), [0, 0.166667, 0.5, 1.0, 2.5, 4.5, 5.0],
                                    "oooonss", OFF,
                                    {4: ["phantom_progress", "ping_pong"],
                                     5: ["phantom_progress", "ping_pong"]}),
    "phantom_over_distinct_tools": Table(frozen_result(8), [0, 0.166667, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0],
                                         "ooooonns", OFF, {5: ["phantom_progress"], 7: ["phantom_progress"]}),
    "recovery_decay": Table(recovery(), [0, 0, 2.0, 1.0, 0.5, 0.25, 0.125], "oonoooo", OFF, {2: ["stutter"]}),
    "two_identical_test_runs": Table(two_test_runs(), [0, 0], "oo"),
}
LEVEL = {"o": "observe", "n": "nudge", "s": "stop"}


@pytest.mark.parametrize("table", TABLES.values(), ids=TABLES.keys())
def test_score_table(table: Table) -> None:
    run = SeedRun("trajectory", detectors={"trajectory": table.config})
    for i, (step, score, level) in enumerate(zip(table.steps, table.scores, table.levels, strict=True)):
        ctx = run.step(step)
        assert ctx.attributes["otelloop.loop_score"] == pytest.approx(score, abs=1e-6), f"step {i + 1}"
        assert ctx.attributes["otelloop.intervention"] == LEVEL[level], f"step {i + 1}"
        events = [f for f in ctx.findings if f.event == "otelloop.intervention"]
        if i in table.types:
            assert len(events) == 1, f"step {i + 1}"
            assert events[0].attributes["otelloop.loop_types"] == table.types[i], f"step {i + 1}"
        else:
            assert events == [], f"step {i + 1}: the event fires only when the level rises"


def test_intervention_event_attributes() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    ctxs = run.run(identical(4))
    nudge, stop = ctxs[2].findings[0], ctxs[3].findings[0]
    assert (nudge.detector, nudge.severity) == ("trajectory", "warn")
    assert nudge.attributes["otelloop.action"] == "nudge"
    assert (stop.severity, stop.attributes["otelloop.action"]) == ("stop", "stop")
    assert nudge.attributes["otelloop.loop_score"] == 2.0
    message = nudge.attributes["otelloop.nudge_message"]
    assert isinstance(message, str) and "search_web" in message and len(message) <= 500
    assert nudge.message  # the human-readable line


def test_nudge_messages_name_what_repeats() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    pingpong = run.run(alternating(6, changing=False))[-1]
    assert "A → B" in pingpong.findings[0].attributes["otelloop.nudge_message"]
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    phantom = run.run(frozen_result(6))[-1]
    assert "unchanged" in phantom.findings[0].attributes["otelloop.nudge_message"]


def test_votes_follow_the_level_and_stop_holds() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    run.run(identical(3))
    session = run.session()
    assert session.verdict == "nudge"
    assert "search_web" in session.message and "stutter" in session.reason
    run.step(call(3, "other", args=2, output=3))  # recovery: 1.0, observe, the nudge is withdrawn
    assert session.verdict == "continue"
    run.run([call(4 + i, "search_web", args=1, output=7) for i in range(4)])
    assert session.verdict == "stop"
    for i in range(6):  # the score decays below the thresholds; stop holds until an operator resumes
        run.step(call(10 + i, f"progress_{i}", args=20 + i, output=300 + i))
    assert run.session().state("trajectory").level == "observe"
    assert session.verdict == "stop"


def test_a_new_episode_after_recovery_alerts_again() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    steps = recovery() + [call(20 + i, "read_file", args=3, output=1) for i in range(3)]
    events = [i for i, ctx in enumerate(run.run(steps)) if ctx.findings]
    assert events == [2, 9]


def test_non_tool_steps_are_ignored() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    for i, step in enumerate(identical(3)):
        llm = run.step(make_step("chat gpt-4o", kind="llm", i=2 * i))
        assert "otelloop.loop_score" not in llm.attributes
        ctx = run.step(step)
    assert ctx.attributes["otelloop.loop_score"] == 2.0  # the llm steps did not break the stutter
    llm = run.step(make_step("chat gpt-4o", kind="llm", i=99))
    assert "trajectory" not in llm.votes and run.session().verdict == "nudge"  # vote kept


def test_plain_repetition_is_not_ping_pong() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": {**OFF, "weights": {"stutter": 0}}})
    ctxs = run.run(identical(8))
    assert all(ctx.attributes["otelloop.loop_score"] == 0 for ctx in ctxs)


def test_ping_pong_uses_tool_names_with_one_agent() -> None:
    # The same tool with alternating arguments over a frozen page: phantom progress only, no ping-pong.
    steps = [call(i, "browser", args=i % 2, state_hash="page-1") for i in range(6)]
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    run.run(steps)
    assert run.session().state("trajectory").types == ("phantom_progress",)


def test_ping_pong_with_a_single_state_hash_is_still_detected() -> None:
    steps = alternating(6, changing=False)
    steps[4].state_hash = "only-one"
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    assert [c.attributes["otelloop.loop_score"] for c in run.run(steps)][4:] == [1.0, 2.5]


def test_ping_pong_over_repeating_states_is_detected() -> None:
    # A and B each return their own constant result: the states alternate, they do not all differ.
    steps = [call(i, "AB"[i % 2], args=i % 2, output=i % 2) for i in range(6)]
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    assert [c.attributes["otelloop.loop_score"] for c in run.run(steps)][4:] == [1.0, 2.5]


def test_ping_pong_of_three() -> None:
    steps = [call(i, "ABC"[i % 3], args=i % 3) for i in range(9)]
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    scores = [c.attributes["otelloop.loop_score"] for c in run.run(steps)]
    assert scores == [0, 0, 0, 0, 0, 1.0, 2.0, 3.0, 4.5]


def queries(*texts: str, outcome: str = "empty") -> list[Step]:
    return [make_step("search_web", i=i, args_hash=100 + i, args_text=f'{{"query": "{t}"}}', outcome=outcome)
            for i, t in enumerate(texts)]


def test_lexical_semantic_repeat_catches_reworded_queries() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": {}})
    ctxs = run.run(queries("weather Paris", "Paris weather", "weather in Paris", "in Paris weather"))
    assert [c.attributes["otelloop.loop_score"] for c in ctxs[:3]] == [0, 0, 0]
    state = run.session().state("trajectory")
    assert state.types == ("semantic_repeat",)
    added = ctxs[3].attributes["otelloop.loop_score"]
    assert 1.5 * 0.85 <= added < 1.5  # weight × mean similarity of the three matches


def test_reading_different_files_is_not_a_semantic_repeat() -> None:
    paths = ["src/otelloop/config.py", "src/otelloop/state.py", "src/otelloop/model.py", "tests/helpers.py",
             "README.md"]
    steps = [make_step("read_file", i=i, args_hash=i, args_text=f'{{"path": "{p}"}}', output_hash=50 + i)
             for i, p in enumerate(paths)]
    run = SeedRun("trajectory", detectors={"trajectory": {}})
    assert all(c.attributes["otelloop.loop_score"] == 0 for c in run.run(steps))


def test_negated_near_duplicate_is_penalised() -> None:
    base = queries("python release date", "python release date", "python release date")
    # Both differ from the base by one extra word (cosine 0.93); only the negated one is penalised.
    negated = queries("not python release date")[0]
    reworded = queries("python 3 release date")[0]
    run = SeedRun("trajectory", detectors={"trajectory": {}})
    run.run(base)
    assert run.step(negated).attributes["otelloop.loop_score"] == 0
    run = SeedRun("trajectory", detectors={"trajectory": {}})
    run.run(base)
    assert run.step(reworded).attributes["otelloop.loop_score"] > 0


def test_similarity_off_never_reports_semantic_repeat() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": {**OFF, "weights": {"stutter": 0}}})
    assert all(c.attributes["otelloop.loop_score"] == 0 for c in run.run(identical(6)))


def test_state_is_bounded() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": {}})
    long_args = "x" * 10_000
    for i in range(300):
        run.step(make_step(f"tool_{i % 7}", i=i, args_hash=i, args_text=long_args, output_hash=i))
    state = run.session().state("trajectory")
    assert len(state.history) == 10
    assert all(len(e.descriptor) < 250 for e in state.history)


def test_reload_applies_thresholds_and_history_size() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    run.run(alternating(6, changing=False))
    run.reconfigure({"trajectory": {**OFF, "history": 3, "nudge_threshold": 4.5, "stop_threshold": 4.9}})
    ctx = run.step(call(6, "A", args=0))
    state = run.session().state("trajectory")
    assert len(state.history) == 3 and [e.name for e in state.history] == ["A", "B", "A"]
    # History 3 is too short for ping-pong: the score decays from 2.5 and the level follows new thresholds.
    assert ctx.attributes["otelloop.loop_score"] == 1.25
    assert ctx.attributes["otelloop.intervention"] == "observe"
    run.reconfigure({"trajectory": {"history": 10}})
    run.run([call(7 + i, "search_web", args=1) for i in range(3)])
    assert len(run.session().state("trajectory").history) == 6  # grows again up to the new size


def test_switching_similarity_on_mid_session() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": {**OFF, "weights": {"stutter": 0}}})
    run.run(identical(3))
    run.reconfigure({"trajectory": {"weights": {"stutter": 0}}})
    ctxs = run.run([call(3 + i, "search_web", args=1, output=7) for i in range(4)])
    # Steps recorded while similarity was off have no descriptor; repeats count from the switch on.
    assert [c.attributes["otelloop.loop_score"] for c in ctxs][:3] == [0, 0, 0]
    assert ctxs[3].attributes["otelloop.loop_score"] == 1.5


def test_summary() -> None:
    run = SeedRun("trajectory", detectors={"trajectory": OFF})
    run.run(identical(3))
    summary = run.engine.summaries(run.session())["trajectory"]
    assert summary["loop_score"] == 2.0 and summary["intervention"] == "nudge"
    assert summary["loop_types"] == ["stutter"] and "search_web" in summary["nudge_message"]


def test_config_defaults() -> None:
    """The seed profile keeps the strict numbers; the default profile weighs no-progress more."""
    default = build_config({}, env={}).detector("trajectory")
    assert (default.progress_aware, default.min_repeats, default.weights.phantom_progress) == (True, 4, 1.0)
    tuned = build_config({"detectors": {"trajectory": {"weights": {"stutter": 3.0}}}}, env={}).detector("trajectory")
    assert (tuned.weights.stutter, tuned.weights.phantom_progress) == (3.0, 1.0)
    seed_tuned = build_config({"detectors": {"profile": "seed", "trajectory": {"weights": {"stutter": 3.0}}}},
                              env={}).detector("trajectory")
    assert (seed_tuned.weights.stutter, seed_tuned.weights.phantom_progress) == (3.0, 0.5)
    cfg = build_config({"detectors": {"profile": "seed"}}, env={}).detector("trajectory")
    assert (cfg.nudge_threshold, cfg.stop_threshold, cfg.decay) == (2.0, 3.0, 0.5)
    assert (cfg.max_score, cfg.history) == (5.0, 10)
    assert (cfg.similarity, cfg.similarity_threshold) == ("lexical", 0.85)
    assert cfg.weights.model_dump() == {"stutter": 2.0, "semantic_repeat": 1.5, "phantom_progress": 0.5,
                                        "ping_pong": 1.5}


@pytest.mark.parametrize("section, expected", [
    ({"stop_threshold": 1.0}, "detectors.trajectory.stop_threshold: must be >= nudge_threshold (2)"),
    ({"history": 0}, "detectors.trajectory.history: must be an integer >= 1"),
    ({"similarity": "fuzzy"}, "detectors.trajectory.similarity: must be one of"),
    ({"weights": {"loops": 1}}, "detectors.trajectory.weights.loops: unknown key"),
], ids=["stop_below_nudge", "history_zero", "unknown_backend", "unknown_weight"])
def test_config_errors_name_the_key(section: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config({"detectors": {"trajectory": section}}, env={})
    assert any(line.startswith(expected) for line in err.value.errors), err.value.errors


def test_embedding_without_the_extra_fails_at_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(similarity, "EMBEDDING_MODULES", ("otelloop_no_such_module",))
    with pytest.raises(ConfigError) as err:
        build_config({"detectors": {"trajectory": {"similarity": "embedding"}}}, env={})
    (line,) = err.value.errors
    assert line.startswith("detectors.trajectory.similarity:")
    assert "pip install 'otelloop[semantic]'" in line
