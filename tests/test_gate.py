"""The novelty gate changes the cost of detection, never its output (``otelloop.detection``).

Every run of the corpus and the held-out set, as recorded and in a selection of the metamorphic variants
(per-call noise, content off, redelivery, one trace per call, retries, polls and batches), goes through two
pipelines: one with the gate (gated detectors only ``record`` a step that brought something new) and one
without (every detector observes every step). Request by request they must forward the same bytes — so
every span carries the same ``otelloop.*`` attributes and events — and report the same findings; at the
end every session must hold the same verdict, votes, scores and remembered evidence.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import replays

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import variants as V  # noqa: E402

from otelloop.config import Config  # noqa: E402
from otelloop.detection import DetectorEngine  # noqa: E402
from otelloop.detectors.entropy import EntropyDetector  # noqa: E402
from otelloop.detectors.trajectory import TrajectoryDetector  # noqa: E402
from otelloop.model import Step  # noqa: E402
from otelloop.pipeline import Pipeline  # noqa: E402
from otelloop.state import Session  # noqa: E402
from tests.helpers import DetectorRun, make_step  # noqa: E402

#: The variants replayed besides the recordings: every noise form, content off, both redeliveries, one
#: trace per call (by trace and joined by session), and the healthy retry, poll and batch patterns.
GATE_VARIANTS = (
    *(name for name in V.VARIANTS if name.startswith("noise-")),
    "content-off", "redelivered", "redelivered-delayed", "trace-per-call", "trace-per-call-session",
    "retry-succeeds-8", "poll-succeeds-7", "batch-alike", "batch-empty",
)


def _session_view(session: Session) -> tuple[Any, ...]:
    """What a session shows (the sessions API, the console), wall-clock times left out."""
    findings = tuple(f[:4] + f[5:] for f in session.findings)
    history = tuple(h[1:] for h in session.history)
    return (session.verdict, session.reason, session.message, session.votes, session.stop_hold, findings,
            history, session.loop_score, session.entropy_score, session.steps, session.unjudged)


def _replay(config: Config, requests: list[bytes], gate: bool) -> tuple[list[Any], dict[str, Any], int]:
    """Per request: the bytes forwarded and the findings; the sessions at the end; steps taken as calm."""
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")
    pipeline.engine.gate = gate
    calm_steps = 0
    judge = pipeline.engine.calm

    def counted(session: Session, step: Step) -> bool:
        nonlocal calm_steps
        calm = judge(session, step)
        calm_steps += calm
        return calm

    pipeline.engine.calm = counted  # type: ignore[method-assign]
    out = []
    for data in requests:
        processed = pipeline.process(pipeline.decode(data))
        found = [(step.span_id, f.detector, f.event, f.severity, f.attributes, f.message)
                 for step, f in processed.findings]
        out.append((processed.data, found))
    sessions = {s.id: _session_view(s) for s in pipeline.store}
    summaries = {s.id: pipeline.engine.summaries(s) for s in pipeline.store}
    return out, {"sessions": sessions, "summaries": summaries}, calm_steps


def _compare(variant: str) -> None:
    """Every run of ``variant`` with the gate and without: raises AssertionError at the first difference.
    Runs in a worker process (replays.py), queued after collection; the test re-raises what it raised."""
    config = replays.variant_config(variant)
    calm_total = 0
    for run_id, requests in replays.variant_runs(variant):
        gated, gated_end, calm = _replay(config, requests, gate=True)
        full, full_end, none = _replay(config, requests, gate=False)
        assert none == 0
        calm_total += calm
        for i, (a, b) in enumerate(zip(gated, full, strict=True)):
            assert a[1] == b[1], f"{run_id} request {i}: findings differ with the gate on"
            assert a[0] == b[0], f"{run_id} request {i}: forwarded spans differ with the gate on"
        assert gated_end == full_end, f"{run_id}: sessions differ with the gate on"
    if variant not in ("content-off", "batch-empty"):  # there no step brings anything new to judge
        assert calm_total > 0, "the gate never let a step through calm: the comparison proves nothing"


def replays_for(item: pytest.Item) -> None:
    """The comparison a test reads, queued after collection (see replays.py)."""
    if getattr(item, "originalname", "") == "test_the_gate_changes_no_span_finding_or_verdict":
        replays.start(_compare, item.callspec.params["variant"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("variant", ["recorded", *GATE_VARIANTS])
def test_the_gate_changes_no_span_finding_or_verdict(variant: str) -> None:
    replays.start(_compare, variant).result()


def test_a_watched_session_is_never_calm() -> None:
    """A paused session, or one whose detail an operator read, runs every detector in full."""
    now = [0.0]
    engine = DetectorEngine(clock=lambda: now[0])
    session = Session("s", 0.0)
    step = Step("s", "tool", "read_file", novel=True)
    assert engine.calm(session, step)
    assert not engine.calm(session, Step("s", "tool", "read_file", novel=False))
    assert not engine.calm(session, Step("s", "llm", "chat"))
    engine.summaries(session)  # the sessions API's detail page
    assert not engine.calm(session, step)
    now[0] += 301.0
    assert engine.calm(session, step)
    session.pause()
    assert not engine.calm(session, step)
    session.resume()
    engine.gate = False
    assert not engine.calm(session, step)


def _read(i: int, output: int) -> Step:
    return make_step("read_file", i=i, args_hash=7, output_hash=output, tool_class="read", file_path="a.py",
                     args_text='{"path": "a.py"}', output_text=f"content {output}")


def test_a_stopped_session_that_keeps_sending_keeps_its_verdict_and_evidence_current(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the stop, the verdict holds, a finding reported again counts up, and a step that brings
    something new is only recorded by the gated detectors, stopped session or not."""
    judged: list[str] = []
    for cls in (TrajectoryDetector, EntropyDetector):
        full = cls.observe

        def observe(self: Any, state: Any, step: Step, ctx: Any, full: Any = full) -> None:
            judged.append(self.name)
            full(self, state, step, ctx)

        monkeypatch.setattr(cls, "observe", observe)
    run = DetectorRun("divergence", "rate", "drift", "entropy", "stall", "trajectory")
    session = run.session()
    i = 0
    while session.verdict != "stop":
        run.step(_read(i, 99))
        i += 1
        assert i < 10, "the read loop was never stopped"
    stopped_by, message = session.reason, session.message

    def count(event: str) -> int:
        return next((f[5] for f in session.findings if f[1] == event), 0)

    before = count("otelloop.entropy_alert")
    for k in range(5):
        ctx = run.step(_read(i + k, 99))
        assert ctx.attributes["otelloop.verdict"] == "stop"
        assert count("otelloop.entropy_alert") == before + k + 1  # "reported N times" stays current
    assert (session.verdict, session.reason, session.message) == ("stop", stopped_by, message)
    judged.clear()
    for k in range(5):  # new content each time: calm steps, recorded only
        step = _read(i + 5 + k, 1000 + k)
        ctx = run.step(step)
        assert step.novel is True and run.engine.calm(session, step)
        assert ctx.attributes["otelloop.verdict"] == "stop"
    assert judged == []
    assert session.verdict == "stop" and session.reason == stopped_by
    run.step(_read(i + 10, 99))  # a repeat again: judged in full
    assert judged == ["entropy", "trajectory"]
