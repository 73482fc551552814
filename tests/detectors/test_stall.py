"""The ``stall`` detector: cycles, iterations, budgets, stall signals and ``loop_halted``."""

from __future__ import annotations

from typing import Any

import pytest

from otelloop.detectors.base import StepContext
from otelloop.detectors.stall import MAX_EDGES, MAX_NODES, MAX_WRITES, StallState, strongly_connected
from otelloop.model import Step
from tests.helpers import SeedRun, make_step

MINUTE_NS = 60 * 1_000_000_000


def turns(*nodes: str, **fields: list[Any]) -> list[Step]:
    """One system step per node name, one second apart; ``fields`` give per-turn Step values."""
    return [make_step(node, kind="system", i=i, **{k: v[i] for k, v in fields.items()})
            for i, node in enumerate(nodes)]


def halts(ctx: StepContext) -> list[str]:
    return [f.attributes["otelloop.halt_reason"] for f in ctx.findings if f.event == "otelloop.loop_halted"]


def run_halts(steps: list[Step], **cfg: Any) -> list[list[str]]:
    run = SeedRun("stall", detectors={"stall": cfg} if cfg else None)
    return [halts(ctx) for ctx in run.run(steps)]


def cycle_badges(contexts: list[StepContext]) -> list[tuple[str, int] | None]:
    out: list[tuple[str, int] | None] = []
    for ctx in contexts:
        attrs = ctx.attributes
        out.append((attrs["otelloop.cycle_id"], attrs["otelloop.loop_iteration"])  # type: ignore[arg-type]
                   if "otelloop.cycle_id" in attrs else None)
    return out


# --- cycles and iterations ----------------------------------------------------------------------------

@pytest.mark.parametrize(("nodes", "expected"), [
    pytest.param("planner coder planner coder planner coder",
                 [None, None, ("coder,planner", 1), ("coder,planner", 1), ("coder,planner", 2),
                  ("coder,planner", 2)], id="planner-coder"),
    pytest.param("start planner coder planner coder planner",
                 [None, None, None, ("coder,planner", 1), ("coder,planner", 1), ("coder,planner", 2)],
                 id="entry-node-outside-cycle"),
    pytest.param("planner coder reviewer coder reviewer planner",
                 [None, None, None, ("coder,reviewer", 1), ("coder,reviewer", 1),
                  ("coder,planner,reviewer", 1)], id="cycle-grows-anchor-first-entered"),
    pytest.param("solo solo solo", [None, ("solo", 1), ("solo", 2)], id="self-loop"),
    pytest.param("a b c", [None, None, None], id="chain-no-cycle"),
])
def test_cycle_id_and_iterations(nodes: str, expected: list[tuple[str, int] | None]) -> None:
    run = SeedRun("stall")
    assert cycle_badges(run.run(turns(*nodes.split()))) == expected


def test_node_attribute_wins_over_span_name() -> None:
    run = SeedRun("stall")
    steps = [make_step("invoke_agent", kind="system", i=i, node=node)
             for i, node in enumerate(["planner", "coder", "planner"])]
    assert cycle_badges(run.run(steps))[-1] == ("coder,planner", 1)


def test_tool_and_llm_steps_are_not_turns() -> None:
    run = SeedRun("stall")
    steps = [make_step("planner", kind="system", i=0), make_step("search", i=1),
             make_step("gpt", kind="llm", i=2), make_step("coder", kind="system", i=3)]
    contexts = run.run(steps)
    assert cycle_badges(contexts) == [None] * 4
    graph = run.session().state("stall").graph
    assert graph.edges == {(0, 1)}


@pytest.mark.parametrize(("child_start_s", "child_end_s", "expected_turns"), [
    pytest.param(1, 2, 1, id="nested-child-same-turn"),
    pytest.param(0, 10, 2, id="identical-interval-is-a-new-turn"),
    pytest.param(11, 12, 2, id="disjoint-is-a-new-turn"),
])
def test_nested_spans_of_a_node_are_one_turn(child_start_s: int, child_end_s: int, expected_turns: int) -> None:
    second = 1_000_000_000
    parent = make_step("planner", kind="system", i=0, end_ns=make_step(i=10).start_ns)
    child = make_step("planner", kind="system", start_ns=parent.start_ns + child_start_s * second,
                      end_ns=parent.start_ns + child_end_s * second)
    run = SeedRun("stall")
    run.run([parent, child])
    graph = run.session().state("stall").graph
    assert graph.nodes["planner"].turns == expected_turns
    assert ((0, 0) in graph.edges) == (expected_turns == 2)


def test_strongly_connected_components() -> None:
    components = strongly_connected(5, [(0, 1), (1, 2), (2, 0), (2, 3), (4, 4)])
    assert sorted(sorted(c) for c in components) == [[0, 1, 2], [3], [4]]


# --- budgets ---------------------------------------------------------------------------------------

def test_turn_budget_fires_at_the_seventh_turn_once() -> None:
    run = SeedRun("stall")
    contexts = run.run(turns(*["planner", "coder"] * 8))
    fired = [i for i, ctx in enumerate(contexts) if halts(ctx)]
    assert fired == [12]  # planner's 7th turn; coder's 7th is the same cycle and reason
    finding = contexts[12].findings[0]
    assert finding.severity == "stop"
    assert finding.attributes["otelloop.budget"] == "max_turns_per_node"
    assert finding.attributes["otelloop.cycle_id"] == "coder,planner"
    assert finding.attributes["otelloop.loop_iteration"] == 6


@pytest.mark.parametrize(("cfg", "steps", "fires_at", "budget", "detail"), [
    pytest.param({"max_turns_per_node": None}, turns(*["planner", "coder"] * 10), 18, "max_cycle_iterations",
                 "loop coder,planner reached iteration 9, over max_cycle_iterations=8", id="ninth-iteration"),
    pytest.param({"max_cycle_iterations": 3, "max_turns_per_node": None}, turns(*["a", "b"] * 5), 8,
                 "max_cycle_iterations", "loop a,b reached iteration 4, over max_cycle_iterations=3",
                 id="configured-iterations"),
    pytest.param({}, [make_step("planner", kind="system", end_ns=make_step().start_ns + 11 * MINUTE_NS)], 0,
                 "turn_timeout", "a turn of node 'planner' lasted 660s, over turn_timeout=600",
                 id="eleven-minute-turn"),
    pytest.param({"max_node_runtime": "1s"}, turns("a", "b", "a", "b", "a"), 4, "max_node_runtime",
                 "node 'a' ran 2s, over max_node_runtime=1", id="node-runtime"),
    pytest.param({"max_cycle_runtime": "2s"}, turns("a", "b", "a", "b", "a"), 4, "max_cycle_runtime",
                 "loop a,b ran 2s, over max_cycle_runtime=2", id="cycle-runtime"),
    pytest.param({}, turns(*["planner", "coder"] * 7), 12, "max_turns_per_node",
                 "node 'planner' took 7 turns, over max_turns_per_node=6", id="seventh-turn"),
])
def test_budgets(cfg: dict[str, Any], steps: list[Step], fires_at: int, budget: str, detail: str) -> None:
    """Each budget fires once, where it is exceeded, and its message says what exceeded it."""
    run = SeedRun("stall", detectors={"stall": cfg})
    contexts = run.run(steps)
    fired = [(i, f.attributes["otelloop.budget"]) for i, ctx in enumerate(contexts) for f in ctx.findings]
    assert fired == [(fires_at, budget)]
    assert contexts[fires_at].findings[0].message.endswith(f"budget_exceeded: {detail}")


def test_ten_minute_turn_is_within_budget() -> None:
    step = make_step("planner", kind="system", end_ns=make_step().start_ns + 10 * MINUTE_NS)
    assert run_halts([step]) == [[]]


def test_cycle_cost_counts_the_work_done_during_its_turns() -> None:
    steps = []
    for i, node in enumerate(["planner", "coder", "planner", "coder"]):
        steps.append(make_step(node, kind="system", i=2 * i))
        steps.append(make_step("gpt", kind="llm", i=2 * i + 1, cost_usd=0.4))
    run = SeedRun("stall", detectors={"stall": {"max_cycle_cost_usd": 1.0}})
    contexts = run.run(steps)
    # budgets are judged at turns: the cycle exists from the third turn (0.8 USD spent by then);
    # at the fourth its nodes have spent 1.2
    assert [i for i, ctx in enumerate(contexts) if halts(ctx)] == [6]
    assert contexts[6].findings[0].message.endswith("loop coder,planner cost 1.2 USD, over max_cycle_cost_usd=1")


def test_disabled_budgets_do_not_fire() -> None:
    steps = turns(*["planner", "coder"] * 10)
    assert not any(run_halts(steps, max_turns_per_node=None, max_cycle_iterations=None))


# --- stall signals -----------------------------------------------------------------------------------

H = "stalled"
O = "oscillating"  # noqa: E741  (H, O and E spell the signals in the tables below)
E = "repeated_error"


@pytest.mark.parametrize(("field", "values", "expected"), [
    pytest.param("output_hash", [7, 7, 7], [[], [], [H]], id="same-output-3x"),
    pytest.param("output_hash", [7, 7, None, 7], [[], [], [], []], id="absent-output-breaks-run"),
    pytest.param("output_hash", [None] * 5, [[]] * 5, id="no-outputs-no-signal"),
    pytest.param("output_hash", [1, 2, 1, 2], [[], [], [], [O]], id="a-b-a-b-oscillates"),
    pytest.param("output_hash", [1, 1, 2, 2], [[]] * 4, id="a-a-b-b-quiet"),
    pytest.param("output_hash", [1, 2, 3, 4, 5], [[]] * 5, id="changing-outputs-quiet"),
    pytest.param("output_hash", [7, 7, 7, 7, 7], [[], [], [H], [], []], id="stalled-once"),
    pytest.param("diff_hash", ["d1", "d1"], [[], [H]], id="same-diff-2x"),
    pytest.param("diff_hash", ["d1", None, "d1"], [[], [], []], id="absent-diff-is-no-signal"),
    pytest.param("diff_hash", [None, None, None], [[], [], []], id="no-diffs-no-signal"),
    pytest.param("diff_hash", ["d1", "d2", "d3"], [[], [], []], id="changing-diffs-quiet"),
    pytest.param("failure_signature", ["f", "f", "f"], [[], [], [E]], id="same-failure-3x"),
    pytest.param("failure_signature", ["f", "g", "f"], [[], [], []], id="different-failures-quiet"),
    pytest.param("failure_signature", ["f", "f", None, "f"], [[]] * 4, id="absent-failure-breaks-run"),
    pytest.param("failing_tests", [5, 6, 6], [[], [], [E]], id="failing-5-6-6"),
    pytest.param("failing_tests", [5, 5, 5], [[], [], [E]], id="failing-5-5-5"),
    pytest.param("failing_tests", [5, 4, 3], [[], [], []], id="failing-5-4-3-progress"),
    pytest.param("failing_tests", [5, 6, 5], [[], [], []], id="failing-went-down-last"),
    pytest.param("failing_tests", [0, 0, 0], [[], [], []], id="all-passing"),
    pytest.param("failing_tests", [5, None, 6, 6], [[]] * 4, id="unreported-count-breaks-run"),
])
def test_stall_signals(field: str, values: list[Any], expected: list[list[str]]) -> None:
    # every turn is the same node: a self-loop, well within the turn budget
    assert run_halts(turns(*["coder"] * len(values), **{field: values})) == expected


def test_error_signature_of_a_failed_turn_is_its_failure() -> None:
    steps = turns("coder", "coder", "coder", outcome=["error"] * 3, error_signature=["e1"] * 3)
    assert run_halts(steps) == [[], [], [E]]


def test_error_signature_of_a_successful_turn_is_ignored() -> None:
    steps = turns("coder", "coder", "coder", error_signature=["e1"] * 3)
    assert run_halts(steps) == [[], [], []]


def test_signals_are_per_node() -> None:
    steps = turns("planner", "coder", "planner", "coder", "planner", output_hash=[7, 7, 8, 7, 9])
    assert run_halts(steps) == [[]] * 5


def _write(at_s: float, content: int) -> Step:
    start = make_step().start_ns + int(at_s * 1e9)
    return make_step("Write", start_ns=start, end_ns=start + 100_000_000, tool_class="write",
                     file_path="/w/a.py", content_hash=content)


@pytest.mark.parametrize(("writes", "expected"), [
    pytest.param([5, 5], [[], [H]], id="same-write-each-turn"),
    pytest.param([5, 6], [[], []], id="different-writes"),
    pytest.param([5, None], [[], []], id="turn-without-writes-is-no-signal"),
])
def test_diff_derived_from_writes_inside_the_turn(writes: list[int | None], expected: list[list[str]]) -> None:
    steps = []
    for i, content in enumerate(writes):
        if content is not None:
            steps.append(_write(i + 0.1, content))  # a tool step inside the turn, reported before it
        steps.append(make_step("coder", kind="system", i=i))
    results = [r for r, s in zip(run_halts(steps), steps, strict=True) if s.kind == "system"]
    assert results == expected


def test_progress_diff_hash_wins_over_derived_writes() -> None:
    steps = [_write(0.1, 5), make_step("coder", kind="system", i=0, diff_hash="p1"),
             _write(1.1, 5), make_step("coder", kind="system", i=1, diff_hash="p2")]
    assert run_halts(steps) == [[], [], [], []]


# --- the halt event and the verdict -------------------------------------------------------------------

def test_halt_event_attributes() -> None:
    steps = turns("planner", "coder", "planner", "coder", "planner", "coder",
                  output_hash=[1, 255, 2, 255, 3, 255], diff_hash=["d1", "d2", "d3", None, None, "d4"],
                  failure_signature=[None, "f1", None, "f2", None, "f3"])
    run = SeedRun("stall")
    ctx = run.run(steps)[-1]
    (finding,) = ctx.findings
    assert finding.event == "otelloop.loop_halted"
    assert finding.severity == "stop"
    assert finding.attributes == {
        "otelloop.cycle_id": "coder,planner",
        "otelloop.halt_reason": "stalled",
        "otelloop.loop_iteration": 2,
        "otelloop.evidence.output_hashes": ["00000000000000ff"] * 3,
        "otelloop.evidence.diff_hashes": ["d2", "d4"],
        "otelloop.evidence.failure_signatures": ["f1", "f2", "f3"],
        "otelloop.suggested_actions": ["switch_to_interactive", "tighten_context", "spawn_reviewer"],
    }
    assert ctx.attributes["otelloop.cycle_id"] == "coder,planner"


def test_node_outside_a_cycle_is_named_by_itself() -> None:
    step = make_step("planner", kind="system", end_ns=make_step().start_ns + 11 * MINUTE_NS, output_hash=-1)
    (finding,) = SeedRun("stall").run([step])[0].findings
    assert finding.attributes["otelloop.cycle_id"] == "planner"
    assert finding.attributes["otelloop.loop_iteration"] == 0
    assert finding.attributes["otelloop.evidence.output_hashes"] == ["ffffffffffffffff"]


@pytest.mark.parametrize(("reason", "field", "values", "first_action"), [
    pytest.param("oscillating", "output_hash", [1, 2, 1, 2], "spawn_reviewer", id="oscillating"),
    pytest.param("repeated_error", "failure_signature", ["f"] * 3, "retry_with_new_provider", id="repeated"),
])
def test_suggested_actions_per_reason(reason: str, field: str, values: list[Any], first_action: str) -> None:
    contexts = SeedRun("stall").run(turns(*["coder"] * len(values), **{field: values}))
    (finding,) = contexts[-1].findings
    assert finding.attributes["otelloop.halt_reason"] == reason
    assert finding.attributes["otelloop.suggested_actions"][0] == first_action  # type: ignore[index]


def test_different_reasons_each_halt_once() -> None:
    steps = turns(*["coder"] * 5, output_hash=[1, 1, 1, 1, 1], failure_signature=["f"] * 5)
    assert run_halts(steps) == [[], [], [H, E], [], []]


def test_halt_stops_the_session_and_holds() -> None:
    run = SeedRun("stall")
    contexts = run.run(turns("coder", "coder", "coder", output_hash=[7, 7, 7]))
    session = run.session()
    assert contexts[-1].attributes["otelloop.verdict"] == "stop"
    assert session.reason == "loop_halted: stalled"
    assert "same output 3 turns in a row" in session.message
    run.run([make_step("reviewer", kind="system", i=10 + i, output_hash=100 + i) for i in range(5)])
    assert session.verdict == "stop"
    session.resume()
    assert session.verdict == "continue"


# --- bounded state ------------------------------------------------------------------------------------

def test_state_stays_bounded() -> None:
    run = SeedRun("stall", detectors={"stall": {"max_turns_per_node": None, "max_cycle_iterations": None}})
    for i in range(10_000):
        if i % 3 == 0:
            run.step(make_step("Write", i=i, tool_class="write", content_hash=i))
        run.step(make_step(f"node{(i * 7) % 200}", kind="system", i=i, output_hash=i % 5,
                           failure_signature=f"f{i % 4}", failing_tests=i % 9, diff_hash=f"d{i % 3}"))
    state: StallState = run.session().state("stall")
    graph = state.graph
    assert graph is not None
    assert len(graph.nodes) == len(graph.by_id) == MAX_NODES
    assert len(graph.edges) <= MAX_EDGES
    assert len(state.writes or ()) <= MAX_WRITES
    assert len(state.halted or ()) <= 64
    for node in graph.by_id:
        assert max(len(node.outputs), len(node.diffs), len(node.failures), len(node.failing)) <= 4
