"""Repetition that is work: polls of something that moves on its own, batches over different targets.

Unit rules first (``otelloop.mapping.targets``: what a call is about; ``otelloop.work`` through the
progress tracker: the result keys and ``Step.wait`` it gives), each with the loop it must still leave
caught; then whole ReAct sessions through the real pipeline with the default profile (spans in, verdict
out): a job polled until done and a batch of health checks are left alone, a job that never moves, a
poll stuck after it moved past the allowance, and a search reworded in German that finds nothing are
stopped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from spans import request, span, tool_span

from otelloop import progress
from otelloop.detectors.base import POLL_WAITS, TRANSIENT_RETRIES, retrying
from otelloop.mapping.canonical import hash_text
from otelloop.mapping.results import ACK, BLANK, FAILED, TERSE, judged_flags
from otelloop.mapping.targets import call_target, identifier
from otelloop.model import Step
from otelloop.pipeline import Pipeline
from otelloop.work import MAX_FORMS, MAX_POLLS, WorkState
from tests.helpers import make_step

# -- what a call is about ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["svc-12", "T-3301", "ana@example.com", "src/app.py", "sku_42", "job-17772",
                                   "9f1c2e7a", 1234, "v2", "auth-service"])
def test_identifiers_are_single_tokens_with_a_digit_or_a_separator(value: Any) -> None:
    assert identifier(value)


@pytest.mark.parametrize("value", ["billing", "SAML single sign-on setup", "Keine Ergebnisse", "", True, 1.5,
                                   None, "x" * 200, "how-to configure sso"])
def test_words_sentences_settings_and_long_values_are_not_identifiers(value: Any) -> None:
    assert not identifier(value)


def test_calls_on_different_targets_share_a_form_and_rewordings_do_not() -> None:
    a, b = call_target({"service": "svc-1", "verbose": True}), call_target({"service": "svc-2", "verbose": True})
    assert a[0] == b[0] and a[1] != b[1] != 0
    # a search reworded beside the same workspace id: another form each time
    r1 = call_target({"query": "transfer license", "workspace": "ws-1"})
    r2 = call_target({"query": "move license", "workspace": "ws-1"})
    assert r1[0] != r2[0] and r1[1] == r2[1]
    assert call_target({"query": "how to enable SAML"}) == (0, 0)


def test_short_answers_are_terse_and_failures_and_long_ones_are_not() -> None:
    assert judged_flags("healthy", False) & TERSE
    assert judged_flags("[]", True) == BLANK | TERSE
    assert not judged_flags("1 failed, 2 passed", False) & TERSE
    assert not judged_flags("x" * 500, False) & TERSE


# -- batches, through the progress tracker --------------------------------------------------------------------


def call(name: str, args: dict[str, Any], answer: str, **kw: Any) -> Step:
    """A tool step as the mapping makes it: hashes, flags of the answer, form and target of the call."""
    flags = kw.pop("result_flags", None)
    flags = judged_flags(answer, not answer.strip()) if flags is None else flags
    form, target = call_target(args) if flags & (BLANK | TERSE) and not flags & FAILED else (0, 0)
    return make_step(name, args_hash=hash_text(json.dumps(args, sort_keys=True)), output_hash=hash_text(answer),
                     result_flags=flags, args_form=form, target=target, **kw)


def novelty(*steps: Step) -> list[bool | None]:
    state = progress.new_state()
    for step in steps:
        progress.observe(state, step)
    return [s.novel for s in steps]


@pytest.mark.parametrize("answer", ["healthy", "204 No Content", '{"acknowledged": true}', "[]", "No results.",
                                    "null", ""])
def test_a_batch_on_different_targets_answering_alike_or_empty_is_new_work(answer: str) -> None:
    steps = [call("check_health", {"service": f"svc-{i}"}, answer) for i in range(8)]
    assert novelty(*steps)[1:] == [True] * 7


def test_the_same_target_again_repeats_its_answer() -> None:
    """Counter-example: one service checked again and again is the same result each time, inside a batch
    or alone."""
    batch = [call("check_health", {"service": f"svc-{i}"}, "healthy") for i in range(3)]
    again = [call("check_health", {"service": "svc-1"}, "healthy") for _ in range(4)]
    assert novelty(*batch, *again) == [True, True, True, False, False, False, False]
    alone = [call("check_health", {"service": "svc-1"}, "healthy") for _ in range(4)]
    assert novelty(*alone) == [True, False, False, False]


def test_a_reworded_search_that_finds_nothing_is_not_a_batch() -> None:
    """Counter-example: free text reworded (here beside the same workspace id, and in German) changes the
    call's form, so the same answer stays the same result."""
    words = ["Lizenz übertragen", "Lizenz verschieben", "Lizenz migrieren", "Arbeitsbereich wechseln"]
    steps = [call("search_kb", {"terms": w, "workspace": "ws-1"}, "Keine Artikel gefunden.") for w in words]
    assert novelty(*steps) == [True, False, False, False]
    blank = [call("search", {"query": w}, "[]") for w in words]
    assert novelty(*blank) == [False, False, False, False]


def test_the_first_call_of_a_batch_asked_again_repeats_and_never_looks_moved() -> None:
    """Counter-example: the form becomes a batch at its second target, after its first call was judged; that
    call asked again is its same answer again (a loop re-reading one short file), not a poll that moved."""
    steps = [call("read_file", {"path": "conf/a.yaml"}, "x: 1"), call("read_file", {"path": "conf/b.yaml"}, "x: 2"),
             *[call("read_file", {"path": "conf/a.yaml"}, "x: 1") for _ in range(3)]]
    state = progress.new_state()
    for step in steps:
        progress.observe(state, step)
    assert [(s.novel, s.repeats, s.wait) for s in steps[2:]] == [(False, 2, 0), (False, 3, 0), (False, 4, 0)]


def test_failures_and_long_results_on_different_targets_still_repeat() -> None:
    """Counter-examples: the same error for every target, and the same long page for every cursor."""
    failing = [call("read_record", {"id": f"r-{i}"}, "permission denied", result_flags=FAILED) for i in range(4)]
    assert novelty(*failing)[1:] == [False] * 3
    page = "\n".join(f"item {i}: widget" for i in range(40))
    pages = [call("list_items", {"page_token": f"tok-{i}"}, page) for i in range(4)]
    assert novelty(*pages) == [True, False, False, False]


def test_acknowledgements_and_writes_keep_their_own_identity() -> None:
    acks = [call("notify", {"ticket": f"T-{i}"}, "sent", result_flags=ACK | TERSE) for i in range(3)]
    assert novelty(*acks) == [True, True, True]


def test_batch_memory_is_bounded() -> None:
    state = progress.new_state()
    for f in range(3 * MAX_FORMS):
        for i in range(2):
            progress.observe(state, call(f"tool{f}", {"id": f"x-{i}"}, "ok-ish"))
    assert state.work is not None and len(state.work.forms) <= MAX_FORMS * 5


# -- polls, through the progress tracker ----------------------------------------------------------------------


def waits(*steps: Step) -> list[int]:
    state = progress.new_state()
    for step in steps:
        progress.observe(state, step)
    return [s.wait for s in steps]


def poll(state: str) -> Step:
    return call("get_job_status", {"job_id": "job-1"}, json.dumps({"job_id": "job-1", "state": state}))


def test_a_poll_that_moved_on_its_own_waits_within_the_allowance() -> None:
    steps = [poll("pending"), *[poll("running") for _ in range(6)], poll("succeeded")]
    assert waits(*steps) == [0, 0, 2, 3, 4, 5, 6, 0]
    assert all(retrying(s, TRANSIENT_RETRIES) for s in steps[2:7])


def test_a_poll_that_never_moved_gets_no_allowance() -> None:
    """Counter-example: a job that says ``running`` from its first poll, a file read again and again."""
    assert waits(*[poll("running") for _ in range(6)]) == [0] * 6


def test_a_change_after_the_session_acted_is_not_moving_on_its_own() -> None:
    """Counter-example: a read, a write, the read again (changed by the write), then the same read again."""
    steps = [poll("pending"),
             make_step("write_file", args_hash=1, output_hash=2, tool_class="write", file_path="a", content_hash=3),
             poll("running"), poll("running"), poll("running")]
    assert waits(*steps) == [0, 0, 0, 0, 0]


def test_past_the_allowance_the_whole_row_counts() -> None:
    steps = [poll("pending"), *[poll("running") for _ in range(TRANSIENT_RETRIES + 2)]]
    assert waits(*steps)[-1] == TRANSIENT_RETRIES + 2
    assert not retrying(steps[-1], TRANSIENT_RETRIES)


def test_poll_memory_is_bounded() -> None:
    state = progress.new_state()
    for i in range(3 * MAX_POLLS):
        progress.observe(state, call("get", {"id": f"j-{i}"}, "running x"))
    assert isinstance(state.work, WorkState) and len(state.work.polls) <= 3 * MAX_POLLS


# -- whole sessions through the pipeline ----------------------------------------------------------------------


def session(trace: int, calls: list[tuple[str, dict[str, Any], str]]) -> tuple[list[str], Pipeline]:
    """A ReAct session (a model call before each tool call) through a fresh default pipeline, one request per
    step pair; the session's verdict after each tool call."""
    p = Pipeline()
    verdicts = []
    for i, (tool, args, result) in enumerate(calls):
        chat = span("chat gpt-4o", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"},
                    trace=trace, i=2 * i)
        act = tool_span(tool, args=json.dumps(args), result=result, trace=trace, i=2 * i + 1,
                        attrs={"gen_ai.tool.call.id": f"call_{i}"})
        p.process(p.decode(request(chat, act)))
        s = p.store.get(format(trace, "032x"))
        assert s is not None
        verdicts.append(s.verdict)
    return verdicts, p


def test_a_job_polled_until_done_is_left_alone() -> None:
    states = ["pending", *["running"] * 6, "succeeded"]
    verdicts, _ = session(31, [("get_job_status", {"job_id": "job-4711"}, json.dumps({"job_id": "job-4711",
                                                                                     "state": s}))
                               for s in states])
    assert verdicts == ["continue"] * 8


def test_a_job_that_never_moves_is_stopped_in_time() -> None:
    verdicts, _ = session(32, [("get_job_status", {"job_id": "job-4711"}, '{"job_id": "job-4711", "state": '
                                                                           '"running"}')] * 10)
    assert "stop" in verdicts[:7]


def test_a_poll_stuck_after_it_moved_is_stopped_after_the_allowance() -> None:
    """The row of same answers is a loop from its first answer (the 2nd call): it waits
    :data:`POLL_WAITS` answers and is stopped at the next, 6 calls after that start."""
    states = ["pending", *["running"] * 14]
    verdicts, _ = session(33, [("get_job_status", {"job_id": "job-4711"}, json.dumps({"job_id": "job-4711",
                                                                                     "state": s}))
                               for s in states])
    assert "stop" not in verdicts[:POLL_WAITS + 1]
    assert verdicts[POLL_WAITS + 1] == "stop"  # the 8th call: 6 calls after the row's first answer


def test_polls_wait_within_the_loop_window_whatever_the_retry_allowance() -> None:
    steps = [poll("pending"), *[poll("running") for _ in range(POLL_WAITS + 1)]]
    waits(*steps)
    assert retrying(steps[POLL_WAITS], 20) and not retrying(steps[POLL_WAITS + 1], 20)
    assert not retrying(steps[3], 2)  # a lower allowance bounds polls too


@pytest.mark.parametrize("answer", ["healthy", "204 No Content", '{"acknowledged": true}', "[]", "No results."])
def test_a_batch_of_health_checks_is_left_alone(answer: str) -> None:
    verdicts, _ = session(34, [("check_health", {"service": f"svc-{i}"}, answer) for i in range(10)])
    assert verdicts == ["continue"] * 10


def test_a_search_reworded_in_german_that_finds_nothing_is_stopped() -> None:
    words = ["Kubernetes Operator installieren", "Operator mit Helm ausrollen", "k8s Operator CRD",
             "Kubernetes Manifeste für orbit", "Helm Chart Werte", "kubectl apply Operator",
             "Namespace pro Dienst", "orbit auf einem Cluster"]
    verdicts, _ = session(35, [("search_docs", {"text": w}, "Keine passenden Dokumente.") for w in words])
    assert "stop" in verdicts[:7]  # within 6 calls of the loop's start (its first call)


def test_a_change_that_was_only_noise_learned_later_earns_no_allowance() -> None:
    """Counter-example: a stuck call whose result carries a per-call token that its shape does not mark as
    noise; the token is learned as noise after two changes, and those changes were never the job moving."""
    verdicts, _ = session(36, [("get_job_status", {"job_id": "job-4711"},
                                json.dumps({"job_id": "job-4711", "state": "running", "ref": f"r{i}x{i % 7}"}))
                               for i in range(12)])
    assert "stop" in verdicts[:7]
