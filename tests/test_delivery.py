"""At-least-once delivery: a span seen again changes nothing; a span enriched before is re-enriched, never
given a key or an event twice; each verdict change is also a GenAI evaluation result."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from spans import attrs_of, kvs, parse, request, tool_span

from otelloop import delivery
from otelloop.analyze import analyze, read_requests
from otelloop.config import build_config
from otelloop.model import Step
from otelloop.otlp.json_codec import request_to_json
from otelloop.pipeline import Pipeline, run

CORPUS = Path(__file__).resolve().parents[1] / "benchmarks" / "corpus" / "runs"


def loop_requests(n: int = 8, trace: int = 5) -> list[bytes]:
    """One identical tool call per request: a loop the default profile stops."""
    return [request(tool_span(trace=trace, i=i)) for i in range(n)]


def duplicates(p: Pipeline) -> float:
    return p.metrics.registry.get_sample_value("otelloop_spans_duplicate_total") or 0.0


def event_names(s: Span) -> list[str]:
    return [e.name for e in s.events]


def assert_unique_keys(data: bytes) -> None:
    for s in parse(data):
        keys = [kv.key for kv in s.attributes]
        assert len(keys) == len(set(keys)), Counter(keys).most_common(3)
        for e in s.events:
            ekeys = [kv.key for kv in e.attributes]
            assert len(ekeys) == len(set(ekeys))


# -- duplicates ----------------------------------------------------------------------------------------


def test_a_request_delivered_twice_changes_nothing_and_is_forwarded_as_it_came() -> None:
    p = Pipeline()
    data = request(tool_span(trace=3, i=0), tool_span("read_file", '{"path": "a"}', "x", trace=3, i=1))
    first = p.process(p.decode(data))
    session = p.store.get(format(3, "032x"))
    before = (session.steps, session.cost_usd, session.verdict, bytes(session.seen.ring), session.recent)
    again = p.process(p.decode(data))
    assert (session.steps, session.cost_usd, session.verdict, bytes(session.seen.ring), session.recent) == before
    assert first.modified and not again.modified and again.data == data
    assert again.findings == [] and duplicates(p) == 2


def test_a_loop_delivered_twice_is_judged_as_once() -> None:
    once, twice = Pipeline(), Pipeline()
    verdicts_once, verdicts_twice = [], []
    for data in loop_requests():
        once.process(once.decode(data))
        verdicts_once.append(once.store.get(format(5, "032x")).verdict)
        for _ in range(2):
            twice.process(twice.decode(data))
        verdicts_twice.append(twice.store.get(format(5, "032x")).verdict)
    assert verdicts_once == verdicts_twice and "stop" in verdicts_once
    assert twice.store.get(format(5, "032x")).steps == 8 and duplicates(twice) == 8


def test_spans_without_a_span_id_are_refused_and_never_taken_for_duplicates() -> None:
    """A span without a span id is invalid OTLP (refused at the receiver, docs/architecture.md): it names
    no step and is no duplicate of another."""
    p = Pipeline()
    spans = [tool_span(tool=f"t{i}", trace=9, i=i) for i in range(3)]
    for s in spans:
        s.span_id = b""
    decoded = p.decode(request(*spans))
    p.process(decoded)
    assert len(decoded.invalid) == 3 and p.store.get(format(9, "032x")) is None and duplicates(p) == 0


def steps(*span_ids: str, trace: str = "t") -> list[tuple[int, Step, None]]:
    return [(i, Step(session="s", kind="tool", name="x", agent="a", trace_id=trace, span_id=sid), None)
            for i, sid in enumerate(span_ids)]


def test_the_seen_ring_is_bounded() -> None:
    seen = delivery.SeenSpans()
    n = delivery.SEEN_SPANS * 3
    assert len(delivery.unseen(seen, steps(*(f"{i + 1:016x}" for i in range(n))))) == n
    assert len(seen.ring) == delivery.SEEN_SPANS * 8
    newest, oldest = steps(f"{n:016x}", f"{1:016x}")
    assert delivery.unseen(seen, [newest, oldest]) == [oldest]
    assert len(seen.ring) == delivery.SEEN_SPANS * 8


def test_the_filter_never_hides_a_span_the_ring_holds() -> None:
    """Spans arriving one by one and in batches, then every recent one again: each repeat is found, each
    new one kept, whether the Bloom filter answers or the ring is scanned."""
    seen = delivery.SeenSpans()
    ids = [f"{i * 7919 + 3:016x}" for i in range(5000)]
    for start in range(0, 5000, 50):
        batch = steps(*ids[start:start + 50])
        assert delivery.unseen(seen, batch[:1]) == batch[:1]
        assert delivery.unseen(seen, batch) == batch[1:]
        recent = steps(*ids[max(0, start + 50 - delivery.SEEN_SPANS):start + 50])
        assert delivery.unseen(seen, recent) == []
    assert seen.newer is not None and seen.older is not None and len(seen.ring) == delivery.SEEN_SPANS * 8


def test_the_same_span_id_in_another_trace_is_another_span() -> None:
    both = steps("00000000000000aa", trace="t1") + steps("00000000000000aa", trace="t2")
    assert len(delivery.unseen(delivery.SeenSpans(), both)) == 2


def test_a_fingerprint_found_off_its_boundary_is_no_match() -> None:
    (item,) = steps("00000000000000ab")
    seen = delivery.SeenSpans()
    delivery.unseen(seen, [item])
    seen.ring[:] = b"\x00" * 4 + seen.ring + b"\x00" * 4
    assert delivery.unseen(seen, [item]) == [item]


def test_a_long_session_keeps_a_bounded_ring() -> None:
    p = Pipeline()
    calls = [tool_span(tool=f"t{i % 7}", args=f'{{"n": {i}}}', trace=13, i=i) for i in range(600)]
    p.process(p.decode(request(*calls)))
    assert len(p.store.get(format(13, "032x")).seen.ring) == delivery.SEEN_SPANS * 8


@pytest.mark.parametrize("dialect", ["openai_agents", "strands", "pydantic_ai", "langgraph_openinference"])
def test_healthy_corpus_runs_delivered_twice_keep_their_verdicts(dialect: str) -> None:
    runs = sorted((CORPUS / dialect).glob("*healthy*.binpb"))[:4]
    assert runs
    for path in runs:
        once, twice = Pipeline(), Pipeline()
        for data in read_requests(path):
            once.process(once.decode(data))
            for _ in range(2):
                twice.process(twice.decode(data))
        assert {s.id: (s.verdict, s.steps) for s in once.store} == {s.id: (s.verdict, s.steps) for s in twice.store}
        assert all(s.verdict == "continue" for s in twice.store), path.name


def test_analyze_over_two_overlapping_recordings_counts_each_step_once(tmp_path: Path) -> None:
    loop = loop_requests(6, trace=11)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(request_to_json(d)) + "\n" for d in loop[:4]))
    second.write_text("".join(json.dumps(request_to_json(d)) + "\n" for d in loop[2:]))
    both = analyze([str(first), str(second)])
    whole = tmp_path / "whole.jsonl"
    whole.write_text("".join(json.dumps(request_to_json(d)) + "\n" for d in loop))
    reference = analyze([str(whole)])
    assert [(r.session_id, r.steps, r.verdict, len(r.findings)) for r in both] == \
        [(r.session_id, r.steps, r.verdict, len(r.findings)) for r in reference]
    assert both[0].steps == 6


# -- re-enrichment -------------------------------------------------------------------------------------


def test_a_second_otelloop_replaces_the_enrichment_of_the_first() -> None:
    hop1, hop2 = Pipeline(), Pipeline()
    for data in loop_requests(8, trace=21):
        out1 = hop1.process(hop1.decode(data)).data
        out2 = hop2.process(hop2.decode(out1)).data
        assert_unique_keys(out1)
        assert_unique_keys(out2)
        (s1,), (s2,) = parse(out1), parse(out2)
        assert event_names(s1) == event_names(s2)  # the second hop judged the same: same events, once
        assert attrs_of(s1) == attrs_of(s2)
    assert hop2.store.get(format(21, "032x")).verdict == "stop"


def test_re_enrichment_keeps_the_agents_inputs_and_other_evaluations() -> None:
    theirs = Span.Event(name="gen_ai.evaluation.result", time_unix_nano=1,
                        attributes=kvs({"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.9}))
    old = [Span.Event(name="otelloop.trajectory_nudge", time_unix_nano=1, attributes=kvs({"otelloop.detector": "x"})),
           Span.Event(name="gen_ai.evaluation.result", time_unix_nano=1,
                      attributes=kvs({"gen_ai.evaluation.name": "otelloop.verdict"})), theirs]
    s = tool_span(trace=31, i=0, attrs={"otelloop.verdict": "stop", "otelloop.loop_score": 99.0,
                                        "otelloop.intent": "search", "otelloop.progress.failing_tests": 2,
                                        "otelloop.some_future_output": "x"})
    s.events.extend(old)
    p = Pipeline()
    (forwarded,) = parse(p.process(p.decode(request(s))).data)
    attrs = attrs_of(forwarded)
    assert attrs["otelloop.verdict"] == "continue" and "otelloop.loop_score" in attrs
    assert attrs["otelloop.loop_score"] != 99.0 and "otelloop.some_future_output" not in attrs
    assert attrs["otelloop.intent"] == "search" and attrs["otelloop.progress.failing_tests"] == 2
    assert event_names(forwarded) == ["gen_ai.evaluation.result"]
    assert attrs_of(forwarded.events[0])["gen_ai.evaluation.name"] == "relevance"
    assert_unique_keys(request(forwarded))


def test_re_enrichment_with_langfuse_attributes_writes_them_once() -> None:
    cfg = build_config({"enrich": {"langfuse_attributes": True}}, env={})
    hop1, hop2 = Pipeline(cfg), Pipeline(cfg)
    levels = []
    for data in loop_requests(6, trace=41):
        out2 = hop2.process(hop2.decode(hop1.process(hop1.decode(data)).data)).data
        assert_unique_keys(out2)
        levels.append(attrs_of(parse(out2)[0]).get("langfuse.observation.level"))
    assert "WARNING" in levels


def test_re_enrichment_in_a_request_read_in_chunks() -> None:
    hop1, hop2 = Pipeline(), Pipeline()
    spans = [tool_span(tool=f"t{i % 3}", args=f'{{"n": {i}}}', trace=51, i=i) for i in range(200)]
    out1 = hop1.process(hop1.decode(request(*spans))).data
    out2 = run(hop2.process_steps(run(hop2.decode_steps(out1, chunk_bytes=4096)))).data
    assert_unique_keys(out2)
    assert len(parse(out2)) == 200


# -- the verdict as an evaluation result ---------------------------------------------------------------


def evaluations(s: Span) -> list[dict]:
    return [attrs_of(e) for e in s.events if e.name == "gen_ai.evaluation.result"]


def test_each_verdict_change_is_an_evaluation_result_on_its_span() -> None:
    p = Pipeline()
    seen = []
    for data in loop_requests(8, trace=61):
        (s,) = parse(p.process(p.decode(data)).data)
        seen.append((attrs_of(s)["otelloop.verdict"], evaluations(s)))
    changes = [(v, e) for v, e in seen if e]
    assert changes and all(len(e) == 1 for _, e in changes)
    previous = "continue"
    for verdict, evals in seen:
        assert bool(evals) == (verdict != previous)
        previous = verdict
    verdict, (ev,) = changes[-1]
    assert verdict == "stop" and ev["gen_ai.evaluation.name"] == "otelloop.verdict"
    assert ev["gen_ai.evaluation.score.label"] == "stop" and ev["gen_ai.evaluation.score.value"] == 2.0
    assert isinstance(ev["gen_ai.evaluation.explanation"], str) and ev["gen_ai.evaluation.explanation"]
    assert [e.name for e in parse(p.process(p.decode(loop_requests(1, trace=62)[0])).data)[0].events] == []


def test_the_evaluation_explanation_is_redacted() -> None:
    p = Pipeline()
    secret = "sk-" + "a1B2" * 10
    texts = []
    for i in range(8):
        (s,) = parse(p.process(p.decode(request(tool_span(args=f'{{"key": "{secret}"}}', trace=71, i=i)))).data)
        texts += [e.get("gen_ai.evaluation.explanation", "") for e in evaluations(s)]
    assert texts and not any(secret in t for t in texts)


def test_every_attribute_detectors_write_is_a_known_output_key() -> None:
    """The reader recognises enriched spans by these keys: a detector writing another would go unnoticed."""
    p = Pipeline(build_config({"detectors": {"profile": "seed"}}, env={}))
    keys: set[str] = set()
    for dialect in ("openai_agents", "strands"):
        for path in sorted((CORPUS / dialect).glob("*loop*.binpb"))[:6]:
            for data in read_requests(path):
                for s in parse(p.process(p.decode(data)).data):
                    keys |= {k for k in attrs_of(s) if k.startswith("otelloop.")}
    assert keys and keys <= delivery.OUTPUT_KEYS | delivery.INPUT_KEYS, keys - delivery.OUTPUT_KEYS


def test_requests_stay_valid_protobuf() -> None:
    p = Pipeline()
    for data in loop_requests(8, trace=81):
        out = p.process(p.decode(p.process(Pipeline().decode(data)).data)).data
        ExportTraceServiceRequest.FromString(out)



# -- property: whatever arrives, each forwarded span has each key once ---------------------------------


_CALLS = st.lists(st.tuples(st.sampled_from(["search_web", "read_file", "run_tests"]), st.integers(0, 2),
                            st.sampled_from(["ok", "no results", "FAILED test_x"]), st.integers(1, 3),
                            st.booleans()), min_size=1, max_size=24)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=_CALLS, langfuse=st.booleans(), resend=st.integers(0, 3))
def test_hops_and_resends_never_write_a_key_twice(calls: list, langfuse: bool, resend: int) -> None:
    """Requests of random tool calls (several traces, some spans marked as errors) go through two
    otelloops, and some requests are delivered twice to each: every forwarded span keeps unique attribute
    keys, findings appear once per event name, and the second hop ends with the same verdicts."""
    cfg = build_config({"enrich": {"langfuse_attributes": langfuse}}, env={})
    hop1, hop2 = Pipeline(cfg), Pipeline(cfg)
    for n, (tool, arg, result, trace, failed) in enumerate(calls):
        data = request(tool_span(tool, f'{{"a": {arg}}}', result, trace=trace, i=n,
                                 attrs={"error.type": "Boom"} if failed else {}))
        for _copy in range(2 if resend and n % resend == 0 else 1):
            out1 = hop1.process(hop1.decode(data)).data
            out2 = hop2.process(hop2.decode(out1)).data
            for out in (out1, out2):
                assert_unique_keys(out)
                for s in parse(out):
                    named = [e for e in event_names(s) if e != "gen_ai.evaluation.result"]
                    assert len(named) == len(set(named))
                    assert len(evaluations(s)) <= 1
    assert {s.id: s.verdict for s in hop1.store} == {s.id: s.verdict for s in hop2.store}


def test_analyze_recognises_a_span_read_again_after_many_others(tmp_path: Path) -> None:
    """Offline, the whole run is remembered: a recording read twice in full counts each step once."""
    calls = [request(tool_span(tool=f"t{i % 9}", args=f'{{"n": {i}}}', trace=91, i=i))
             for i in range(delivery.SEEN_SPANS + 50)]
    recording = tmp_path / "run.jsonl"
    recording.write_text("".join(json.dumps(request_to_json(d)) + "\n" for d in calls))
    (report,) = analyze([str(recording), str(recording)])
    assert report.steps == delivery.SEEN_SPANS + 50
