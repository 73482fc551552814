"""The novelty gate changes the cost of detection, never its output; the hold
(``state.hold_stopped_sessions``) changes nothing a stopped session shows but what its held steps would
have added (``otelloop.detection``).

Every run of the corpus and the held-out set, as recorded and in a selection of the metamorphic variants
(per-call noise, content off, redelivery, one trace per call, retries, polls and batches), goes through two
pipelines: one with the gate (gated detectors only ``record`` a step that brought something new) and one
without (every detector observes every step). Request by request they must forward the same bytes — so
every span carries the same ``otelloop.*`` attributes and events — and report the same findings; at the
end every session must hold the same verdict, votes, scores and remembered evidence.

With the hold on as well (a stopped session's steps that bring nothing new are held), the recordings and
three variants must match the same way until a session's stop holds; after it every span must still
carry the same ``otelloop.*`` keys and the verdict, and at the end every session must hold the same
verdict, reason, message, verdict history and step counts.
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
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402

from otelloop.config import Config, build_config  # noqa: E402
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


def _stopped_view(view: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a stopped session shows whatever the hold: verdict, reason, message, held stop, verdict
    history, steps and unjudged steps (not the findings, votes or scores its held repeats leave out)."""
    return (*view[:3], view[4], view[6], *view[9:])


def _otelloop_attributes(data: bytes) -> list[tuple[list[str], Any]]:
    """Per span of a forwarded request: its ``otelloop.*`` attribute keys and its verdict."""
    request = ExportTraceServiceRequest.FromString(data)
    out = []
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                attrs = {a.key: a.value for a in sp.attributes if a.key.startswith("otelloop.")}
                out.append((sorted(attrs), attrs.get("otelloop.verdict")))
    return out


def _replay(config: Config, requests: list[bytes], gate: bool,
            hold: bool = False) -> tuple[list[Any], dict[str, Any], int, int]:
    """Per request: the bytes forwarded, the findings and whether a session's stop held after it; the
    sessions at the end; steps taken as calm, and as held."""
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")
    pipeline.engine.gate = gate
    pipeline.engine.hold = hold
    calm_steps = 0
    engine = pipeline.engine
    plan = engine._plan

    def counted(session: Session, step: Step) -> Any:
        nonlocal calm_steps
        chosen = plan(session, step)
        calm_steps += chosen is engine._calm
        return chosen

    engine._plan = counted  # type: ignore[method-assign]
    out = []
    for data in requests:
        processed = pipeline.process(pipeline.decode(data))
        stopped = any(s.stop_hold is not None for s in pipeline.store)
        found = [(step.span_id, f.detector, f.event, f.severity, f.attributes, f.message)
                 for step, f in processed.findings]
        out.append((processed.data, found, stopped))
    sessions = {s.id: _session_view(s) for s in pipeline.store}
    summaries = {s.id: pipeline.engine.summaries(s) for s in pipeline.store}
    held = sum(s.held for s in pipeline.store)
    return out, {"sessions": sessions, "summaries": summaries}, calm_steps, held


def _compare(variant: str) -> None:
    """Every run of ``variant`` with the gate (and no hold) and without: raises AssertionError at
    the first difference. Runs in a worker process (replays.py), queued after collection; the test
    re-raises what it raised."""
    config = replays.variant_config(variant)
    calm_total = 0
    for run_id, requests in replays.variant_runs(variant):
        gated, gated_end, calm, held = _replay(config, requests, gate=True)
        full, full_end, none, _ = _replay(config, requests, gate=False)
        assert none == 0 and held == 0
        calm_total += calm
        for i, (a, b) in enumerate(zip(gated, full, strict=True)):
            assert a[1] == b[1], f"{run_id} request {i}: findings differ with the gate on"
            assert a[0] == b[0], f"{run_id} request {i}: forwarded spans differ with the gate on"
        assert gated_end == full_end, f"{run_id}: sessions differ with the gate on"
    if variant not in ("content-off", "batch-empty"):  # there no step brings anything new to judge
        assert calm_total > 0, "the gate never let a step through calm: the comparison proves nothing"


def _compare_held(variant: str) -> None:
    """Every run of ``variant`` with the gate and the hold (``state.hold_stopped_sessions``) and with
    neither: equal until a stop holds, the same keys and verdict on every span after it, the same
    verdict, reason, message, history and step counts at the end (see the module docstring)."""
    config = replays.variant_config(variant)
    held_total = 0
    for run_id, requests in replays.variant_runs(variant):
        gated, gated_end, _, held = _replay(config, requests, gate=True, hold=True)
        full, full_end, _, none = _replay(config, requests, gate=False, hold=True)
        assert none == 0
        held_total += held
        for i, (a, b) in enumerate(zip(gated, full, strict=True)):
            assert a[2] == b[2], f"{run_id} request {i}: a stop held with the hold on and not without"
            if a[2]:  # from the stop on: the same keys and verdict on every span
                assert _otelloop_attributes(a[0]) == _otelloop_attributes(b[0]), (
                    f"{run_id} request {i}: a stopped session's spans differ in their otelloop keys")
                continue
            assert a[1] == b[1], f"{run_id} request {i}: findings differ with the hold on"
            assert a[0] == b[0], f"{run_id} request {i}: forwarded spans differ with the hold on"
        if any(view[4] is not None for view in full_end["sessions"].values()):
            ours = {k: _stopped_view(v) for k, v in gated_end["sessions"].items()}
            theirs = {k: _stopped_view(v) for k, v in full_end["sessions"].items()}
            assert ours == theirs, f"{run_id}: stopped sessions differ with the hold on"
        else:
            assert gated_end == full_end, f"{run_id}: sessions differ with the hold on"
    if variant == "recorded":  # the corpus's stopped loops go on sending
        assert held_total > 0, "no step was ever held: the comparison after the stop proves nothing"


#: The variants the hold is replayed on: the recordings, a noise form, redelivery, one trace per call.
HOLD_VARIANTS = ("recorded", "noise-epoch-ms", "redelivered", "trace-per-call-session")


def replays_for(item: pytest.Item) -> None:
    """The comparison a test reads, queued after collection (see replays.py)."""
    name = getattr(item, "originalname", "")
    if name == "test_the_gate_changes_no_span_finding_or_verdict":
        replays.start(_compare, item.callspec.params["variant"])  # type: ignore[attr-defined]
    elif name == "test_the_hold_changes_nothing_until_the_stop_nor_the_verdict":
        replays.start(_compare_held, item.callspec.params["variant"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("variant", ["recorded", *GATE_VARIANTS])
def test_the_gate_changes_no_span_finding_or_verdict(variant: str) -> None:
    replays.start(_compare, variant).result()


@pytest.mark.parametrize("variant", HOLD_VARIANTS)
def test_the_hold_changes_nothing_until_the_stop_nor_the_verdict(variant: str) -> None:
    replays.start(_compare_held, variant).result()


def test_a_watched_session_is_never_calm_nor_held() -> None:
    """A paused session, or one whose detail an operator read, runs every detector in full; only a stopped
    session's steps that bring nothing new are held."""
    now = [0.0]
    engine = DetectorEngine(clock=lambda: now[0], hold=True)  # state.hold_stopped_sessions: true
    session = Session("s", 0.0)
    step = Step("s", "tool", "read_file", novel=True)
    repeat, chat = Step("s", "tool", "read_file", novel=False), Step("s", "llm", "chat")
    assert engine.calm(session, step)
    assert not engine.calm(session, repeat)
    assert not engine.calm(session, chat)
    assert not any(engine.held(session, s) for s in (step, repeat, chat))  # not stopped
    session.apply_votes({"trajectory": ("stop", "loop", "stop it")})
    assert engine.held(session, repeat) and engine.held(session, chat) and not engine.held(session, step)
    engine.summaries(session)  # the sessions API's detail page
    assert not engine.calm(session, step) and not engine.held(session, repeat)
    now[0] += 301.0
    assert engine.calm(session, step) and engine.held(session, repeat)
    session.pause()
    assert not engine.calm(session, step) and not engine.held(session, repeat)
    session.resume()
    assert not engine.held(session, repeat)  # the stop no longer holds
    session.apply_votes({"trajectory": ("stop", "loop", "stop it")})
    engine.hold = False
    assert not engine.held(session, repeat) and engine.calm(session, step)
    engine.hold, engine.gate = True, False
    assert not engine.calm(session, step) and not engine.held(session, repeat)


def _read(i: int, output: int) -> Step:
    return make_step("read_file", i=i, args_hash=7, output_hash=output, tool_class="read", file_path="a.py",
                     args_text='{"path": "a.py"}', output_text=f"content {output}")


#: Every detector, as the pipeline runs them by default.
EVERY_DETECTOR = ("divergence", "rate", "drift", "entropy", "stall", "trajectory")


def _read_until_stopped(run: DetectorRun) -> tuple[int, Any]:
    """Feed session ``s1`` the same read until it is stopped: the next step's index, and what the
    stopping step was given."""
    session = run.session()
    i = 0
    while session.verdict != "stop":
        ctx = run.step(_read(i, 99))
        i += 1
        assert i < 10, "the read loop was never stopped"
    return i, ctx


def test_a_stopped_session_that_keeps_sending_is_held_until_it_is_resumed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """After the stop, the verdict holds and the session's repeats are held: no detector judges them, their
    spans carry the scores and levels as they stand, and the session counts them. A step that brings
    something new is only recorded by the gated detectors; after a resume every step is judged again."""
    judged: list[str] = []
    for cls in (TrajectoryDetector, EntropyDetector):
        for method in ("observe", "record"):
            original = getattr(cls, method)

            def spy(self: Any, state: Any, step: Step, ctx: Any, original: Any = original,
                    method: str = method) -> None:
                judged.append(f"{self.name}.{method}")
                original(self, state, step, ctx)

            monkeypatch.setattr(cls, method, spy)
    run = DetectorRun(*EVERY_DETECTOR, hold=True)
    session = run.session()
    i, ctx = _read_until_stopped(run)
    stopped_by, message, findings = session.reason, session.message, session.findings
    at_stop = {k: ctx.attributes[k] for k in ("otelloop.loop_score", "otelloop.intervention",
                                             "otelloop.entropy_score", "otelloop.entropy_severity")}
    judged.clear()
    for k in range(5):
        ctx = run.step(_read(i + k, 99))
        assert ctx.attributes == {**at_stop, "otelloop.verdict": "stop"} and not ctx.findings
    chat = run.step(Step("s1", "llm", "chat", start_ns=(i + 5) * 10**9))
    assert chat.attributes["otelloop.verdict"] == "stop" and "otelloop.loop_score" not in chat.attributes
    assert judged == [] and session.held == 6
    assert (session.verdict, session.reason, session.message, session.findings) == (
        "stop", stopped_by, message, findings)
    for k in range(3):  # new content each time: calm steps, recorded only
        step = _read(i + 6 + k, 1000 + k)
        ctx = run.step(step)
        assert step.novel is True and run.engine.calm(session, step)
        assert ctx.attributes["otelloop.verdict"] == "stop"
    assert judged == ["entropy.record", "trajectory.record"] * 3 and session.held == 6
    session.resume()
    judged.clear()
    run.step(_read(i + 9, 99))  # a repeat of a resumed session: judged in full
    assert judged == ["entropy.observe", "trajectory.observe"] and session.held == 0


def test_held_steps_keep_the_entropy_window_current_and_cut_it_after_a_reload() -> None:
    run = DetectorRun(*EVERY_DETECTOR, hold=True)
    session = run.session()
    i, _ = _read_until_stopped(run)
    for k in range(5):  # held repeats: the window holds five of the same read
        run.step(_read(i + k, 99))
    assert len(session.state("entropy").window) == 5
    assert run.step(make_step("chat", kind="llm", i=i + 5)).attributes["otelloop.entropy_score"] == 0.2
    run.reconfigure({"entropy": {"window": 3}})
    ctx = run.step(make_step("chat", kind="llm", i=i + 6))  # held, not counted: it still cuts the window
    assert session.held == 7 and len(session.state("entropy").window) == 3
    assert ctx.attributes["otelloop.entropy_score"] == 0.3333


@pytest.mark.parametrize("hold", [False, True])
def test_a_held_step_adds_its_spend_to_the_rates_but_raises_nothing(hold: bool) -> None:
    """The same expensive model call after the stop: judged, it raises ``cost_rate_exceeded``; held, its
    spend still counts in ``rate``'s totals (current after a resume), and nothing is raised on it."""
    rate = {"min_steps": 1, "min_elapsed": 0.001, "cost_usd_per_second": 1.0}
    run = DetectorRun(*EVERY_DETECTOR, detectors={"rate": rate}, hold=hold)
    session = run.session()
    i, _ = _read_until_stopped(run)
    spent = session.state("rate").cost_usd
    ctx = run.step(make_step("chat", kind="llm", i=i, cost_usd=40.0))  # 40 USD over about i seconds
    assert session.state("rate").cost_usd == spent + 40.0
    assert [f.event for f in ctx.findings] == ([] if hold else ["otelloop.cost_rate_exceeded"])
    assert session.held == (1 if hold else 0)


def test_the_hold_follows_the_configuration_and_its_reloads() -> None:
    """On by default; off when set so, or under the seed profile unless set on there; a reload applies."""
    pipeline = Pipeline(build_config({}, env={}))
    assert pipeline.engine.hold and pipeline.engine.gate
    for settings, hold in (({"state": {"hold_stopped_sessions": False}}, False),
                           ({"detectors": {"profile": "seed"}}, False),
                           ({"detectors": {"profile": "seed"}, "state": {"hold_stopped_sessions": True}}, True),
                           ({"state": {"hold_stopped_sessions": True}}, True), ({}, True)):
        pipeline.reconfigure(build_config(settings, env={}))
        assert pipeline.engine.hold is hold, settings
        assert pipeline.engine.gate


@pytest.mark.parametrize("threshold", [1, 4])
def test_divergence_judges_a_calm_step_in_full_under_a_threshold_of_one(threshold: int) -> None:
    """A read that brought something new is a run one step long: gated, divergence keeps it as its run and
    leaves it to ``observe`` only where a threshold of 1 reports such a run; the gate changes nothing."""
    runs = {}
    for gate in (True, False):
        run = DetectorRun("divergence", detectors={"divergence": {"thresholds": {"tool": threshold}}})
        run.engine.gate = gate
        contexts = run.run([_read(i, i) for i in range(3)])
        state = run.session().state("divergence")
        runs[gate] = ([[f.event for f in ctx.findings] for ctx in contexts], (state.kind, state.name, state.run))
    assert runs[True] == runs[False]
    assert runs[True][0] == ([["otelloop.divergence_suspected"], [], []] if threshold == 1 else [[], [], []])
    assert runs[True][1] == ("tool", "read_file", 1)
