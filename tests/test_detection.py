"""The detector engine: which detector methods a step reaches, and the settings detectors read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from otelloop.config import build_config
from otelloop.detection import DetectorEngine
from otelloop.detectors.base import SYSTEM_STEPS, TOOL_STEPS, Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import register, registered, unregister
from otelloop.model import Step
from otelloop.state import Session
from tests.helpers import make_step


class ToolsOnly(Detector):
    """Counts the steps it is called on, and says it looks at tool steps only."""

    name: ClassVar[str] = "tools_only"

    def new_state(self) -> list[str]:
        return []

    def observe(self, state: list[str], step: Step, ctx: StepContext) -> None:
        state.append(step.kind)

    def kinds(self, held: bool = False) -> frozenset[str] | None:
        return TOOL_STEPS


class EveryKind(ToolsOnly):
    name: ClassVar[str] = "every_kind"

    def kinds(self, held: bool = False) -> None:
        return None


@pytest.fixture
def counting() -> Iterator[DetectorEngine]:
    register(ToolsOnly)
    register(EveryKind)
    yield DetectorEngine(only={"tools_only", "every_kind"})
    unregister("tools_only")
    unregister("every_kind")


def test_a_detector_is_called_only_on_the_step_kinds_it_looks_at(counting: DetectorEngine) -> None:
    session = Session("s1", 0.0)
    kinds = ["tool", "llm", "system", "tool", "llm", "agent"]  # "agent": a kind no plan was made for
    for i, kind in enumerate(kinds):
        counting.observe(session, make_step(f"step_{i}", kind, i))
    assert session.state("tools_only") == ["tool", "tool"]
    assert session.state("every_kind") == kinds


def test_the_engine_off_the_gate_still_leaves_out_kinds_a_detector_does_not_look_at(counting: DetectorEngine) -> None:
    counting.gate = False
    session = Session("s1", 0.0)
    for i, kind in enumerate(["llm", "tool", "system"]):
        counting.observe(session, make_step(f"step_{i}", kind, i))
    assert session.state("tools_only") == ["tool"]


class HoldsTools(ToolsOnly):
    """Every kind judged; on a held step, tool steps only."""

    name: ClassVar[str] = "holds_tools"
    holds: ClassVar[bool] = True

    def kinds(self, held: bool = False) -> frozenset[str] | None:
        return TOOL_STEPS if held else None

    def hold(self, state: list[str], step: Step, ctx: StepContext) -> None:
        state.append(f"held {step.kind}")


def test_a_held_step_reaches_a_detector_only_on_the_kinds_it_holds() -> None:
    register(HoldsTools)
    try:
        engine = DetectorEngine(only={"holds_tools"}, hold=True)
        session = Session("s1", 0.0)
        engine.observe(session, make_step("chat", "llm", 0))
        session.stop_hold = ("stop", "test")  # what a stop vote leaves: the stop holds until a resume
        for i, kind in enumerate(["llm", "tool", "system"], start=1):
            engine.observe(session, make_step(f"step_{i}", kind, i))
        assert session.state("holds_tools") == ["llm", "held tool"]
        assert session.held == 3
    finally:
        unregister("holds_tools")


@pytest.mark.parametrize("profile", ["default", "seed"])
def test_every_detector_reads_the_values_of_its_validated_config(profile: str) -> None:
    configs = build_config({"detectors": {"profile": profile, "entropy": {"window": 9}}}).detectors
    engine = DetectorEngine(configs)
    assert {det.name for det in engine.detectors} == set(registered())
    for det in engine.detectors:
        config: DetectorConfig = det.config
        assert {key: getattr(det.settings, key) for key in type(config).model_fields} == dict(config)
    assert next(d for d in engine.detectors if d.name == "entropy").settings.window == 9


def test_the_built_in_detectors_that_look_at_tool_steps_only_say_so() -> None:
    default = {det.name: det.kinds() for det in DetectorEngine(build_config({}).detectors).detectors}
    assert default["trajectory"] == default["divergence"] == TOOL_STEPS
    assert {name for name, kinds in default.items() if kinds is None} == {"drift", "entropy", "rate", "stall"}
    seed = build_config({"detectors": {"profile": "seed"}}).detectors
    assert {det.name: det.kinds() for det in DetectorEngine(seed).detectors}["divergence"] is None
    held = {det.name: det.kinds(held=True) for det in DetectorEngine(build_config({}).detectors).detectors}
    assert held["stall"] == SYSTEM_STEPS and held["trajectory"] == TOOL_STEPS and held["entropy"] is None
