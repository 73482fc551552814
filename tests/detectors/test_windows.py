"""Sliding windows shared between steps and sessions (otelloop.detectors.windows), and the trajectory
detector, which remembers its work by window: the same findings, scores and votes as computing every
step anew."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelloop.detectors import windows
from otelloop.detectors.windows import Slide, Windows
from tests.helpers import DetectorRun, SeedRun, make_step


def test_a_move_is_remembered_and_its_window_shared() -> None:
    w = Windows(3)
    a, b, c, d = "a", "b", "c", "d"
    first = w.slide((a, b, c), d)
    assert first.after == (b, c, d) and first.before == (a, b, c) and first.entry is d
    first.facts = "computed"
    again = w.slide(first.before, d)
    assert again is first and again.after is first.after and again.facts == "computed"


def test_moves_are_told_apart_by_the_content_of_entry_window_and_context() -> None:
    w = Windows(2)
    before = ("a",)
    assert w.slide(before, "b") is not w.slide(before, "c")
    twin = tuple(list(before))  # equal content, another object: the same move
    assert twin is not before
    assert w.slide(twin, "b") is w.slide(before, "b")
    assert w.slide(("z", "a"), "b").after is w.slide(("y", "a"), "b").after  # windows are shared by content
    assert w.slide(before, "b", True) is not w.slide(before, "b", False)
    assert w.slide((), "x").after == ("x",)


def test_a_loop_comes_back_to_the_same_windows() -> None:
    """Once its window holds only looping steps, a loop makes no new move: every step is a lookup."""
    w = Windows(4)
    window: tuple[str, ...] = ("start-1", "start-2")
    seen = []
    for i in range(40):
        move = w.slide(window, "ABC"[i % 3])
        window = move.after
        seen.append(len(w._moves))
    assert seen[-1] == seen[12] <= 4 + 3
    later = window
    for i in range(40, 43):  # one more period
        later = w.slide(later, "ABC"[i % 3]).after
    assert later is window


def test_a_window_longer_than_its_length_is_cut() -> None:
    """After a reload shrank the window, the first move cuts the older entries."""
    assert Windows(2).slide(("a", "b", "c", "d"), "e").after == ("d", "e")


def test_the_memory_of_moves_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(windows, "MAX_SLIDES", 10)
    w = Windows(4)
    slides = [w.slide((), f"entry-{i}") for i in range(25)]
    assert len(w._moves) <= 10
    assert w._moves.nbytes <= 10 * windows._SLIDE_BYTES
    assert all(isinstance(s, Slide) for s in slides)
    w._moves.clear()
    assert len(w._moves) == 0 and w._moves.nbytes == 0


class _Forgetful(Windows):
    """Windows that remember nothing: every step computes its facts anew."""

    def slide(self, before: tuple[Any, ...], entry: Any, context: Any = None) -> Slide:
        return Slide(entry, before, (*before, entry)[-self.length:])


_NAMES = ["read_file", "search", "run_tests", "write_file"]
_STEP = st.tuples(st.sampled_from(_NAMES), st.integers(0, 2), st.sampled_from([None, 1, 2, 3]),
                  st.sampled_from(["s1", "s2"]), st.sampled_from(["planner", "executor"]))


def _outputs(run: DetectorRun, steps: list[tuple[str, int, int | None, str, str]]) -> list[Any]:
    out = []
    for i, (name, args, output, session, agent) in enumerate(steps):
        step = make_step(name, i=i, session=session, agent=agent, args_hash=args, output_hash=output,
                         args_text=f'{{"q": "term {args}"}}', outcome="empty" if output is None else "success")
        ctx = run.step(step)
        out.append((dict(ctx.attributes), ctx.votes, [(f.event, f.severity, f.attributes) for f in ctx.findings]))
    return out


@pytest.mark.parametrize("runner", [DetectorRun, SeedRun])
@settings(max_examples=60, deadline=None)
@given(st.lists(_STEP, max_size=40))
def test_remembered_windows_give_what_computing_every_step_gives(
        runner: type[DetectorRun], steps: list[tuple[str, int, int | None, str, str]]) -> None:
    shared = runner("trajectory")
    fresh = runner("trajectory")
    fresh.engine.detectors[0]._windows = _Forgetful(10)  # type: ignore[attr-defined]
    assert _outputs(shared, steps) == _outputs(fresh, steps)


def test_the_same_window_in_a_session_with_two_agents_is_judged_by_agents() -> None:
    """Ping-pong compares tools in a one-agent session and agents once a second one has been seen:
    the same entries in a row are a cycle in one session and not in the other."""
    cycle = [("search", 0, 1, "s1", "planner"), ("read_file", 1, 2, "s1", "planner")] * 7
    other = [("write_file", 2, 3, "s2", "executor")] + [(n, a, o, "s2", ag) for n, a, o, _, ag in cycle]
    only_ping_pong = {"trajectory": {"similarity": "off"}}  # the other types do not fire on these
    shared = SeedRun("trajectory", detectors=only_ping_pong)
    outputs = _outputs(shared, cycle + other)
    fresh = SeedRun("trajectory", detectors=only_ping_pong)
    fresh.engine.detectors[0]._windows = _Forgetful(10)  # type: ignore[attr-defined]
    assert outputs == _outputs(fresh, cycle + other)
    assert outputs[len(cycle) - 1][0]["otelloop.loop_score"] > 0
    assert outputs[-1][0]["otelloop.loop_score"] == 0
