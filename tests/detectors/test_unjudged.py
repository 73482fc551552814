"""Steps without content, and divergence and entropy among a session's tool steps (default profile).

A step built here carries what the mapping gives a span: a tool span without arguments or result (content
capture off, the OTel GenAI default) has neither hash; an LLM span without captured messages has no output.
All six detectors run, as in ``serve``. Names alone must never nudge or stop a session; budgets written in
the configuration and the rate thresholds still apply; divergence and entropy count tool steps only, so a
ReAct agent's model turns are not in the way and chat turns never count.
"""

from __future__ import annotations

from typing import Any

import pytest

from otelloop.detectors.registry import registered
from otelloop.mapping.canonical import hash_text
from otelloop.model import Step
from tests.helpers import DetectorRun, SeedRun, make_step

ALL = tuple(registered())


def react(tool: str, rounds: int, content: Any = None, llm_output: bool = False) -> list[Step]:
    """A ReAct session: a model call, then a tool call, ``rounds`` times, then a final answer.

    ``content(i)`` gives the i-th call's (arguments, result) texts, or None for a span without content.
    """
    steps: list[Step] = [make_step("invoke_agent support", kind="system", i=0, node="support",
                                   end_ns=make_step(i=4 * rounds + 2).end_ns)]
    for i in range(rounds):
        steps.append(make_step("chat gpt-4o", kind="llm", i=2 * i + 1,
                               output_hash=hash_text(f"call {i}") if llm_output else None))
        args, result = content(i) if content is not None else (None, None)
        steps.append(make_step(tool, i=2 * i + 2, args_hash=None if args is None else hash_text(args),
                               args_text=args, output_hash=None if result is None else hash_text(result),
                               outcome="success" if result is not None else "empty"))
    steps.append(make_step("chat gpt-4o", kind="llm", i=2 * rounds + 1))
    return steps


def run_all(steps: list[Step], run: DetectorRun | None = None) -> tuple[DetectorRun, list[tuple[int, str, str]]]:
    """Feed every step to every detector; (step index, detector, event) of each finding."""
    run = run or DetectorRun(*ALL)
    found = [(i, f.detector, f.event) for i, ctx in enumerate(run.run(steps)) for f in ctx.findings]
    return run, found


def test_nine_different_reservations_read_without_content_are_left_alone_and_counted() -> None:
    """A support agent reading nine reservations whose spans say only the tool's name."""
    steps = react("get_reservation_details", 9)
    run, found = run_all(steps)
    session = run.session()
    assert found == [] and session.verdict == "continue"
    assert session.unjudged == 9
    tools = [s for s in steps if s.kind == "tool"]
    assert [s.novel for s in tools] == [None] * 9 and {s.stale for s in tools} == {0}


def test_the_same_agent_with_content_is_judged_by_its_results() -> None:
    """With content, nine different reservations are work and nine identical reads are a loop."""
    different = react("get_reservation_details", 9,
                      lambda i: (f'{{"id": "R{i}"}}', f'{{"id": "R{i}", "guest": "guest {i}"}}'))
    run, found = run_all(different)
    assert found == [] and run.session().verdict == "continue" and run.session().unjudged == 0
    same = react("get_reservation_details", 9, lambda i: ('{"id": "R1"}', '{"id": "R1", "guest": "Ada"}'))
    run, found = run_all(same)
    assert run.session().verdict == "stop"


def test_the_seed_profile_still_judges_names() -> None:
    run, found = run_all(react("get_reservation_details", 9), SeedRun(*ALL))
    assert run.session().verdict == "stop" and "trajectory" in {d for _, d, _ in found}


def test_a_react_loop_fires_divergence_and_entropy_among_its_tool_steps() -> None:
    """llm, tool, llm, tool …: the model's turn between two identical calls does not break the run."""
    steps = react("search_flights", 6, lambda i: ('{"to": "LIS"}', "no flights found"), llm_output=True)
    _, found = run_all(steps, DetectorRun("divergence", "entropy"))
    tool_index = {i: n for n, i in enumerate((i for i, s in enumerate(steps) if s.kind == "tool"), 1)}
    divergence = [tool_index[i] for i, d, _ in found if d == "divergence"]
    entropy = [tool_index.get(i) for i, d, _ in found if d == "entropy"]
    assert divergence == [4]  # once, at the fourth identical call
    assert entropy[0] == 5 and None not in entropy  # five equal tool results; never on a model turn


def test_a_multi_turn_chat_is_never_a_divergence() -> None:
    """Chat turns: a person answers between the model's turns; no tool step at all."""
    turns = [make_step("chat gpt-4o", kind="llm", i=i, output_hash=hash_text(f"answer {i}")) for i in range(12)]
    _, found = run_all(turns)
    assert found == []
    _, seed = run_all(turns, SeedRun("divergence"))  # the seed profile keeps counting model turns
    assert [d for _, d, _ in seed] == ["divergence"]


def test_an_unjudged_step_breaks_the_runs_on_either_side() -> None:
    """Two failures with the same message, then a call whose span says nothing, then two more."""
    failure = {"outcome": "error", "error_hash": hash_text("503 upstream unavailable"), "error_signature": "e"}
    steps = ([make_step("fetch_record", i=i, **failure) for i in range(2)] + [make_step("fetch_record", i=2)]
             + [make_step("fetch_record", i=i, **failure) for i in range(3, 5)])
    run, found = run_all(steps)
    assert [(s.novel, s.repeats, s.tool_repeats, s.stale) for s in steps] == [
        (True, 1, 1, 0), (False, 2, 2, 1), (None, 1, 0, 0), (False, 1, 1, 1), (False, 2, 2, 2)]
    assert run.session().verdict == "continue" and run.session().unjudged == 1 and found == []


@pytest.mark.parametrize(("stall", "halts"), [
    pytest.param({"max_turns_per_node": 3}, True, id="budget-in-the-configuration-halts"),
    pytest.param({}, False, id="built-in-budget-waits-for-turns-without-progress"),
])
def test_budgets_written_in_the_configuration_still_apply_without_content(stall: dict, halts: bool) -> None:
    """Twelve turns of a node whose steps carry no content."""
    run = DetectorRun(*ALL, detectors={"stall": stall})
    steps = []
    for k in range(12):
        steps += [make_step("invoke_agent worker", kind="system", i=3 * k, node="worker"),
                  make_step("chat gpt-4o", kind="llm", i=3 * k + 1), make_step("lookup", i=3 * k + 2)]
    _, found = run_all(steps, run)
    assert (run.session().verdict == "stop") is halts
    assert [e for _, d, e in found if d != "stall"] == []


def test_turns_with_content_and_no_progress_still_reach_a_built_in_budget() -> None:
    """The same node, its turns carrying outputs and its tool results repeating: the budget halts."""
    steps = []
    for k in range(12):
        steps += [make_step("invoke_agent worker", kind="system", i=3 * k, node="worker",
                            output_hash=hash_text(f"turn {k}")),
                  make_step("lookup", i=3 * k + 1, args_hash=hash_text(f"q{k}"), output_hash=hash_text("same"))]
    _, found = run_all(steps, DetectorRun("stall"))
    assert ("stall", "otelloop.loop_halted") in {(d, e) for _, d, e in found}


def test_rate_thresholds_apply_without_content() -> None:
    run = DetectorRun("rate")
    steps = [make_step("chat gpt-4o", kind="llm", i=i, cost_usd=2.0, output_tokens=10) for i in range(12)]
    _, found = run_all(steps, run)
    assert ("rate", "otelloop.cost_rate_exceeded") in {(d, e) for _, d, e in found}
