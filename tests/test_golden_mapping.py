"""Golden mapping tests: real OTLP recorded from real agent frameworks → the steps docs/mapping.md prescribes.

Each ``tests/fixtures/<name>.pb`` is one ``ExportTraceServiceRequest`` recorded by
``tests/fixtures/record_fixtures.py``; ``<name>.expected.json`` lists, in processing order, the steps
otelloop must make of it under the default configuration (written by hand from the mapping's rules, see
``tests/fixtures/README.md``). Every field is compared on its own, so a failure names the fixture, the
step and the field. The frameworks are needed only to re-record, not here.
"""

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_NAMES = ("langgraph_openinference", "langgraph_langsmith", "openllmetry_openai", "openai_agents",
                 "pydantic_ai", "strands", "strands_latest", "smolagents")

#: Fields compared as plain equality with the Step attribute of the same name.
PLAIN_FIELDS = ("kind", "name", "agent", "node", "session", "outcome", "input_tokens", "output_tokens")


def _paths(name: str) -> tuple[Path, Path]:
    return FIXTURES / f"{name}.pb", FIXTURES / f"{name}.expected.json"


def _missing(name: str) -> list[Path]:
    return [p for p in _paths(name) if not p.is_file()]


def _fail_missing(name: str) -> None:
    missing = ", ".join(str(p.relative_to(FIXTURES.parent.parent)) for p in _missing(name))
    pytest.fail(f"golden fixture {name!r}: missing {missing}; regenerate with "
                f"`python tests/fixtures/record_fixtures.py {name}` (see tests/fixtures/README.md)",
                pytrace=False)


def _expected(name: str) -> list[dict[str, Any]]:
    return json.loads(_paths(name)[1].read_text())


@cache
def _mapped(name: str) -> list[Any]:
    """otelloop's steps for a fixture (mapped once per fixture, shared by that fixture's tests)."""
    from otelloop.pipeline import map_request

    return list(map_request(_paths(name)[0].read_bytes()))


def _step_params() -> list[Any]:
    params = []
    for name in FIXTURE_NAMES:
        if _missing(name):
            # Collected as one failing test rather than skipped: a lost fixture must not go unnoticed.
            params.append(pytest.param(name, -1, id=f"{name}-MISSING"))
            continue
        for index, step in enumerate(_expected(name)):
            step_id = f"{name}-{index:02d}-{step['kind']}-{step['span_name']}"
            params.append(pytest.param(name, index, id=step_id))
    return params


def _describe(step: Any) -> str:
    return (f"{step.kind} {step.name!r} (span {getattr(step, 'span_id', '?') or '?'}, "
            f"node {step.node!r}, outcome {step.outcome})")


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_fixture_maps_to_expected_step_sequence(name: str) -> None:
    """The whole sequence of (kind, name) in processing order: a compact view when counts differ."""
    if _missing(name):
        _fail_missing(name)
    expected = _expected(name)
    steps = _mapped(name)
    want = [(e["kind"], e["name"]) for e in expected]
    got = [(s.kind, s.name) for s in steps]
    assert got == want, (
        f"{name}: otelloop made {len(got)} steps, the mapping rules say {len(want)}\n"
        + "\n".join(f"  {i:02d} expected {w!s:45} got {g}"
                    for i, (w, g) in enumerate(zip(want + [None] * len(got), got + [None] * len(want), strict=True))
                    if i < max(len(want), len(got)))
    )


@pytest.mark.parametrize(("name", "index"), _step_params())
def test_step_fields(name: str, index: int) -> None:
    if index < 0:
        _fail_missing(name)
    expected = _expected(name)[index]
    steps = _mapped(name)
    assert index < len(steps), (
        f"{name}: expected step {index} ({expected['kind']} {expected['name']!r} from span "
        f"{expected['span_name']!r} {expected.get('span_id', '')}) but otelloop made only {len(steps)} steps")
    step = steps[index]

    problems = []
    span_id = getattr(step, "span_id", "")
    if span_id and expected.get("span_id") and span_id != expected["span_id"]:
        problems.append(f"span_id: got {span_id!r}, expected {expected['span_id']!r} (processing order?)")
    for field in PLAIN_FIELDS:
        got = getattr(step, field)
        if got != expected[field]:
            problems.append(f"{field}: got {got!r}, expected {expected[field]!r}")
    if step.cost_usd != pytest.approx(expected["cost_usd"]):
        problems.append(f"cost_usd: got {step.cost_usd!r}, expected {expected['cost_usd']!r}")
    for field, attr in (("has_args", "args_hash"), ("has_output", "output_hash")):
        value = getattr(step, attr)
        if value is not None and not isinstance(value, int):
            problems.append(f"{attr}: must be an int or None, got {type(value).__name__}")
        if (value is not None) != expected[field]:
            problems.append(f"{field}: got {attr}={value!r}, expected {attr} "
                            f"{'set' if expected[field] else 'None'}")

    if "file_path" in expected and step.file_path != expected["file_path"]:
        problems.append(f"file_path: got {step.file_path!r}, expected {expected['file_path']!r}")

    if expected["kind"] == "tool":
        previous = next((s for s in reversed(steps[:index]) if s.kind == "tool"), None)
        for field, attr in (("same_args_as_previous_tool_step", "args_hash"),
                            ("same_output_as_previous_tool_step", "output_hash")):
            want = expected.get(field)
            if want is None:  # first tool step of the fixture: nothing to compare with
                continue
            if previous is None:
                problems.append(f"{field}: expected a previous tool step, otelloop made none before this one")
                continue
            same = getattr(step, attr) is not None and getattr(step, attr) == getattr(previous, attr)
            if same != want:
                relation = "equal" if want else "different"
                problems.append(f"{field}: got {attr} {getattr(step, attr)!r} vs previous tool step's "
                                f"{getattr(previous, attr)!r}, expected them {relation}")

    assert not problems, (
        f"{name} step {index} (span {expected['span_name']!r} {expected.get('span_id', '')}; "
        f"otelloop made {_describe(step)}):\n  " + "\n  ".join(problems)
        + f"\n  (sources per docs/mapping.md: {json.dumps(expected.get('sources', {}))})"
    )
