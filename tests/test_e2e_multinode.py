"""End to end: a planner → coder → reviewer → planner LangGraph team, traced by OpenInference.

Each node is a LangGraph node (an OpenInference CHAIN span whose node is ``langgraph_node`` in the
``metadata`` JSON): the planner asks a scripted chat model for a plan, the coder asks one for a
``write_file`` call and runs it, the reviewer runs the tests with ``run_command`` and reports the number
of failing tests on its node span (``otelloop.progress.failing_tests``), as an agent adapter would.

Spans are exported as they end (``SimpleSpanProcessor``), the way otelloop sees a team that is still
running: a node's tool and LLM spans arrive before the node's own span, so the writes made during a
coder turn are known when the turn is judged.

- ``no progress``: every turn the planner says the same thing, the coder writes the same content and the
  test command fails the same way. ``stall``: the coder's diff (derived from its writes) is unchanged on
  its 2nd turn → ``stalled``; the reviewer's failing count has not gone down over 3 turns →
  ``repeated_error``; both on the cycle ``coder,planner,reviewer``; the verdict is ``stop``.
- ``progress``: each turn the coder reports a new ``otelloop.progress.diff_hash`` and the failing count
  goes 3, 2, 1, 0, and the nodes' messages say so: no ``loop_halted`` at all.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import extras
import pytest
from served import BackgroundLoop, Served, wait_for
from sinks import GrpcSink
from spans import attrs_of, events_of, parse

extras.require("frameworks")

from agent_graphs import (  # noqa: E402, F401 (instrumented is a fixture)
    ScriptedChatModel,
    SwitchTracerProvider,
    Tracing,
    ai_calls,
    instrumented,
    node_span,
    oi_kind,
    oi_node,
    tool_call,
)
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langchain_core.tools import ToolException, tool  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.graph.message import add_messages  # noqa: E402

pytestmark = pytest.mark.frameworks

CYCLE = "coder,planner,reviewer"
TEAM = ("planner", "coder", "reviewer")
#: The reviewer gives up after this many rounds (the no-progress team would go on forever).
ROUNDS = 4
TEST_COMMAND = "python -m pytest -q tests/test_cart.py"


class TeamState(TypedDict):
    messages: Annotated[list, add_messages]
    round: int
    failing: int


@dataclass(frozen=True)
class Team:
    """How the team behaves: failing tests after each round, and whether its work changes."""

    id: str
    failing: tuple[int, ...]
    progress: bool


NO_PROGRESS = Team("no_progress", (2, 2, 2, 2), progress=False)
PROGRESS = Team("progress", (3, 2, 1, 0), progress=True)


def build_team(team: Team) -> Any:
    """The compiled graph; tools and models are scripted by ``team`` and hold no state between tests."""
    suite = list(team.failing)

    @tool
    def write_file(path: str, content: str) -> str:
        """Write ``content`` to the file at ``path``."""
        return f"wrote {path} (sha1 {hashlib.sha1(content.encode()).hexdigest()[:10]})"

    @tool
    def run_command(command: str) -> str:
        """Run a shell command in the repository."""
        failing = suite.pop(0)
        if failing:
            raise ToolException("FAILED tests/test_cart.py::test_total - assert 41 == 42\n"
                                f"{failing} failed in 0.04s")
        return "4 passed in 0.03s"

    def planner(state: TeamState) -> dict[str, Any]:
        n = state.get("round", 0) + 1
        text = (f"Round {n}: {state.get('failing', 4)} tests fail, fix the next one in cart.py."
                if team.progress else "Plan: fix total() in cart.py so the tests pass.")
        model = ScriptedChatModel(policy=lambda messages: AIMessage(text))
        return {"messages": [model.invoke(state["messages"])], "round": n}

    def coder(state: TeamState) -> dict[str, Any]:
        n = state["round"]
        content = (f"def total(items):\n    return sum(i.price * i.qty for i in items[:{n}])\n"
                   if team.progress else "def total(items):\n    return sum(i.price for i in items)\n")
        call = tool_call("write_file", {"path": "src/cart.py", "content": content}, f"write_{n}")
        asked = ScriptedChatModel(policy=lambda messages: ai_calls(call)).invoke(state["messages"])
        result = write_file.invoke(call)
        if team.progress:
            diff = hashlib.sha1(content.encode()).hexdigest()
            node_span().set_attribute("otelloop.progress.diff_hash", diff)
        return {"messages": [asked, result]}

    def reviewer(state: TeamState) -> dict[str, Any]:
        try:
            output = run_command.invoke({"command": TEST_COMMAND})
        except ToolException as e:
            output = str(e)
        match = re.search(r"(\d+) failed", output)
        failing = int(match.group(1)) if match else 0
        node_span().set_attribute("otelloop.progress.failing_tests", failing)
        if team.progress:
            text = f"{failing} tests still fail." if failing else "All tests pass."
        else:
            text = "Tests still fail: assert 41 == 42 in test_total."
        return {"messages": [AIMessage(text)], "failing": failing}

    def next_round(state: TeamState) -> str:
        return END if state["failing"] == 0 or state["round"] >= ROUNDS else "planner"

    builder = StateGraph(TeamState)
    builder.add_node("planner", planner)
    builder.add_node("coder", coder)
    builder.add_node("reviewer", reviewer)
    builder.add_edge(START, "planner")
    builder.add_edge("planner", "coder")
    builder.add_edge("coder", "reviewer")
    builder.add_conditional_edges("reviewer", next_round, ["planner", END])
    return builder.compile()


@dataclass
class Run:
    """The forwarded spans in processing (arrival) order, the team's final state and the verdict."""

    team: Team
    spans: list[Any]
    state: dict[str, Any]
    verdict: dict[str, Any]

    def turns(self, node: str) -> list[Any]:
        """The node's own spans (not its inner chains), in order."""
        return [s for s in self.spans if s.name == node and oi_node(attrs_of(s), s.name) == node]

    def halts(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(span id, halt reason, event attributes) of every ``loop_halted`` event."""
        return [(s.span_id.hex(), a["otelloop.halt_reason"], a) for s in self.spans
                for name, a in events_of(s) if name == "otelloop.loop_halted"]


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


def run_team(team: Team, switch: SwitchTracerProvider, bg: BackgroundLoop, tmp: Path,
             profile: str = "default") -> Run:
    """SDK (span by span) → ``otelloop serve`` → sink; returns once the root span was forwarded."""
    sink = bg.run(GrpcSink().start())
    served = Served(tmp, {"exporter": {"endpoint": f"grpc://127.0.0.1:{sink.port}"},
                          "detectors": {"profile": profile}})
    try:
        tracing = Tracing(switch, f"coding-team-{team.id}", [served.grpc], live=True)
        try:
            state = build_team(team).invoke({"messages": [HumanMessage("Make tests/test_cart.py pass.")]})
        finally:
            tracing.finish()
        wait_for(lambda: any(s.name == "LangGraph" for d in list(sink.delivered) for s in parse(d)),
                 what="the root span forwarded")
        spans = [s for d in sink.delivered for s in parse(d)]
        status, body = served.get(f"/v1/sessions/{spans[0].trace_id.hex()}/verdict")
        assert status == 200, body
        return Run(team, spans, state, json.loads(body))
    finally:
        served.stop()
        bg.run(sink.stop())


@pytest.fixture(scope="module")
def stuck(instrumented: SwitchTracerProvider, bg: BackgroundLoop,  # noqa: F811
          tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The stuck team under the seed profile, whose stall rules the positions below follow."""
    return run_team(NO_PROGRESS, instrumented, bg, tmp_path_factory.mktemp(NO_PROGRESS.id), profile="seed")


@pytest.fixture(scope="module")
def stuck_default(instrumented: SwitchTracerProvider, bg: BackgroundLoop,  # noqa: F811
                  tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_team(NO_PROGRESS, instrumented, bg, tmp_path_factory.mktemp("stuck-default"))


@pytest.fixture(scope="module")
def improving(instrumented: SwitchTracerProvider, bg: BackgroundLoop,  # noqa: F811
              tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_team(PROGRESS, instrumented, bg, tmp_path_factory.mktemp(PROGRESS.id))


@pytest.fixture(params=["stuck", "improving"])
def any_run(request: pytest.FixtureRequest) -> Run:
    return request.getfixturevalue(request.param)


# ---------------------------------------------------------------------------------------------------
# Both teams


def test_team_ran_its_rounds(any_run: Run) -> None:
    """Four rounds either way: the stuck team until the reviewer gives up, the other until green."""
    assert any_run.state["round"] == ROUNDS
    assert [len(any_run.turns(node)) for node in TEAM] == [ROUNDS] * 3
    assert any_run.state["failing"] == any_run.team.failing[-1]


def test_cycle_steps_carry_cycle_id_and_iteration(any_run: Run) -> None:
    """``stall``: from the planner's 2nd turn the three nodes form a tracked cycle anchored on the
    planner; every span of their turns (inner chains included) carries the badge, nothing else does."""
    planner_turns = 0
    badged = 0
    for span in any_run.spans:
        a = attrs_of(span)
        node = oi_node(a, span.name)
        system = oi_kind(a) == "system"
        if system and span.name == "planner":
            planner_turns += 1
        in_cycle = system and node in TEAM and planner_turns >= 2
        expected = (CYCLE, planner_turns - 1) if in_cycle else (None, None)
        assert (a.get("otelloop.cycle_id"), a.get("otelloop.loop_iteration")) == expected, (span.name, node)
        badged += expected[0] is not None
    # rounds 2-4: planner, coder, reviewer and the reviewer's routing chain
    assert badged == 4 * (ROUNDS - 1)


# ---------------------------------------------------------------------------------------------------
# The team that makes no progress


def test_stuck_team_is_halted_on_the_turns_that_completed_each_signal(stuck: Run) -> None:
    coder, reviewer = stuck.turns("coder"), stuck.turns("reviewer")
    assert [(span, reason) for span, reason, _ in stuck.halts()] == [
        (coder[1].span_id.hex(), "stalled"),          # same diff as its 1st turn (unchanged_diff_threshold 2)
        (reviewer[2].span_id.hex(), "repeated_error"),  # failing tests 2, 2, 2 never went down
    ]


def test_loop_halted_events_name_the_cycle_and_evidence(stuck: Run) -> None:
    (_, _, stalled), (_, _, repeated) = stuck.halts()
    for attrs, iteration in ((stalled, 1), (repeated, 2)):
        assert attrs["otelloop.cycle_id"] == CYCLE
        assert attrs["otelloop.loop_iteration"] == iteration
        assert attrs["otelloop.severity"] == "stop"
        assert attrs["otelloop.detector"] == "stall"
        assert attrs["otelloop.suggested_actions"]
    diffs = stalled["otelloop.evidence.diff_hashes"]
    assert len(diffs) == 2 and len(set(diffs)) == 1
    assert repeated["otelloop.suggested_actions"][0] == "retry_with_new_provider"


def test_stuck_team_verdict_is_stop(stuck: Run) -> None:
    assert stuck.verdict["verdict"] == "stop"
    assert stuck.verdict["reason"] == "loop_halted: stalled"
    assert CYCLE in stuck.verdict["message"]
    later = stuck.spans[stuck.spans.index(stuck.turns("coder")[1]):]
    assert {attrs_of(s).get("otelloop.verdict") for s in later if oi_kind(attrs_of(s))} == {"stop"}


def test_stuck_team_is_stopped_in_its_second_round_by_default(stuck_default: Run) -> None:
    """The default profile sees the same failure after the same rewrite of cart.py: no progress."""
    assert stuck_default.verdict["verdict"] == "stop"
    first_stop = next(s for s in stuck_default.spans if attrs_of(s).get("otelloop.verdict") == "stop")
    second_round = stuck_default.spans.index(stuck_default.turns("planner")[1])
    assert second_round < stuck_default.spans.index(first_stop) < stuck_default.spans.index(
        stuck_default.turns("planner")[2])


# ---------------------------------------------------------------------------------------------------
# The team that makes progress


def test_progressing_team_is_not_halted(improving: Run) -> None:
    reported = [attrs_of(s).get("otelloop.progress.failing_tests") for s in improving.turns("reviewer")]
    assert reported == list(PROGRESS.failing)
    assert len({attrs_of(s)["otelloop.progress.diff_hash"] for s in improving.turns("coder")}) == ROUNDS
    assert improving.halts() == []
    # Not stopped. (Trajectory may still nudge: re-running the same test command each round is, to
    # its lexical semantic-repeat check, a repeat of the earlier runs.)
    assert improving.verdict["verdict"] != "stop"
    verdicts = {attrs_of(s).get("otelloop.verdict") for s in improving.spans if oi_kind(attrs_of(s))}
    assert verdicts <= {"continue", "nudge"}


def test_progressing_team_gets_no_finding_at_all(improving: Run) -> None:
    """Under the default profile, work that makes progress is not even worth a warning."""
    assert [(s.name, name) for s in improving.spans for name, _ in events_of(s) if name.startswith("otelloop.")] == []
    assert {attrs_of(s).get("otelloop.verdict") for s in improving.spans if oi_kind(attrs_of(s))} == {"continue"}
