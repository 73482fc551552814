"""The ``drift`` detector: read loops, edit reverts, test-fail loops, EMA and escalation."""

from __future__ import annotations

from typing import Any

import pytest

from otelloop.detectors.drift import DriftState
from otelloop.model import Step
from tests.helpers import SeedRun, make_step

#: content / edit-text hashes used by the notation below
HASHES = {"x": 101, "y": 102, "z": 103}


def parse(script: str) -> list[Step]:
    """Steps from a compact notation, one per ``;``-separated item:

    ``R f`` read file f · ``W f n`` full write of content n · ``E f o n`` replace-style edit o → n ·
    ``F c s`` command c failed with error signature s · ``OK c`` command c succeeded · ``-`` a step
    that touches no file or command.
    """
    steps = []
    for i, item in enumerate(s.split() for s in script.split(";")):
        op, args = item[0], item[1:]
        kw: dict[str, Any] = {}
        if op == "R":
            kw = {"tool_class": "read", "file_path": f"/w/{args[0]}"}
        elif op == "W":
            kw = {"tool_class": "write", "file_path": f"/w/{args[0]}", "content_hash": int(args[1])}
        elif op == "E":
            kw = {"tool_class": "write", "file_path": f"/w/{args[0]}", "edit_old_hash": HASHES[args[1]],
                  "edit_new_hash": HASHES[args[2]]}
        elif op == "F":
            kw = {"tool_class": "exec", "command": args[0], "outcome": "error", "error_signature": args[1]}
        elif op == "OK":
            kw = {"tool_class": "exec", "command": args[0]}
        steps.append(make_step(f"tool_{op}", i=i, **kw))
    return steps


def alerts(script: str, **cfg: Any) -> list[tuple[str, str] | None]:
    """Per step: (pattern, escalation) of its drift event, or None."""
    run = SeedRun("drift", detectors={"drift": cfg} if cfg else None)
    out: list[tuple[str, str] | None] = []
    for ctx in run.run(parse(script)):
        assert len(ctx.findings) <= 1
        attrs = ctx.findings[0].attributes if ctx.findings else None
        out.append((attrs["otelloop.drift.pattern"], attrs["otelloop.drift.escalation"]) if attrs else None)
    return out


SOFT_READ = ("read_loop", "soft")
SOFT_REVERT = ("edit_revert", "soft")
SOFT_FAIL = ("test_fail_loop", "soft")


@pytest.mark.parametrize(("script", "expected"), [
    pytest.param("R a; R a; R a", [None, None, SOFT_READ], id="third-read-fires"),
    pytest.param("R a; R a; W a 1; R a; R a", [None] * 5, id="changing-write-resets"),
    pytest.param("R a; R a; W a 1; R a; R a; R a", [None] * 5 + [SOFT_READ], id="three-reads-after-change"),
    pytest.param("W a 1; R a; R a; W a 1; R a", [None] * 4 + [SOFT_READ], id="same-content-write-no-reset"),
    pytest.param("R a; R a; E a x x; R a", [None] * 3 + [SOFT_READ], id="no-op-edit-no-reset"),
    pytest.param("R a; R a; E a x y; R a", [None] * 4, id="edit-resets"),
    pytest.param("R a; R b; R a; R b; R c", [None] * 5, id="interleaved-files-quiet"),
    pytest.param("R a; R a; W b 1; R a", [None] * 3 + [SOFT_READ], id="write-to-other-file-no-reset"),
    pytest.param("R a; -; -; -; R a; R a", [None] * 6, id="first-read-left-window"),
    pytest.param("R a; -; -; R a; R a", [None] * 4 + [SOFT_READ], id="all-reads-in-window"),
    pytest.param("W a 1; W a 2; W a 1", [None, None, SOFT_REVERT], id="full-write-revert"),
    pytest.param("W a 1; W a 1", [None, None], id="rewrite-same-content-quiet"),
    pytest.param("W a 1; W a 2; W a 3; W a 4", [None] * 4, id="progressive-writes-quiet"),
    pytest.param("W a 1; W b 2; W a 2", [None] * 3, id="content-of-other-file-quiet"),
    pytest.param("W a 1; E a y z; W a 1", [None, None, SOFT_REVERT], id="revert-after-edit"),
    pytest.param("W a 1; -; -; -; W a 2; W a 1", [None] * 6, id="earlier-version-left-window"),
    pytest.param("E a x y; E a y x", [None, SOFT_REVERT], id="replace-style-revert"),
    pytest.param("E a x y; E a y z", [None, None], id="replace-style-progress-quiet"),
    pytest.param("E a x y; E b y x", [None, None], id="inverse-edit-other-file-quiet"),
    pytest.param("F t s1; F t s1; F t s1", [None, None, SOFT_FAIL], id="same-error-three-times"),
    pytest.param("F t s1; F t s2; F t s1", [None] * 3, id="different-error-quiet"),
    pytest.param("F t s1; F t s1; OK t; F t s1", [None] * 4, id="success-breaks"),
    pytest.param("F t s1; F u s2; F t s1; OK u; F t s1", [None] * 4 + [SOFT_FAIL], id="other-commands-interleaved"),
    pytest.param("F t s1; -; -; -; F t s1; F t s1", [None] * 6, id="first-failure-left-window"),
    pytest.param("-; -; -; -; -", [None] * 5, id="non-coding-steps-quiet"),
])
def test_patterns(script: str, expected: list[tuple[str, str] | None]) -> None:
    assert alerts(script, window=5) == expected


@pytest.mark.parametrize(("script", "threshold_key", "expected"), [
    pytest.param("R a; R a; R a; R a", "read_loop_threshold", [None, None, None, SOFT_READ], id="read-4"),
    pytest.param("F t s; F t s; F t s; F t s", "test_fail_threshold", [None, None, None, SOFT_FAIL], id="fail-4"),
])
def test_thresholds_are_configurable(script: str, threshold_key: str, expected: list[Any]) -> None:
    assert alerts(script, **{threshold_key: 4}) == expected


# Nine reads of one file: the pattern holds from the third on (x = 1), so with α = 0.3 the EMA runs
# 0.3, 0.51, 0.657, 0.7599, 0.83193, 0.882351, 0.9176457; the alert at step 3 is soft, steps 4-8 are in
# cooldown (5 steps), step 9 = 3 + 6 alerts again, now hard. Two quiet steps then decay it to
# 0.642352 and 0.4496464, which withdraws the nudge.
EMA_TABLE = [
    # (step, EMA after the step, (escalation, severity) of its event or None, verdict after the step)
    ("R a", 0.0, None, "continue"),
    ("R a", 0.0, None, "continue"),
    ("R a", 0.3, ("soft", "warn"), "continue"),
    ("R a", 0.51, None, "continue"),
    ("R a", 0.657, None, "continue"),
    ("R a", 0.7599, None, "continue"),
    ("R a", 0.83193, None, "continue"),
    ("R a", 0.882351, None, "continue"),
    ("R a", 0.9176457, ("hard", "loop"), "nudge"),
    ("-", 0.64235199, None, "nudge"),
    ("-", 0.449646393, None, "continue"),
]


def test_ema_cooldown_and_escalation() -> None:
    run = SeedRun("drift")
    steps = parse(";".join(row[0] for row in EMA_TABLE))
    for n, (step, (_, ema, event, verdict)) in enumerate(zip(steps, EMA_TABLE, strict=True), start=1):
        ctx = run.step(step)
        state: DriftState = run.session().state("drift")
        assert state.ema[0] == pytest.approx(ema), f"step {n}"
        assert state.ema[1] == state.ema[2] == 0.0
        got = [(f.attributes["otelloop.drift.escalation"], f.severity) for f in ctx.findings]
        assert got == ([event] if event else []), f"step {n}"
        if event:
            attrs = ctx.findings[0].attributes
            assert attrs["otelloop.drift.ema"] == pytest.approx(ema)
            assert attrs["otelloop.drift.target"] == "/w/a"
            assert ctx.findings[0].event == "otelloop.drift"
        assert run.session().verdict == verdict, f"step {n}"
    assert run.session().reason == ""


def test_hard_escalation_message_tells_the_agent_what_to_do() -> None:
    run = SeedRun("drift")
    run.run(parse(";".join(["R a"] * 9)))
    session = run.session()
    assert session.verdict == "nudge"
    assert session.reason == "drift read_loop"
    assert "You have read /w/a 9 times without changing it" in session.message


def test_cooldown_is_per_pattern() -> None:
    assert alerts("R a; R a; R a; F t s; F t s; F t s") == [None, None, SOFT_READ, None, None, SOFT_FAIL]


def test_zero_cooldown_alerts_every_holding_step() -> None:
    assert alerts("R a; R a; R a; R a", cooldown_steps=0) == [None, None, SOFT_READ, ("read_loop", "hard")]


def test_long_target_is_shortened() -> None:
    command = "echo " + "x" * 2000
    run = SeedRun("drift")
    steps = [make_step("Bash", i=i, tool_class="exec", command=command, outcome="error", error_signature="e")
             for i in range(3)]
    target = run.run(steps)[-1].findings[0].attributes["otelloop.drift.target"]
    assert isinstance(target, str) and len(target) == 512 and target.endswith("...")


def test_state_stays_bounded() -> None:
    run = SeedRun("drift")
    cycle = ["R a", "W a 1", "E b x y", "F t s", "OK u", "-", "R c"]
    script = ";".join(cycle[i % len(cycle)] if i % 11 else f"R f{i}" for i in range(10_000))
    run.run(parse(script))
    state: DriftState = run.session().state("drift")
    entries = [len(entries or ()) for entries in (state.reads, state.writes, state.runs)]
    assert state.steps == 10_000
    assert sum(entries) <= 20


def test_non_coding_session_keeps_no_entries() -> None:
    run = SeedRun("drift")
    run.run([make_step("search_web", i=i) for i in range(50)])
    state: DriftState = run.session().state("drift")
    assert state.reads is state.writes is state.runs is None


def test_a_session_that_never_drifts_stores_no_trend_and_a_faded_trend_is_forgotten() -> None:
    run = SeedRun("drift")
    for step in parse("-; R a; R b; OK c"):
        run.step(step)
    quiet: DriftState = run.session().state("drift")
    assert quiet.ema is DriftState().ema and quiet.last_alert is DriftState().last_alert  # shared, not per session
    run = SeedRun("drift")
    for step in parse("R a; R a; R a"):
        run.step(step)
    state: DriftState = run.session().state("drift")
    assert state.ema[0] > 0.2 and state.last_alert[0] == 3
    for step in parse(";".join(["-"] * 400)):
        run.step(step)
    assert state.ema is DriftState().ema and state.last_alert[0] == 3


def test_entries_leave_the_window_as_it_slides_and_at_once_when_a_reload_shrinks_it() -> None:
    run = SeedRun("drift", detectors={"drift": {"window": 6}})
    run.run(parse("R a; W b 1; F t s; -; -; -"))
    state: DriftState = run.session().state("drift")
    assert (len(state.reads or ()), len(state.writes or ()), len(state.runs or ())) == (1, 1, 1)
    assert state.oldest == 1
    run.run(parse("-"))  # step 7: the read of step 1 leaves a window of 6
    assert (len(state.reads or ()), len(state.writes or ()), len(state.runs or ())) == (0, 1, 1)
    assert state.oldest == 2
    run.reconfigure({"drift": {"window": 3}})
    run.run(parse("R c"))  # step 8: a window of 3 keeps steps 6 to 8 only
    assert (len(state.reads or ()), len(state.writes or ()), len(state.runs or ())) == (1, 0, 0)
    assert state.oldest == 8
    run.run(parse("-; -; -"))
    assert (state.reads, state.writes, state.runs, state.oldest) == ([], [], [], 0)
