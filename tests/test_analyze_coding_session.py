"""``otelloop analyze`` over a recorded coding-agent session finds the drift patterns.

``fixtures/coding_session.jsonl`` (written by ``fixtures/make_coding_session.py``) holds a Claude Code
session and an OpenHands session, each 11 agent turns of a ``chat`` step and a tool step (steps 1-22,
the tool step of turn n is step 2n) plus the root ``invoke_agent`` step, processed last (step 23).

Where each pattern *holds* (judged at the step that completes it) is read off the scripts by
hand below; which of those steps alert, and how hard, follows from the EMA and cooldown rules, computed
here by :func:`alerts` and also written out by hand.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otelloop.otlp.json_codec import json_to_request

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RECORDING = FIXTURES / "coding_session.jsonl"

CLAUDE, OPENHANDS = 1, 2
CLAUDE_CART = "/home/dev/shop/src/cart.py"
CLAUDE_TESTS = "uv run pytest tests/test_cart.py -q"
OPENHANDS_CART = "/workspace/shop/src/cart.py"
OPENHANDS_TESTS = "cd /workspace/shop && python -m pytest tests/test_cart.py -q"
STEPS = 23

#: session -> pattern -> (target, steps at which the pattern holds)
HOLDS: dict[int, dict[str, tuple[str, list[int]]]] = {
    CLAUDE: {
        "read_loop": (CLAUDE_CART, [6]),              # Read at 2, 4, 6 with no write in between
        "edit_revert": (CLAUDE_CART, [12]),           # Edit NEW→OLD undoes the Edit OLD→NEW at 8
        "test_fail_loop": (CLAUDE_TESTS, [16, 18, 20, 22]),  # failed at 10, 14, 16, ... same signature
    },
    OPENHANDS: {
        "read_loop": (OPENHANDS_CART, [6, 8, 10, 12]),  # view at 2, 4, ..., 12 with no write
        "edit_revert": (OPENHANDS_CART, [18]),        # str_replace NEW→OLD undoes the one at 14
        "test_fail_loop": (OPENHANDS_TESTS, [22]),    # failed at 16, 20, 22
    },
}

#: session -> (pattern, target, escalation, step) of every otelloop.drift event, in order
EXPECTED: dict[int, list[tuple[str, str, str, int]]] = {
    CLAUDE: [
        ("read_loop", CLAUDE_CART, "soft", 6),
        ("edit_revert", CLAUDE_CART, "soft", 12),
        ("test_fail_loop", CLAUDE_TESTS, "soft", 16),
        ("test_fail_loop", CLAUDE_TESTS, "hard", 22),  # 6 steps after the last alert; EMA 0.554 > 0.5
    ],
    OPENHANDS: [
        ("read_loop", OPENHANDS_CART, "soft", 6),
        ("read_loop", OPENHANDS_CART, "hard", 12),
        ("edit_revert", OPENHANDS_CART, "soft", 18),
        ("test_fail_loop", OPENHANDS_TESTS, "soft", 22),
    ],
}

ALPHA, COOLDOWN, ESCALATION = 0.3, 5, 0.5


def alerts(holds: dict[str, tuple[str, list[int]]]) -> list[tuple[str, str, str, int, float]]:
    """Drift's EMA and cooldown over one session: (pattern, target, escalation, step, ema) per alert."""
    out = []
    for pattern, (target, steps) in holds.items():
        ema, last = 0.0, None
        for step in range(1, STEPS + 1):
            x = 1.0 if step in steps else 0.0
            ema = ALPHA * x + (1 - ALPHA) * ema
            if x and (last is None or step - last > COOLDOWN):
                last = step
                out.append((pattern, target, "hard" if ema > ESCALATION else "soft", step, ema))
    return sorted(out, key=lambda a: a[3])


def span_id(session: int, step: int) -> str:
    """The generator's id scheme: ``session << 56 | step``."""
    return f"{session << 56 | step:016x}"


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[int, dict[str, Any]]:
    """The analysis under the seed profile, whose drift rules the tables above follow."""
    config = tmp_path_factory.mktemp("seed") / "seed.yaml"
    config.write_text("detectors: {profile: seed}\n")
    proc = subprocess.run([sys.executable, "-m", "otelloop", "analyze", str(RECORDING), "--json", "--config",
                           str(config)], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {int(s["session_id"], 16): s for s in json.loads(proc.stdout)["sessions"]}


def test_the_rules_give_the_hand_written_alerts() -> None:
    for session, expected in EXPECTED.items():
        assert [a[:4] for a in alerts(HOLDS[session])] == expected


@pytest.mark.parametrize("session", [CLAUDE, OPENHANDS], ids=["claude_code", "openhands"])
def test_drift_findings(report: dict[int, dict[str, Any]], session: int) -> None:
    r = report[session]
    assert r["steps"] == STEPS
    found = [f for f in r["findings"] if f["detector"] == "drift"]
    got = [(f["attributes"]["otelloop.drift.pattern"], f["attributes"]["otelloop.drift.target"],
            f["attributes"]["otelloop.drift.escalation"], f["span_id"]) for f in found]
    assert got == [(p, t, e, span_id(session, step)) for p, t, e, step in EXPECTED[session]]
    for f, (*_, escalation, _, ema) in zip(found, alerts(HOLDS[session]), strict=True):
        assert f["event"] == "otelloop.drift"
        assert f["severity"] == ("loop" if escalation == "hard" else "warn")
        assert f["attributes"]["otelloop.drift.ema"] == pytest.approx(ema)


def test_hard_drift_nudges_until_the_trend_falls_back(tmp_path: Path) -> None:
    """A hard escalation makes the verdict ``nudge``, and it falls back once the EMA is back at
    0.5 (the next step here). Trajectory, which would stop these sessions for their repeated calls, is
    disabled so drift's own vote shows in each span's ``otelloop.verdict``."""
    config, output = tmp_path / "drift-only.yaml", tmp_path / "enriched.jsonl"
    config.write_text("detectors: {profile: seed, trajectory: {enabled: false}}\n")
    proc = subprocess.run([sys.executable, "-m", "otelloop", "analyze", str(RECORDING), "--config",
                           str(config), "--output", str(output)],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    verdicts = {}
    for line in output.read_text().splitlines():
        for rs in json_to_request(line).resource_spans:
            for span in (s for ss in rs.scope_spans for s in ss.spans):
                [value] = [kv.value.string_value for kv in span.attributes if kv.key == "otelloop.verdict"]
                verdicts[span.span_id.hex()] = value
    assert len(verdicts) == 2 * STEPS
    hard = {span_id(session, step)
            for session, found in EXPECTED.items() for *_, escalation, step in found if escalation == "hard"}
    assert {sid for sid, v in verdicts.items() if v != "continue"} == hard
    assert {verdicts[sid] for sid in hard} == {"nudge"}


def test_fixture_is_what_its_generator_writes() -> None:
    """The committed recording is reproducible (ids and timestamps are fixed by the generator)."""
    sys.path.insert(0, str(FIXTURES))
    try:
        import make_coding_session
    finally:
        sys.path.remove(str(FIXTURES))
    fresh = make_coding_session.render().splitlines()
    committed = RECORDING.read_text().splitlines()
    assert [_spans(line) for line in fresh] == [_spans(line) for line in committed], \
        "stale fixture: run python tests/fixtures/make_coding_session.py"


def _spans(line: str) -> list[Any]:
    """A line's spans, less the W3C flags byte, which SDK versions set differently."""
    request = json_to_request(line)
    spans = [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
    for s in spans:
        s.ClearField("flags")
    return spans
