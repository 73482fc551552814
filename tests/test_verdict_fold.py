"""Folding only the votes that changed gives the verdicts that folding every vote gives (``otelloop.state``).

``Session.apply_votes`` works the verdict out again only when a vote changed or a stop is first held: a
loop, stopped or not, repeats the same votes step after step. Every run of the corpus and the held-out
set, as recorded and in the variants where sessions are stopped and keep sending (per-call noise, one
trace per call, redelivery), goes through two pipelines: one as shipped and one whose sessions work the
verdict out after every fold, as before. Request by request they must forward the same bytes and report
the same findings; at the end every session must hold the same verdict, votes, history and evidence.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import replays

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))


from otelloop.config import Config  # noqa: E402
from otelloop.pipeline import Pipeline  # noqa: E402
from otelloop.state import Session  # noqa: E402
from tests.helpers import DetectorRun, make_step  # noqa: E402

VARIANTS = ("recorded", "noise-request-id", "trace-per-call-session", "redelivered")


def _view(session: Session) -> tuple[Any, ...]:
    """What a session shows, wall-clock times left out."""
    return (session.verdict, session.reason, session.message, session.votes, session.stop_hold,
            tuple(f[:4] + f[5:] for f in session.findings), tuple(h[1:] for h in session.history),
            session.loop_score, session.entropy_score)


def _replay(config: Config, requests: list[bytes]) -> tuple[list[Any], dict[str, Any]]:
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")
    out = []
    for data in requests:
        processed = pipeline.process(pipeline.decode(data))
        out.append((processed.data, [(step.span_id, f.detector, f.event, f.severity, f.attributes)
                                     for step, f in processed.findings]))
    return out, {s.id: _view(s) for s in pipeline.store}


def _fold_every_vote(session: Session, votes: Mapping[str, tuple[str, str, str]]) -> None:
    """The fold as it was: the verdict worked out after every fold, changed or not."""
    _shipped(session, votes)
    session.recompute()


_shipped = Session.apply_votes


@pytest.mark.parametrize("variant", VARIANTS)
def test_folding_only_changed_votes_changes_no_span_finding_or_verdict(variant: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    stopped = 0
    config = replays.variant_config(variant)
    for run_id, requests in replays.variant_runs(variant):
        shipped, shipped_end = _replay(config, requests)
        with monkeypatch.context() as patched:
            patched.setattr(Session, "apply_votes", _fold_every_vote)
            every, every_end = _replay(config, requests)
        for i, (a, b) in enumerate(zip(shipped, every, strict=True)):
            assert a == b, f"{run_id} request {i}: spans or findings differ"
        assert shipped_end == every_end, f"{run_id}: sessions differ"
        stopped += sum(view[0] == "stop" for view in shipped_end.values())
    assert stopped > 0, "no session was stopped: the comparison proves nothing about stopped sessions"


def test_a_stopped_session_keeps_its_verdict_history_and_current_votes() -> None:
    """After the stop, repeated votes leave the verdict and its history alone; a detector that rewords its
    vote is shown with the new words; a resume lifts the stop and starts from no votes."""
    run = DetectorRun("entropy", "trajectory")
    session = run.session()
    i = 0
    while session.verdict != "stop":
        run.step(make_step("read_file", i=i, args_hash=7, output_hash=99, tool_class="read", file_path="a.py"))
        i += 1
        assert i < 12, "the read loop was never stopped"
    history = session.history
    held = (session.reason, session.message)
    for k in range(6):
        ctx = run.step(make_step("read_file", i=i + k, args_hash=7, output_hash=99, tool_class="read",
                                 file_path="a.py"))
        assert ctx.attributes["otelloop.verdict"] == "stop"
    assert session.history == history and (session.reason, session.message) == held
    assert session.votes is not None and session.votes["trajectory"][0] == "stop"
    session.apply_votes({"entropy": ("nudge", "entropy loop", "reworded")})
    assert session.votes["entropy"] == ("nudge", "entropy loop", "reworded")
    assert session.verdict == "stop" and session.history == history
    session.resume()
    assert session.verdict == "continue" and session.votes is None
    assert session.history[-1][1:] == ("continue", "")
