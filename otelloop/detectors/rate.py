"""The ``rate`` detector (docs/detectors.md#rate): a session spending money or tokens too fast.

This module owns the cost-rate and token-velocity checks, their configuration and per-session state.
Pattern detectors are blind to an agent that varies every call while burning budget; this one looks
at spend per second instead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from otelloop.detectors.base import Detector, DetectorConfig, StepContext
from otelloop.detectors.registry import register
from otelloop.model import Finding, Step
from otelloop.units import Duration


class RateConfig(DetectorConfig):
    """``detectors.rate``. A threshold of ``.inf`` or ``null`` disables that check.

    Attributes:
        cost_usd_per_second: session cost per second above which ``otelloop.cost_rate_exceeded``
            fires. Default: 0.10.
        output_tokens_per_second: session output tokens per second above which
            ``otelloop.token_velocity_exceeded`` fires. Default: 500.
        min_elapsed: session time (first step start to current step end) before a rate is judged: a
            rate over one short call divided by its own duration says nothing about a session's burn.
            Default: 10s.
        min_steps: steps that spent money or tokens before a rate is judged. Default: 3.
    """

    cost_usd_per_second: float | None = Field(0.10, ge=0)
    output_tokens_per_second: float | None = Field(500.0, ge=0)
    min_elapsed: Duration = 10.0
    min_steps: int = Field(3, ge=1)


class RateState:
    """Running totals of one session and which warnings it already got."""

    __slots__ = ("first_start_ns", "cost_usd", "output_tokens", "spending_steps", "cost_fired", "tokens_fired")

    def __init__(self) -> None:
        #: earliest step start seen (span time); 0 until a step with a start time arrives
        self.first_start_ns = 0
        self.cost_usd = 0.0
        self.output_tokens = 0
        #: steps that spent money or output tokens
        self.spending_steps = 0
        self.cost_fired = False
        self.tokens_fired = False


def _accumulate(state: RateState, step: Step, ctx: StepContext | None = None) -> None:
    """Add the step's spend and move the session start back if this step started earlier (``ctx``:
    unused, so that the function is the detector's ``hold`` itself)."""
    cost, tokens = step.cost_usd, step.output_tokens
    if cost or tokens:  # (most steps spend nothing: tool calls)
        state.cost_usd += cost
        state.output_tokens += tokens
        if cost > 0 or tokens > 0:
            state.spending_steps += 1
    start = step.start_ns
    if start > 0 and (state.first_start_ns <= 0 or start < state.first_start_ns):
        state.first_start_ns = start


@register
class RateDetector(Detector):
    """Warns once per type per session when cost or output tokens per second exceed a threshold.

    Elapsed time runs from the session's first step start to the current step end, in span time, so
    replaying recorded traces gives the same answer as live traffic. Advisory only: no vote.
    """

    name: ClassVar[str] = "rate"
    holds: ClassVar[bool] = True
    Config: ClassVar[type[DetectorConfig]] = RateConfig
    profiles: ClassVar[dict[str, dict[str, Any]]] = {"seed": {"min_elapsed": 0.001, "min_steps": 1}}
    config: RateConfig
    settings: RateConfig

    def new_state(self) -> RateState:
        return RateState()

    def observe(self, state: RateState, step: Step, ctx: StepContext) -> None:
        _accumulate(state, step)
        if state.cost_fired and state.tokens_fired:
            return
        cfg = self.settings
        if state.spending_steps < cfg.min_steps or state.first_start_ns <= 0:
            return
        elapsed_s = (step.end_ns - state.first_start_ns) / 1e9
        if elapsed_s < cfg.min_elapsed:
            return
        threshold = cfg.cost_usd_per_second
        if not state.cost_fired and threshold is not None:
            rate = state.cost_usd / elapsed_s
            if rate > threshold:
                state.cost_fired = True
                self._report(ctx, "otelloop.cost_rate_exceeded", "otelloop.cost_rate", rate, threshold, "USD/s")
        threshold = cfg.output_tokens_per_second
        if not state.tokens_fired and threshold is not None:
            rate = state.output_tokens / elapsed_s
            if rate > threshold:
                state.tokens_fired = True
                self._report(ctx, "otelloop.token_velocity_exceeded", "otelloop.token_velocity", rate, threshold,
                             "output tokens/s")

    #: A stopped session's held step: its spend is added, so the totals stay current (the summary, and the
    #: rates judged again after a resume), but no rate is judged on it and nothing is raised. (The function
    #: itself, not a method that calls it: nearly every step of a stopped session comes here.)
    hold = staticmethod(_accumulate)

    def _report(self, ctx: StepContext, event: str, key: str, rate: float, threshold: float, unit: str) -> None:
        """Report ``rate``, strictly above ``threshold``."""
        ctx.report(Finding(
            detector=self.name,
            event=event,
            severity="warn",
            attributes={key: rate, "otelloop.threshold": threshold},
            message=f"session burns {rate:.4g} {unit}, above the {threshold:g} {unit} threshold",
        ))

    def summary(self, state: RateState) -> dict[str, Any]:
        return {
            "cost_usd": state.cost_usd,
            "output_tokens": state.output_tokens,
            "cost_rate_exceeded": state.cost_fired,
            "token_velocity_exceeded": state.tokens_fired,
        }

