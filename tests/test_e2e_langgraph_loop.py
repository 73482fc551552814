"""End to end: a real LangGraph ReAct agent stuck on one search, traced by OpenInference.

The agent's spans go through the real OTel SDK (OTLP/gRPC) to a real ``otelloop serve`` that forwards to
a sink, and at the same time to a recorder, so the very same requests can be replayed through
``otelloop analyze`` and compared with what the live service found.

The positions of the findings below are those of the strict rules, so otelloop runs
under ``detectors.profile: seed`` here (the default profile's verdicts on real agents are held by the
labelled corpus, ``tests/test_corpus_quality.py``). Two ways of being stuck, both with the scripted model
asking ``search_web("weather in Paris")`` six times before it answers:

- ``one_call_per_turn``: one call per model turn (the usual ReAct loop). Each tool step is separated from
  the next by the ``agent``, LLM, ``route`` and ``tools`` steps, so divergence's consecutive-repeat count
  never passes 1 and a window of 5 always holds 5 distinct entries: no ``divergence_suspected`` and no
  ``entropy_alert``. The loop is caught by ``trajectory`` (stutter) and ``stall`` (the agent node's
  output repeats) instead.
- ``parallel_calls``: one model turn asking for the same search six times at once (ToolNode runs them as
  six consecutive tool steps): divergence fires on the 3rd and entropy is LOOP on the 5th and 6th.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import extras
import pytest
from served import BackgroundLoop, Served, wait_for
from sinks import GrpcSink
from spans import attrs_of, events_of, parse

from otelloop.otlp.json_codec import json_to_protobuf, request_to_json

extras.require("frameworks")

from agent_graphs import (  # noqa: E402, F401 (instrumented is a fixture)
    ScriptedChatModel,
    SwitchTracerProvider,
    Tracing,
    ai_calls,
    ask,
    instrumented,
    oi_kind,
    react_graph,
    tool_call,
)
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

pytestmark = pytest.mark.frameworks

SEED = {"detectors": {"profile": "seed"}}
QUERY = "weather in Paris"
CALLS = 6
ANSWER = "I could not find the weather in Paris."
#: The divergence and entropy defaults (docs/detectors.md), for the oracle below.
DIVERGENCE_THRESHOLDS = {"tool": 3, "llm": 5}
DIVERGENCE_WINDOW = 8
ENTROPY_WINDOW = 5
ENTROPY_LOOP = 0.25


@tool
def search_web(query: str) -> str:
    """Search the web."""
    return f"no results for {query}"


def scripted(per_turn: int) -> Any:
    """The model's policy: ``CALLS`` identical searches, ``per_turn`` per turn, then the answer."""
    turns = CALLS // per_turn
    asked = {"turns": 0}

    def policy(messages: list[Any]) -> AIMessage:
        asked["turns"] += 1
        n = asked["turns"]
        if n > turns:
            return AIMessage(content=ANSWER)
        calls = [tool_call("search_web", {"query": QUERY}, f"call_{n}_{k}") for k in range(per_turn)]
        return ai_calls(*calls)

    return policy


@dataclass(frozen=True)
class Scenario:
    """A way of looping and where each finding lands (docs/detectors.md).

    Positions are ``(span name, n)``: the n-th span of that name in processing order (start time, as the
    whole run is exported in one request), counting from 1.
    """

    id: str
    per_turn: int
    findings: dict[str, list[tuple[str, int]]]
    #: where the verdict changes: position -> verdict from that span on
    verdicts: dict[tuple[str, int], str]
    reason: str


SCENARIOS = [
    Scenario("one_call_per_turn", 1, {
        "otelloop.divergence_suspected": [],
        "otelloop.entropy_alert": [],
        # stutter at the 3rd identical call (score 2.0: NUDGE); stutter + semantic repeat at the 4th (STOP)
        "otelloop.intervention": [("search_web", 3), ("search_web", 4)],
        # the agent node gave the same tool-call message 3 turns in a row; its 7th turn is over budget (6)
        "otelloop.loop_halted": [("agent", 3), ("agent", 7)],
    }, {("agent", 3): "stop"}, "loop_halted: stalled"),
    Scenario("parallel_calls", CALLS, {
        "otelloop.divergence_suspected": [("search_web", 3)],
        "otelloop.entropy_alert": [("search_web", 5), ("search_web", 6)],
        "otelloop.intervention": [("search_web", 3), ("search_web", 4)],
        "otelloop.loop_halted": [],
    }, {("search_web", 3): "nudge", ("search_web", 4): "stop"}, "trajectory loop score 5"),
]


@dataclass
class Run:
    """What one scenario produced: the forwarded spans in processing order and what otelloop said."""

    scenario: Scenario
    spans: list[Any]
    recorded: list[bytes]
    verdict: dict[str, Any]
    session: str
    messages: list[Any]
    files: dict[str, Path] = field(default_factory=dict)

    def position(self, name: str, n: int) -> Any:
        return [s for s in self.spans if s.name == name][n - 1]

    def events(self, name: str) -> list[str]:
        """Span ids carrying event ``name``, in processing order."""
        return [s.span_id.hex() for s in self.spans for e, _ in events_of(s) if e == name]


@pytest.fixture(scope="module")
def bg() -> Iterator[BackgroundLoop]:
    loop = BackgroundLoop()
    yield loop
    loop.close()


@pytest.fixture(scope="module", params=SCENARIOS, ids=[s.id for s in SCENARIOS])
def run(request: pytest.FixtureRequest, instrumented: SwitchTracerProvider, bg: BackgroundLoop,  # noqa: F811
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """Run the agent once: SDK → otelloop → forward sink, and SDK → recorder."""
    scenario: Scenario = request.param
    tmp = tmp_path_factory.mktemp(scenario.id)
    forward, recorder = bg.run(GrpcSink().start()), bg.run(GrpcSink().start())
    served = Served(tmp, {"exporter": {"endpoint": f"grpc://127.0.0.1:{forward.port}"}, **SEED})
    try:
        tracing = Tracing(instrumented, f"weather-agent-{scenario.id}",
                          [served.grpc, f"127.0.0.1:{recorder.port}"])
        try:
            model = ScriptedChatModel(policy=scripted(scenario.per_turn))
            messages = ask(react_graph(model, [search_web]), "What's the weather in Paris?")
        finally:
            tracing.finish()
        recorded = list(recorder.delivered)
        sent = sum(len(parse(r)) for r in recorded)
        wait_for(lambda: sum(len(parse(d)) for d in list(forward.delivered)) == sent,
                 what="every span forwarded")
        spans = [s for d in forward.delivered for s in parse(d)]
        spans.sort(key=lambda s: s.start_time_unix_nano)  # within one request, steps go by start time
        session = spans[0].trace_id.hex()
        status, body = served.get(f"/v1/sessions/{session}/verdict")
        assert status == 200, body
        yield Run(scenario, spans, recorded, json.loads(body), session, messages)
    finally:
        served.stop()
        bg.run(forward.stop())
        bg.run(recorder.stop())


# ---------------------------------------------------------------------------------------------------
# An independent reading of the divergence and entropy rules (docs/detectors.md) over the forwarded spans


def step_entry(span: Any) -> tuple[str, str, str]:
    """(kind, name, outcome) of an OpenInference step span, as docs/mapping.md reads it."""
    a = attrs_of(span)
    kind = oi_kind(a)
    assert kind is not None, f"{span.name} is not a step"
    name = a.get("tool.name", span.name) if kind == "tool" else span.name
    outcome = "error" if span.status.code == 2 else ("success" if a.get("output.value") else "empty")
    return kind, name, outcome


def divergence_oracle(entries: list[tuple[str, str, str]]) -> list[int]:
    """Indexes where a (kind, name) run first reaches its kind's threshold (once per signature)."""
    fired, seen, run = [], set(), 0
    for i, (kind, name, _) in enumerate(entries):
        run = min(run + 1, DIVERGENCE_WINDOW) if i and entries[i - 1][:2] == (kind, name) else 1
        if run >= DIVERGENCE_THRESHOLDS.get(kind, 999) and (kind, name) not in seen:
            seen.add((kind, name))
            fired.append(i)
    return fired


def entropy_oracle(entries: list[tuple[str, str, str]]) -> list[int]:
    """Indexes whose window of the last 5 entries scores LOOP (intent = kind: no gen_ai.operation.name)."""
    loops = []
    for i in range(len(entries)):
        window = entries[max(0, i + 1 - ENTROPY_WINDOW):i + 1]
        if round(len(set(window)) / len(window), 4) < ENTROPY_LOOP:
            loops.append(i)
    return loops


# ---------------------------------------------------------------------------------------------------
# Live service


def test_the_agent_really_looped(run: Run) -> None:
    """The scenario is what it claims: six identical searches, then the scripted answer."""
    calls = [c for m in run.messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert [(c["name"], c["args"]) for c in calls] == [("search_web", {"query": QUERY})] * CALLS
    assert run.messages[-1].content == ANSWER
    assert sum(s.name == "search_web" for s in run.spans) == CALLS


def test_the_independent_oracle_agrees_with_the_expected_positions(run: Run) -> None:
    """The hand-written positions follow from divergence's and entropy's rules and this run's step order."""
    entries = [step_entry(s) for s in run.spans]
    ids = [s.span_id.hex() for s in run.spans]
    expected = run.scenario.findings
    divergence = expected["otelloop.divergence_suspected"]
    assert [ids[i] for i in divergence_oracle(entries)] == _ids(run, divergence)
    assert [ids[i] for i in entropy_oracle(entries)] == _ids(run, expected["otelloop.entropy_alert"])


@pytest.mark.parametrize("event", ["otelloop.divergence_suspected", "otelloop.entropy_alert",
                                   "otelloop.intervention", "otelloop.loop_halted"])
def test_findings_sit_on_the_span_that_completed_them(run: Run, event: str) -> None:
    assert run.events(event) == _ids(run, run.scenario.findings[event])


def test_events_carry_their_documented_attributes(run: Run) -> None:
    """Common attributes on every event, and each detector's own ones."""
    actions = []
    for span in run.spans:
        for name, attrs in events_of(span):
            if name == "gen_ai.evaluation.result":  # the verdict as a GenAI evaluation (docs/detectors.md)
                assert attrs["gen_ai.evaluation.name"] == "otelloop.verdict"
                assert attrs["gen_ai.evaluation.score.label"] == attrs_of(span)["otelloop.verdict"]
                continue
            assert attrs["otelloop.session_id"] == run.session
            assert attrs["otelloop.agent_id"] == f"weather-agent-{run.scenario.id}"
            if name == "otelloop.intervention":
                actions.append(attrs["otelloop.action"])
                assert "stutter" in attrs["otelloop.loop_types"]
                assert "search_web" in attrs["otelloop.nudge_message"]
            elif name == "otelloop.divergence_suspected":
                assert (attrs["otelloop.severity"], attrs["otelloop.signature.kind"],
                        attrs["otelloop.signature.name"], attrs["otelloop.repeat_count"]) == (
                    "warn", "tool", "search_web", 3)
            elif name == "otelloop.entropy_alert":
                assert (attrs["otelloop.severity"], attrs["otelloop.repeated_pattern.tool_call"],
                        attrs["otelloop.repeated_pattern.intent"], attrs["otelloop.occurrence_count"],
                        attrs["otelloop.entropy_score"]) == ("loop", "search_web", "tool", 5, 0.2)
            elif name == "otelloop.loop_halted":
                assert attrs["otelloop.cycle_id"] == "agent,tools"
                assert attrs["otelloop.severity"] == "stop"
    assert actions == ["nudge", "stop"]


def test_every_step_span_carries_the_verdict_as_it_stood(run: Run) -> None:
    """``otelloop.verdict`` is the verdict as it stood after each step; stop holds once raised."""
    changes = {run.position(*pos).span_id: verdict for pos, verdict in run.scenario.verdicts.items()}
    verdict = "continue"
    for span in run.spans:
        verdict = changes.get(span.span_id, verdict)
        assert attrs_of(span).get("otelloop.verdict") == verdict, span.name


def test_verdict_api_says_stop(run: Run) -> None:
    """Trajectory STOP and loop_halted both mean ``stop``; the first stop vote gives the reason."""
    assert run.verdict["verdict"] == "stop"
    assert run.verdict["reason"].startswith(run.scenario.reason)
    assert "Stop" in run.verdict["message"]


def _ids(run: Run, positions: list[tuple[str, int]]) -> list[str]:
    return [run.position(name, n).span_id.hex() for name, n in positions]


# ---------------------------------------------------------------------------------------------------
# The same requests, replayed offline


@pytest.fixture(scope="module")
def offline(run: Run, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``otelloop analyze FILE --json --output OUT`` over the recorded requests as OTLP/JSON lines."""
    tmp = tmp_path_factory.mktemp(f"analyze-{run.scenario.id}")
    recording, enriched = tmp / "recorded.jsonl", tmp / "enriched.jsonl"
    recording.write_text("".join(json.dumps(request_to_json(r)) + "\n" for r in run.recorded))
    proc = analyze(recording, "--json", "--output", str(enriched))
    assert proc.returncode == 0, proc.stderr
    run.files.update(recording=recording, enriched=enriched)
    return json.loads(proc.stdout)


def analyze(*args: Any) -> subprocess.CompletedProcess[str]:
    """``otelloop analyze`` under the seed profile, like the live service of :func:`run`."""
    config = Path(str(args[0])).with_name("seed.yaml")
    config.write_text(json.dumps(SEED))
    return subprocess.run([sys.executable, "-m", "otelloop", "analyze", *map(str, args), "--config", str(config)],
                          check=False, capture_output=True, text=True, timeout=60)


def test_analyze_reports_the_live_findings(run: Run, offline: dict[str, Any]) -> None:
    [report] = offline["sessions"]
    live = Counter((attrs["otelloop.detector"], name, s.span_id.hex())
                   for s in run.spans for name, attrs in events_of(s) if name.startswith("otelloop."))
    replayed = Counter((f["detector"], f["event"], f["span_id"]) for f in report["findings"])
    assert replayed == live
    assert sum(live.values()) == sum(len(v) for v in run.scenario.findings.values())
    assert (report["session_id"], report["verdict"], report["steps"]) == (run.session, "stop", len(run.spans))


def test_analyze_output_is_what_the_service_forwarded(run: Run, offline: dict[str, Any]) -> None:
    """``--output`` holds the enriched spans as OTLP/JSON lines, identical to the live service's."""
    lines = run.files["enriched"].read_text().splitlines()
    assert len(lines) == len(run.recorded)
    written = {s.span_id: s for line in lines for s in parse(json_to_protobuf(line))}
    assert written == {s.span_id: s for s in run.spans}


def test_analyze_fail_on_nudge_fails_the_ci_job(run: Run, offline: dict[str, Any]) -> None:
    """The same file exits 0 without ``--fail-on`` (see ``offline``) and 1 with it: the verdict is stop."""
    proc = analyze(run.files["recording"], "--fail-on", "nudge")
    assert proc.returncode == 1, proc.stderr
    assert run.session in proc.stdout
