"""The dialects of the corpus's noisy runs (``benchmarks/corpus/recorder/noisy.py``) are fully mapped.

Each run was recorded from the real framework with its real instrumentation (LangGraph + OpenLLMetry,
AutoGen AgentChat + OpenInference, Google ADK's own tracing, LlamaIndex + OpenInference, Agno +
OpenInference). These tests read the committed recordings (the frameworks are needed only to re-record)
and check what docs/mapping.md says of each dialect: every tool span is one tool step with the tool's
name; its arguments are the call's own (no ``{"kwargs": …}`` binding, no OpenLLMetry callback record
with LangGraph's per-call metadata); its result has the dialect's wrappers taken off (OpenLLMetry's
``{"output": ToolMessage, "kwargs"}``, LlamaIndex's ``ToolOutput`` with the ``raw_input`` it repeats,
ADK's ``{"result": …}``).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from otelloop.analyze import iter_requests
from otelloop.mapping.canonical import call_result
from otelloop.mapping.mapper import OUTPUT_EXCERPT_CHARS
from otelloop.pipeline import map_request

CORPUS = Path(__file__).resolve().parent.parent / "benchmarks" / "corpus"
NOISY = ("langgraph_openllmetry", "autogen", "google_adk", "llamaindex", "agno")
#: Wrapper keys that must not survive into a tool step's arguments or result text.
WRAPPER_MARKS = ('"raw_input"', '"raw_output"', '"tool_name"', '"langgraph_step"', '"checkpoint_ns"',
                 '"lc":', '"tool_call_id"', '"kwargs"', '"input_str"', '"blocks"')


@cache
def _labels() -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads((CORPUS / "labels.json").read_text())["runs"]
    return runs


def _runs(dialect: str) -> list[dict[str, Any]]:
    return [r for r in _labels() if r["dialect"] == dialect]


@cache
def _tool_steps(file: str) -> list[Any]:
    steps = [s for _, data in iter_requests(CORPUS / file) for s in map_request(data) if s.kind == "tool"]
    return sorted(steps, key=lambda s: s.start_ns)


@pytest.mark.parametrize("dialect", NOISY)
def test_each_noisy_dialect_has_loops_and_healthy_runs(dialect: str) -> None:
    runs = _runs(dialect)
    assert sum(r["label"] == "loop" for r in runs) >= 3 and sum(r["label"] == "healthy" for r in runs) >= 4
    assert all(r["versions"] for r in runs)  # each run says which framework release recorded it


@pytest.mark.parametrize("dialect", NOISY)
def test_every_tool_span_is_one_tool_step_named_after_its_tool(dialect: str) -> None:
    for run in _runs(dialect):
        steps = _tool_steps(run["file"])
        assert len(steps) == run["tool_calls"], run["id"]
        assert {s.name for s in steps} == set(run["tools"]), run["id"]


@pytest.mark.parametrize("dialect", NOISY)
def test_arguments_and_results_have_their_wrappers_taken_off(dialect: str) -> None:
    for run in _runs(dialect):
        for step in _tool_steps(run["file"]):
            assert step.args_text is not None and step.args_text.startswith("{"), (run["id"], step.args_text)
            result = _unwrapped(step)
            for mark in WRAPPER_MARKS:
                assert mark not in step.args_text, (run["id"], mark, step.args_text)
                assert mark not in result, (run["id"], mark, result[:200])


def _unwrapped(step: Any) -> str:
    """The step's result as the mapping compares it (its dialect's wrappers taken off), as JSON text;
    empty for a failed step or one whose excerpt is not its whole output."""
    raw = step.output_text
    if step.outcome != "success" or raw is None or len(raw) >= OUTPUT_EXCERPT_CHARS:
        return ""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return json.dumps(call_result(value))


@pytest.mark.parametrize("dialect", NOISY)
def test_a_repeated_call_hashes_its_arguments_alike(dialect: str) -> None:
    """In each loop run whose cycle repeats one call, the calls from the loop's start hash alike."""
    for run in (r for r in _runs(dialect) if r["label"] == "loop" and r["scenario"] in ("repeat", "retry")):
        steps = _tool_steps(run["file"])[run["loop_start"] - 1:]
        if "pagination" in run["description"] or "page token" in run["description"]:
            continue  # a new cursor on every call: the arguments differ by design
        assert len({s.args_hash for s in steps}) == 1, run["id"]


def test_adk_results_are_the_tools_values_not_their_envelope() -> None:
    run = next(r for r in _runs("google_adk") if r["scenario"] == "retry" and r["label"] == "healthy")
    wrapped = [s for s in _tool_steps(run["file"]) if s.outcome == "success" and s.output_text
               and s.output_text.startswith('{"result"')]  # as ADK wrote it
    assert len(wrapped) >= 3
    assert all(_unwrapped(s).startswith('{"data"') for s in wrapped)  # compared as the tool's value


def test_llamaindex_arguments_are_the_bound_keyword_arguments() -> None:
    run = _runs("llamaindex")[0]
    first = _tool_steps(run["file"])[0]
    assert not first.args_text.startswith('{"kwargs"')


def test_labels_follow_the_written_scenarios() -> None:
    """Each noisy run's label, class, tool calls and loop start are its scenario's (recorder/noisy.py, written
    before any recording): the loop starts at the first call of the turn the scenario marks."""
    import sys

    sys.path.insert(0, str(CORPUS))
    try:
        from recorder.noisy import catalog
    finally:
        sys.path.remove(str(CORPUS))
    scenarios = catalog()
    labelled = [r for d in NOISY for r in _runs(d)]
    assert {r["id"] for r in labelled} == set(scenarios)
    for run in labelled:
        sc = scenarios[run["id"]]
        assert (run["label"], run["scenario"], run["description"]) == (sc.label, sc.cls, sc.description)
        assert run["tool_calls"] == sum(len(t.calls) for t in sc.turns)
        if sc.label == "loop":
            before = next(i for i, t in enumerate(sc.turns) if t.loop_start)
            assert run["loop_start"] == 1 + sum(len(t.calls) for t in sc.turns[:before]), run["id"]
        else:
            assert run["loop_start"] is None
