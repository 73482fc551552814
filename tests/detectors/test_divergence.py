"""The divergence detector: consecutive identical (kind, name) steps, once per signature."""

from __future__ import annotations

import pytest

from otelloop.config import build_config
from otelloop.detectors.divergence import MAX_EMITTED, DivergenceConfig
from otelloop.model import Finding
from tests.helpers import SeedRun, make_step

T, L, S = "tool", "llm", "system"


def _fired(run: SeedRun, steps: list[tuple[str, str]], session: str = "s1") -> list[int]:
    """Indices of the steps that produced a divergence finding."""
    ctxs = run.run([make_step(name, kind, i, session=session) for i, (kind, name) in enumerate(steps)])
    return [i for i, ctx in enumerate(ctxs) if ctx.findings]


@pytest.mark.parametrize(("config", "steps", "fired"), [
    pytest.param({}, [(T, "a")] * 5, [2], id="tool-fires-on-3rd-not-4th-5th"),
    pytest.param({}, [(T, "a")] * 2, [], id="tool-2-in-a-row-silent"),
    pytest.param({}, [(L, "gen")] * 7, [4], id="llm-fires-on-5th-only"),
    pytest.param({}, [(L, "gen")] * 4, [], id="llm-4-in-a-row-silent"),
    pytest.param({}, [(S, "agent_run")] * 20, [], id="system-never-even-20"),
    pytest.param({}, [("other", "x")] * 20, [], id="unknown-kind-never"),
    pytest.param({}, [(T, "a"), (T, "b")] * 5, [], id="ABAB-never"),
    pytest.param({}, [(T, "a"), (T, "a"), (T, "b"), (T, "b"), (T, "b")], [4], id="suffix-count-not-total"),
    pytest.param({}, [(T, "a"), (T, "a"), (L, "a")], [], id="same-name-other-kind-breaks-run"),
    pytest.param({}, [(T, "a")] * 3 + [(T, "b")] + [(T, "a")] * 3, [2], id="dedup-after-run-resumes"),
    pytest.param({}, [(T, "a")] * 3 + [(T, "b")] * 3, [2, 5], id="other-signature-fires-later"),
    pytest.param({"window": 2}, [(T, "a")] * 6, [], id="window-below-threshold-never"),
    pytest.param({"thresholds": {"tool": 2}}, [(T, "a")] * 3, [1], id="custom-tool-threshold"),
    pytest.param({"thresholds": {"tool": 2}}, [(L, "g")] * 5, [4], id="unlisted-kinds-keep-defaults"),
    pytest.param({"thresholds": {"plan": 2}}, [("plan", "p")] * 2, [1], id="threshold-for-extra-kind"),
])
def test_fires_at_threshold_once(config: dict, steps: list[tuple[str, str]], fired: list[int]) -> None:
    run = SeedRun("divergence", detectors={"divergence": config})
    assert _fired(run, steps) == fired


def test_finding_shape_and_no_vote() -> None:
    run = SeedRun("divergence")
    ctx = run.run([make_step("call_api", "tool", i) for i in range(3)])[-1]
    assert ctx.findings == [Finding(
        detector="divergence", event="otelloop.divergence_suspected", severity="warn",
        attributes={"otelloop.signature.kind": "tool", "otelloop.signature.name": "call_api",
                    "otelloop.repeat_count": 3},
        message=ctx.findings[0].message,
    )]
    assert "call_api" in ctx.findings[0].message
    assert ctx.votes == {}
    assert run.session("s1").verdict == "continue"


def test_dedup_is_per_session() -> None:
    run = SeedRun("divergence")
    steps = [make_step("a", "tool", i, session=sid) for i in range(4) for sid in ("s1", "s2")]
    fired = [(s.session, i // 2) for i, (s, ctx) in enumerate(zip(steps, run.run(steps), strict=True)) if ctx.findings]
    assert fired == [("s1", 2), ("s2", 2)]


@pytest.mark.parametrize(("reload", "fired"), [
    pytest.param({"thresholds": {"tool": 4}}, [3], id="raised-threshold-next-step"),
    pytest.param({"thresholds": {"tool": 2}}, [2], id="lowered-below-run-fires-on-next-step"),
    pytest.param({"window": 2}, [], id="shrunk-window-caps-run"),
])
def test_reload_applies_from_next_step(reload: dict, fired: list[int]) -> None:
    run = SeedRun("divergence")
    first = run.run([make_step("a", "tool", i) for i in range(2)])
    run.reconfigure({"divergence": reload})
    later = run.run([make_step("a", "tool", i) for i in range(2, 5)])
    assert [i for i, ctx in enumerate(first + later) if ctx.findings] == fired


def test_emitted_signatures_stay_bounded() -> None:
    run = SeedRun("divergence")
    signatures = MAX_EMITTED * 3
    steps = [make_step(f"tool_{n}", "tool", 3 * n + k) for n in range(signatures) for k in range(3)]
    assert sum(1 for ctx in run.run(steps) if ctx.findings) == signatures
    assert len(run.session("s1").state("divergence").emitted) == MAX_EMITTED


def test_summary() -> None:
    run = SeedRun("divergence")
    run.run([make_step("a", "tool", i) for i in range(4)])
    summary = run.engine.summaries(run.session("s1"))["divergence"]
    assert summary == {"last_signature": {"kind": "tool", "name": "a"}, "repeat_count": 4,
                       "emitted_signatures": 1}


def test_config_defaults_match_spec() -> None:
    """The seed profile keeps the strict thresholds; the default profile waits for a fourth tool step."""
    seed = build_config({"detectors": {"profile": "seed"}}, env={}).detectors["divergence"]
    assert (seed.enabled, seed.window, seed.thresholds) == (True, 8, {"tool": 3, "llm": 5, "system": 999})
    cfg = DivergenceConfig()
    assert (cfg.enabled, cfg.window, cfg.thresholds) == (True, 8, {"tool": 4, "llm": 5, "system": 999})
