"""The benchmarks' realistic workload (``benchmarks/workload.py``) is what its figures claim it is.

Runs start, go on for 20–80 spans and end; trace and conversation ids never come back from one pass over
the pool to the next (a run cut by the pool's end goes on in the next pass under its own ids); about one
run in ten is stuck, repeating one call with the same result, while the others bring something new at
every call; and through otelloop's pipeline (in process, default configuration) every stuck run is
stopped and no productive run gets a finding. Counts only, no timing.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from otelloop.config import build_config
from otelloop.pipeline import Pipeline

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from bench_client import request_source
from workload import (
    RUN_SPANS,
    TEXT_TOKEN,
    TEXT_TOKEN_PREVIOUS,
    TRACE_TOKEN,
    TRACE_TOKEN_PREVIOUS,
    Pool,
    realistic_pool,
    renew,
    token_of,
)

#: A pool half the default size (64 slots of 256 spans each, as in the default pool): about 330 runs.
REQUESTS, SLOTS = 32, 64


@pytest.fixture(scope="module")
def pool() -> Pool:
    return realistic_pool(REQUESTS, 512, SLOTS, seed=1)


def spans_of(data: bytes) -> Iterator[Span]:
    request = ExportTraceServiceRequest.FromString(data)
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            yield from ss.spans


def attributes(span: Span) -> dict[str, str | int]:
    return {kv.key: kv.value.string_value or kv.value.int_value for kv in span.attributes}


def run_index(span: Span) -> int:
    return int(str(attributes(span)["gen_ai.conversation.id"]).rsplit("_", 1)[1])


def by_run(pool: Pool) -> dict[int, list[Span]]:
    """Each run's spans in the order they are sent, a run cut by the pool's end put back in order (its
    first part is at the end of the pool, its rest at the start)."""
    head: dict[int, list[Span]] = defaultdict(list)
    rest: dict[int, list[Span]] = defaultdict(list)
    for data in pool.batches:
        for span in spans_of(data):
            (rest if span.trace_id.startswith(TRACE_TOKEN_PREVIOUS) else head)[run_index(span)].append(span)
    return {k: head[k] + rest[k] for k in head.keys() | rest.keys()}


def test_the_pool_is_the_same_for_a_seed_and_another_for_another_seed(pool: Pool) -> None:
    assert realistic_pool(REQUESTS, 512, SLOTS, seed=1).batches == pool.batches
    assert realistic_pool(REQUESTS, 512, SLOTS, seed=2).batches != pool.batches
    assert all(len(list(spans_of(data))) == 512 for data in pool.batches)


def test_runs_start_go_on_for_tens_of_steps_and_end(pool: Pool) -> None:
    runs = by_run(pool)
    assert sorted(runs) == [r.index for r in pool.runs]
    for run in pool.runs:
        spans = runs[run.index]
        assert len(spans) == run.spans and RUN_SPANS[0] <= run.spans <= RUN_SPANS[1]
        ops = [attributes(s)["gen_ai.operation.name"] for s in spans]
        # chat turns and tool calls, the final answer, then the run's agent span: the parent of every step
        assert ops[0] == "chat" and ops[-2:] == ["chat", "invoke_agent"]
        assert set(ops[:-1]) == {"chat", "execute_tool"} and ops.count("execute_tool") == run.tool_calls
        assert attributes(spans[-2])["gen_ai.response.finish_reasons"] == "stop"
        assert all(s.parent_span_id == spans[-1].span_id for s in spans[:-1])
        starts = [s.start_time_unix_nano for s in spans[:-1]]
        assert starts == sorted(starts) and spans[-1].end_time_unix_nano >= spans[-2].end_time_unix_nano
    # tool calls and chat turns interleaved as agents produce them: one to three calls per turn
    tools = sum(r.tool_calls for r in pool.runs)
    chats = sum(r.spans - r.tool_calls - 1 for r in pool.runs)
    assert 1.1 < tools / chats < 1.6
    # most slots have a run cut by the pool's end, so runs start and end in every request
    assert sum(r.wraps for r in pool.runs) > SLOTS * 3 // 4


def test_ids_never_come_back_from_one_pass_to_the_next(pool: Pool) -> None:
    source = request_source(pool.batches, "tokens")
    passes = [[source() for _ in pool.batches] for _ in range(3)]
    traces: list[set[bytes]] = []
    conversations: list[set[str]] = []
    for sent in passes:
        assert not any(marker in data for data in sent for marker in (
            TRACE_TOKEN, TRACE_TOKEN_PREVIOUS, TEXT_TOKEN.encode(), TEXT_TOKEN_PREVIOUS.encode()))
        spans = [s for data in sent for s in spans_of(data)]
        traces.append({s.trace_id for s in spans})
        conversations.append({str(attributes(s)["gen_ai.conversation.id"]) for s in spans})
        # one trace per conversation: a run keeps its ids within the pass
        assert len({(s.trace_id, attributes(s)["gen_ai.conversation.id"]) for s in spans}) == len(traces[-1])
    wrapping = sum(r.wraps for r in pool.runs)
    for k in (1, 2):
        # only the runs cut by the pool's end go on into the next pass, under the ids they began with
        assert len(traces[k] & traces[k - 1]) == wrapping
        assert len(conversations[k] & conversations[k - 1]) == wrapping
    assert not traces[2] & traces[0] and not conversations[2] & conversations[0]


def tool_calls(spans: list[Span]) -> list[tuple[str, str, str]]:
    """(tool, arguments, result or error) of each tool call, as sent in one pass (a run's rest carries the
    placeholder of the previous pass, which becomes the token its first part was sent with)."""
    calls = []
    for span in spans:
        a = {k: str(v).replace(TEXT_TOKEN_PREVIOUS, TEXT_TOKEN) for k, v in attributes(span).items()}
        if a["gen_ai.operation.name"] == "execute_tool":
            calls.append((a["gen_ai.tool.name"], a["gen_ai.tool.call.arguments"],
                          a.get("gen_ai.tool.call.result", span.status.message)))
    return calls


def test_about_one_run_in_ten_is_stuck_and_the_others_do_new_work_at_every_call(pool: Pool) -> None:
    stuck = [r for r in pool.runs if r.stuck]
    assert 0.07 <= len(stuck) / len(pool.runs) <= 0.13
    runs = by_run(pool)
    for run in pool.runs:
        calls = tool_calls(runs[run.index])
        if run.stuck:
            assert run.loop_start is not None
            repeated = calls[run.loop_start:]
            assert len(repeated) >= 10 and len(set(repeated)) == 1  # the same call, the same result
            assert len(set(calls[:run.loop_start])) == run.loop_start
        else:
            # new arguments at every call (but a test run, which an agent runs again after each fix) ...
            others = [(name, args) for name, args, _ in calls if name != "run_tests"]
            assert len(set(others)) == len(others)
            assert len({result for _, _, result in calls}) == len(calls)  # ... and a new result every time
            assert all(isinstance(json.loads(args), dict) for _, args, _ in calls)


def test_otelloop_stops_every_stuck_run_and_flags_no_productive_one(pool: Pool) -> None:
    pipeline = Pipeline(build_config({"state": {"idle_timeout": "1h"}}, env={}))
    nonce = 1 << 40
    # one pass, then the start of the next, which finishes the runs cut by the pool's end
    finishing = max(r.spans for r in pool.runs if r.wraps) * SLOTS // 512 + 1
    sent = [renew(data, token_of(nonce, 1), token_of(nonce, 0)) for data in pool.batches]
    sent += [renew(data, token_of(nonce, 2), token_of(nonce, 1)) for data in pool.batches[:finishing]]
    for data in sent:
        pipeline.process(pipeline.decode(data))
    token = token_of(nonce, 1).hex()
    outcome = {}
    for run in pool.runs:
        session = pipeline.store.get(run.session_id(token))
        assert session is not None and session.steps == run.spans
        outcome[run.index] = (session.verdict, len(session.findings or ()))
    assert {outcome[r.index][0] for r in pool.runs if r.stuck} == {"stop"}
    assert {outcome[r.index] for r in pool.runs if not r.stuck} == {("continue", 0)}
