"""Arize Phoenix as the real trace viewer behind otelloop: the findings are where an operator looks for them.

Phoenix lives in its own virtualenv (it pins many packages), made by ``tests/deploy/phoenix_env.sh`` at
``${OTELLOOP_PHOENIX_VENV:-/tmp/otelloop-phoenix-venv}``. Its OTLP/gRPC server binds every interface, so
the whole scenario (``phoenix_scenario.py``: Phoenix, two otelloop processes, the looping agent) runs in a
private network namespace with only loopback (``unshare -n``, as root). The scenario forwards through
otelloop's OTLP/HTTP exporter to one Phoenix project and through its OTLP/gRPC exporter to another, reads
the spans back through Phoenix's REST API and prints a JSON summary, which this test checks span by span.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "phoenix_scenario.py"
DEFAULT_VENV = "/tmp/otelloop-phoenix-venv"
TIMEOUT = 120  # the whole scenario; Phoenix alone needs 12-25 s to start on this machine


def phoenix_venv() -> Path:
    venv = Path(os.environ.get("OTELLOOP_PHOENIX_VENV", DEFAULT_VENV))
    if not (venv / "bin" / "phoenix").exists():
        pytest.fail(f"Arize Phoenix is not installed at {venv} (OTELLOOP_PHOENIX_VENV). Create its venv "
                    "with `bash tests/deploy/phoenix_env.sh` (about 70 s, 850 MB); it never goes into "
                    "otelloop's own environment.")
    return venv


def unshare() -> str:
    path = shutil.which("unshare")
    if path is None or shutil.which("ip") is None:
        pytest.fail("`unshare` (util-linux) and `ip` (iproute2) are needed to run Phoenix in a private "
                    "network namespace with only loopback (Debian: `apt-get install -y util-linux "
                    "iproute2`).")
    if os.geteuid() != 0:
        pytest.fail("the Phoenix test runs Phoenix inside `unshare -n` (a private network namespace, so "
                    "that its gRPC port, which binds every interface, is reachable on loopback only); "
                    "that needs root.")
    return path


def run_scenario(tmp_path: Path) -> dict[str, Any]:
    venv = phoenix_venv()
    cmd = [unshare(), "-n", "--", sys.executable, str(SCENARIO), "--phoenix-venv", str(venv),
           "--workdir", str(tmp_path), "--timeout", str(TIMEOUT - 15)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    # own process group: if the scenario hangs, its children (Phoenix, otelloop) are stopped with it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGTERM)  # the scenario stops its children by pid on SIGTERM
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"the Phoenix scenario did not finish within {TIMEOUT}s\nstderr:\n{err[-4000:]}")
    lines = out.strip().splitlines()
    assert lines, f"the scenario printed nothing (rc {proc.returncode})\nstderr:\n{err[-4000:]}"
    try:
        summary = json.loads(lines[-1])
    except json.JSONDecodeError:
        raise AssertionError(f"no JSON summary (rc {proc.returncode}):\n{out[-2000:]}\n"
                             f"{err[-4000:]}") from None
    assert summary["ok"] and proc.returncode == 0, f"{summary.get('error')}\nstderr:\n{err[-4000:]}"
    return summary


@pytest.fixture(scope="module")
def summary(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_scenario(tmp_path_factory.mktemp("phoenix"))


def events(span: dict[str, Any]) -> dict[str, dict[str, Any]]:
    names = [e["name"] for e in span["events"]]
    assert len(names) == len(set(names)), f"an event appears twice on {span['span_id']}: {names}"
    return {e["name"]: e["attributes"] for e in span["events"]}


def test_scenario_ran_on_loopback_only(summary: dict[str, Any]) -> None:
    assert summary["interfaces"] == ["lo"]
    assert summary["phoenix_version"]
    assert set(summary["projects"]) == {"otelloop-via-http", "otelloop-via-grpc"}
    for project in summary["projects"].values():
        assert project["exported"] == project["sent"] == 12


@pytest.mark.parametrize("project", ["otelloop-via-http", "otelloop-via-grpc"])
def test_phoenix_shows_the_findings_on_the_right_spans(summary: dict[str, Any], project: str) -> None:
    p = summary["projects"][project]
    roles = p["roles"]
    spans = {s["span_id"]: s for s in p["spans"]}
    sent = {sid for ids in roles.values() for sid in ids}
    assert set(spans) == sent, "Phoenix must show exactly the spans the agent sent, with their own ids"

    root = spans[roles["loop_root"][0]]
    calls = [spans[sid] for sid in roles["loop_calls"]]
    session = root["trace_id"]
    assert all(c["trace_id"] == session and c["parent_id"] == root["span_id"] for c in calls)

    # the events (seed profile): divergence and the nudge on the 3rd identical call, the stop on the 4th, the
    # entropy LOOP once the window of 5 holds only the repeated call (5th and 6th)
    expected_events = [set(), set(), {"otelloop.divergence_suspected", "otelloop.intervention"},
                       {"otelloop.intervention"}, {"otelloop.entropy_alert"}, {"otelloop.entropy_alert"}]
    assert [{e for e in events(c) if e.startswith("otelloop.")} for c in calls] == expected_events
    # the verdict changes (nudge on the 3rd call, stop on the 4th) also as GenAI evaluation results
    assert ["gen_ai.evaluation.result" in events(c) for c in calls] == [False, False, True, True, False, False]
    assert events(root) == {}

    divergence = events(calls[2])["otelloop.divergence_suspected"]
    assert divergence["otelloop.signature.name"] == "search_web"
    assert divergence["otelloop.repeat_count"] == 3
    nudge, stop = events(calls[2])["otelloop.intervention"], events(calls[3])["otelloop.intervention"]
    assert (nudge["otelloop.action"], stop["otelloop.action"]) == ("nudge", "stop")
    assert "stutter" in nudge["otelloop.loop_types"] and nudge["otelloop.nudge_message"]
    for c in calls[4:]:
        alert = events(c)["otelloop.entropy_alert"]
        assert alert["otelloop.entropy_score"] == pytest.approx(0.2)
        assert alert["otelloop.repeated_pattern.tool_call"] == "search_web"
    for c in calls:
        for name, event_attrs in events(c).items():
            if name == "gen_ai.evaluation.result":
                assert event_attrs["gen_ai.evaluation.name"] == "otelloop.verdict"
                assert event_attrs["gen_ai.evaluation.score.label"] == c["otelloop_attributes"]["otelloop.verdict"]
                continue
            assert event_attrs["otelloop.session_id"] == session
            assert event_attrs["otelloop.agent_id"] == "research-agent"
            assert event_attrs["otelloop.severity"] in ("warn", "loop", "stop")

    # the attributes, on every step span (attribute-only UIs see the loop too)
    attrs = [c["otelloop_attributes"] for c in calls]
    assert [a["otelloop.verdict"] for a in attrs] == ["continue", "continue", "nudge", "stop", "stop", "stop"]
    assert [a["otelloop.loop_score"] for a in attrs] == pytest.approx([0.0, 0.0, 2.0, 5.0, 5.0, 5.0])
    assert [a["otelloop.entropy_score"] for a in attrs] == pytest.approx([1.0, 0.6667, 0.5, 0.4, 0.2, 0.2])
    assert [a["otelloop.entropy_severity"] for a in attrs] == [
        "normal", "normal", "normal", "warning", "loop", "loop"]
    assert [a["otelloop.intervention"] for a in attrs] == [
        "observe", "observe", "nudge", "stop", "stop", "stop"]
    assert root["otelloop_attributes"]["otelloop.verdict"] == "continue"
    assert "otelloop.loop_score" not in root["otelloop_attributes"]  # trajectory scores tool steps only

    # the healthy trace: verdicts and scores, no events; the non-step span is untouched
    for sid in roles["ok_calls"]:
        s = spans[sid]
        assert s["events"] == []
        assert s["otelloop_attributes"]["otelloop.verdict"] == "continue"
        assert s["otelloop_attributes"]["otelloop.loop_score"] == 0.0
        assert s["otelloop_attributes"]["otelloop.entropy_score"] == 1.0
    assert spans[roles["ok_root"][0]]["otelloop_attributes"]["otelloop.verdict"] == "continue"
    other = spans[roles["not_a_step"][0]]
    assert other["otelloop_attributes"] == {} and other["events"] == []
