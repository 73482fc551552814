"""Byte bounds: strings cut once by the mapper, caches with byte budgets, sessions of bounded size."""

from __future__ import annotations

import json
import logging
import random
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spans import request, span, tool_span

from otelloop import bounds, resources
from otelloop.bounds import MAX_SIGNAL_BYTES, MAX_TEXT_BYTES, InternTable, Memo, clear_caches, cut, deep_size
from otelloop.config import build_config
from otelloop.mapping.canonical import TextMemo
from otelloop.pipeline import Pipeline
from otelloop.resources import Accounting, MemoryGuard
from otelloop.similarity import CACHE_BYTES, PAIR_CACHE_BYTES, LexicalSimilarity
from otelloop.state import Session, SessionStore

#: Documented worst case of one session's state with the default bounds (docs/deploy.md, "Memory").
WORST_CASE_SESSION_BYTES = 192 << 10


def _stored_bytes(text: str) -> int:
    """Bytes CPython stores ``text``'s characters in."""
    widest = ord(max(text)) if text else 0
    return len(text) * (1 if widest < 0x100 else 2 if widest < 0x10000 else 4)


def _fits(text: str, limit: int) -> bool:
    return len(text.encode("utf-8", "surrogatepass")) <= limit and _stored_bytes(text) <= limit


# -- cut --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["read_file", "é" * 60, "日本語" * 20, "x" * 256])
def test_strings_within_the_bound_are_kept_whole_and_shared(text: str) -> None:
    assert cut(text, 256) is text


@pytest.mark.parametrize("unit", ["x", "é", "日", "\U0001F600", "\udc80"])
def test_a_long_string_is_cut_within_the_bound_in_utf8_and_in_memory(unit: str) -> None:
    text = "tool-" + unit * 100_000
    short = cut(text, 256)
    assert _fits(short, 256)
    assert short.startswith("tool-")
    assert short[-19:-16] == "..." and all(c in "0123456789abcdef" for c in short[-16:])


def test_one_wide_character_does_not_quadruple_a_cut_string() -> None:
    short = cut("\U0001F600" + "a" * 5000, 256)
    assert sys.getsizeof(short) <= 256 + 80


def test_long_names_that_differ_late_stay_distinct_and_equal_ones_equal() -> None:
    a, b = "x" * 786_000 + "1", "x" * 786_000 + "2"
    assert cut(a, 256) != cut(b, 256)
    assert cut(a, 256) == cut("x" * 786_000 + "1", 256)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600), st.integers(min_value=64, max_value=1024))
def test_cut_always_fits_and_keeps_fitting_text(text: str, limit: int) -> None:
    short = cut(text, limit)
    assert _fits(short, limit)
    if _fits(text, limit):
        assert short == text
    else:
        assert short != text and short.endswith(bounds.SEPARATOR + short[-16:])


# -- the mapper cuts every string a step keeps --------------------------------------------------------


def _long(tag: str, n: int = 60_000) -> str:
    return f"{tag}-" + "\U0001F600" + "y" * n


def test_every_string_a_step_keeps_is_bounded() -> None:
    config = {"state": {"group_by": "session"}, "limits": {"max_string_bytes": 128}}
    p = Pipeline(build_config(config, env={}))
    progress = {"otelloop.progress.diff_hash": _long("diff"), "otelloop.state_hash": _long("state"),
                "otelloop.progress.failure_signature": _long("f")}
    data = request(
        tool_span(_long("tool"), args=_long("args"), trace=1, i=1,
                  attrs={"gen_ai.agent.name": _long("agent"), "gen_ai.conversation.id": _long("session"),
                         "gen_ai.request.model": _long("model"), "otelloop.intent": _long("intent")}),
        tool_span("read_file", args=json.dumps({"path": _long("path", 20_000)}), trace=1, i=2),
        tool_span("bash", args=json.dumps({"command": _long("cmd", 20_000)}), trace=1, i=2),
        span("invoke_agent", {"gen_ai.operation.name": "invoke_agent", "graph.node.id": _long("node"),
                              **progress}, trace=1, i=3),
        service=_long("service"))
    steps = [s for _, s, _ in p.decode(data).steps]
    assert len(steps) == 4
    kept = [v for s in steps for v in (s.session, s.name, s.agent, s.service, s.model, s.intent, s.node,
                                       s.file_path, s.command, s.args_text) if v]
    assert {s.file_path for s in steps} - {None} and {s.command for s in steps} - {None} and steps[3].node
    assert all(_fits(v, 128) for v in kept), [len(v.encode()) for v in kept if not _fits(v, 128)]
    signals = [steps[3].diff_hash, steps[3].failure_signature, steps[3].state_hash]
    assert all(v is not None and _fits(v, MAX_SIGNAL_BYTES) for v in signals)


def test_two_long_tool_names_that_differ_late_are_two_tools() -> None:
    p = Pipeline()
    a, b = "execute_tool " + "t" * 500_000 + "A", "execute_tool " + "t" * 500_000 + "B"
    tool = {"gen_ai.operation.name": "execute_tool"}
    steps = [s for _, s, _ in p.decode(request(span(a, tool, trace=1), span(b, tool, trace=1))).steps]
    assert steps[0].name != steps[1].name and all(_fits(s.name, 256) for s in steps)


def test_messages_kept_in_a_session_are_bounded() -> None:
    from otelloop.model import Finding

    s = Session("s", 0.0)
    s.remember(Finding("stall", "otelloop.loop_halted", "stop", message="m" * 100_000))
    s.apply_votes({"stall": ("stop", "r" * 100_000, "n" * 100_000)})
    assert len(s.findings[0][3].encode()) <= MAX_TEXT_BYTES
    assert len(s.reason.encode()) <= MAX_TEXT_BYTES and len(s.message.encode()) <= MAX_TEXT_BYTES


def test_recent_steps_and_finding_calls_keep_bounded_excerpts() -> None:
    """20 steps whose arguments and results are long and wide (an emoji makes CPython store 4 bytes a
    character): each excerpt stays within 256 bytes, the whole ring within the documented 16 KiB."""
    from otelloop.state import EXCERPT_BYTES, RECENT_STEPS, recent_steps

    p = Pipeline()
    wide = "\U0001F600" * 5000
    spans = [tool_span(f"tool{i}", args=wide + str(i), result=f"{i}" + wide, trace=9, i=i) for i in range(40)]
    p.process(p.decode(request(*spans)))
    session = p.store.get(format(9, "032x"))
    assert session is not None and session.recent is not None
    steps = recent_steps(session)
    assert len(steps) == RECENT_STEPS and steps[-1]["name"] == "tool39" and steps[-1]["result"].startswith("39")
    texts = [t for st_ in steps for t in (st_["args"], st_["result"])]
    assert all(t and len(t.encode()) <= EXCERPT_BYTES and sys.getsizeof(t) <= EXCERPT_BYTES + 80 for t in texts)
    assert deep_size(session.recent) <= 16 << 10, deep_size(session.recent)
    loop = [tool_span("search", args=wide, result=wide, trace=10, i=i) for i in range(8)]
    p.process(p.decode(request(*loop)))
    looping = p.store.get(format(10, "032x"))
    assert looping is not None
    calls = [f[7] for f in looping.findings if f[7] is not None]
    assert calls and all(len(x.encode()) <= EXCERPT_BYTES for c in calls for x in c)


# -- worst case of one session --------------------------------------------------------------------


def _hostile_session(trace: int, steps: int = 3000) -> list:
    """Spans that push every detector to its caps with distinct strings far over the bound: 64+ graph
    nodes with random transitions, distinct progress signals, tools, agents, paths, failing commands."""
    rnd = random.Random(trace)
    out = []
    for i in range(steps):
        agent = _long(f"agent{i % 50}", 20_000)
        if i % 4 == 0:
            node = _long(f"node{rnd.randrange(70)}", 20_000)
            out.append(span("invoke_agent", {
                "gen_ai.operation.name": "invoke_agent", "graph.node.id": node,
                "otelloop.progress.diff_hash": _long(f"diff{i}", 2000),
                "otelloop.progress.failure_signature": _long(f"fail{i}", 2000),
                "otelloop.progress.failing_tests": i, "gen_ai.tool.call.result": _long(f"out{i}", 2000)},
                trace=trace, i=i))
        elif i % 4 == 1:
            args = json.dumps({"path": _long(f"p{i % 7}", 2000)})
            out.append(tool_span(_long(f"tool{i % 13}", 20_000), args=args, trace=trace, i=i,
                                 attrs={"gen_ai.agent.name": agent}))
        elif i % 4 == 2:
            args = json.dumps({"path": _long(f"p{i % 3}", 2000)})
            out.append(tool_span("read_file", args=args, trace=trace, i=i,
                                 attrs={"gen_ai.agent.name": agent}))
        else:
            args = json.dumps({"command": _long(f"cmd{i % 5}", 2000)})
            out.append(tool_span("bash", args=args, trace=trace, i=i, error=f"boom {i % 2}",
                                 attrs={"gen_ai.agent.name": agent}))
    return out


def test_a_hostile_session_stays_within_the_documented_worst_case() -> None:
    # The worst case judges every step of the session after its stop too (the hold off): with the hold
    # its state stops growing at the stop.
    p = Pipeline(build_config({"state": {"hold_stopped_sessions": False}}, env={}))
    spans = _hostile_session(7)
    for k in range(0, len(spans), 250):
        p.process(p.decode(request(*spans[k:k + 250], service=_long("svc", 20_000))))
    session = p.store.get(format(7, "032x"))
    assert session is not None and session.steps == len(spans)
    graph = session.state("stall").graph
    assert len(graph.nodes) == 64 and len(graph.edges) == 256  # the stall detector's caps are reached
    clear_caches()
    size = deep_size(session)
    assert size <= WORST_CASE_SESSION_BYTES, size


# -- caches ----------------------------------------------------------------------------------------


def test_an_intern_table_keeps_to_its_byte_budget() -> None:
    table = InternTable(10_000, 64 << 10, lambda v: sys.getsizeof(v))
    for i in range(5000):
        value = f"{i:05d}" + "z" * 200
        assert table(value) == value
        assert table.nbytes <= 64 << 10
    same = "00001" + "z" * 200
    assert table(same) is table(same)


def test_a_memo_starts_over_at_either_bound() -> None:
    memo = Memo(4, 1000)
    for i in range(4):
        assert memo.put(i, f"v{i}", 100) == f"v{i}"
    assert len(memo) == 4 and memo.nbytes == 400
    memo.put(4, "v4", 100)  # a fifth entry: over the entry bound
    assert dict(memo) == {4: "v4"} and memo.nbytes == 100
    memo.put(5, "v5", 950)  # over the byte bound
    assert dict(memo) == {5: "v5"} and memo.nbytes == 950
    assert memo in bounds._live()
    bounds.clear_caches()
    assert len(memo) == 0 and memo.nbytes == 0


def test_a_text_memo_keeps_to_its_byte_budget() -> None:
    memo = TextMemo(1 << 20, max_bytes=1 << 20)
    for i in range(2000):
        raw = str(i) * 2000
        memo.remember(raw, i, len(raw), sys.getsizeof(raw))
        assert memo.nbytes <= 1 << 20
    assert 0 < len(memo) < 2000


def test_similarity_caches_keep_to_their_byte_budgets() -> None:
    backend = LexicalSimilarity()
    words = [" ".join(f"w{i}x{k}" for k in range(60)) for i in range(3000)]
    texts = [f"search_web({i} {w}) → success" for i, w in enumerate(words)]
    for i in range(3, len(texts)):
        backend.similarities(texts[i], texts[i - 3:i])
    assert backend._cache_bytes <= CACHE_BYTES and backend._pair_bytes <= PAIR_CACHE_BYTES
    assert backend.nbytes > 0 and backend in [c for c in bounds._live()]


def test_every_process_wide_cache_is_registered_and_emptied_on_demand() -> None:
    p = Pipeline()
    for i in range(200):
        args = json.dumps({"path": f"/f{i}"})
        spans = [tool_span(f"tool-{i}-{k}", args=args, trace=i + 1, i=k) for k in range(6)]
        p.process(p.decode(request(*spans)))
    assert bounds.caches_nbytes() > 0
    assert bounds.clear_caches() > 0
    assert bounds.caches_nbytes() == 0


# -- sessions and the memory guard -----------------------------------------------------------------


def test_the_store_sheds_its_oldest_sessions_and_estimates_their_size() -> None:
    evicted = []
    store = SessionStore(100, 60, on_evict=lambda s, r: evicted.append((s.id, r)))
    for i in range(10):
        store.touch(f"s{i}")
    store.touch("s0")
    assert store.session_bytes() > 0
    assert store.shed(3) == 3
    assert evicted == [("s1", "memory"), ("s2", "memory"), ("s3", "memory")]
    assert store.evicted["memory"] == 3 and len(store) == 7


class _Process:
    """A fake process: resident bytes that shrink only when told, sessions of a fixed size."""

    def __init__(self, sessions: int, per: int, baseline: int) -> None:
        self.rss = baseline + sessions * per
        self.sessions = sessions
        self.per = per
        self.cache = 1 << 20
        self.dropped = 0

    def accounting(self, baseline: int) -> Accounting:
        def drop(n: int) -> int:
            n = min(n, self.sessions)
            self.sessions -= n
            self.dropped += n
            return n

        def clear() -> int:
            freed, self.cache = self.cache, 0
            return freed

        return Accounting(lambda: self.sessions, lambda: self.per, lambda: self.cache, clear, drop, baseline)


def test_the_guard_sheds_and_becomes_ready_again_though_resident_memory_stays(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    mib = 1 << 20
    proc = _Process(sessions=40_000, per=2000, baseline=60 * mib)
    monkeypatch.setattr(resources, "rss_bytes", lambda: proc.rss)
    sheds = []
    guard = MemoryGuard(150, proc.accounting(60 * mib), on_shed=lambda n, b: sheds.append((n, b)))
    guard.check()
    assert guard.overloaded() is None
    proc.rss, proc.sessions = 200 * mib, 70_000  # grows past 150 MiB; RSS will never shrink
    with caplog.at_level(logging.INFO, logger="otelloop.resources"):
        guard.check()
        assert guard.overloaded() is None, "shedding brings the accounted memory under the limit at once"
        assert len(sheds) == 1 and sheds[0][1] == 1 << 20
        assert 60 * mib + proc.sessions * proc.per <= resources.SHED_TO * 150 * mib
        for _ in range(5):  # RSS stays at 200 MiB: no new trip until it grows further
            guard.check()
    assert guard.overloaded() is None and len(sheds) == 1
    assert sum("shed" in r.getMessage() for r in caplog.records) == 1
    assert sum("more than otelloop accounts for" in r.getMessage() for r in caplog.records) == 1
    proc.sessions += 40_000  # live data back at the limit, in memory RSS already counts: trips again
    guard.check()
    assert len(sheds) == 2 and guard.overloaded() is None
    proc.rss += 20 * mib  # memory the accounting does not see grows: trips again, but state is within its
    guard.check()  # share and nothing is in flight, so it is only said (sessions go for their own bytes)
    assert len(sheds) == 2 and guard.overloaded() is None
    proc.rss = 100 * mib  # handed back to the system: the next trip is at the limit again
    guard.check()
    proc.sessions += 10_000  # state over its share again
    proc.rss = 160 * mib
    guard.check()
    assert len(sheds) == 3


def test_the_guard_keeps_shedding_until_the_accounting_is_under_the_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    mib = 1 << 20
    proc = _Process(sessions=100_000, per=2000, baseline=60 * mib)
    monkeypatch.setattr(resources, "rss_bytes", lambda: proc.rss)
    acc = proc.accounting(60 * mib)
    drop = acc.drop_sessions
    acc.drop_sessions = lambda n: drop(min(n, 5000))  # sessions that go slowly: one shed is not enough
    guard = MemoryGuard(150, acc)
    periods = 0
    guard.check()
    while guard.overloaded() is not None and periods < 100:
        assert acc.accounted() > resources.RESUME_AT * 150 * mib
        guard.check()
        periods += 1
    assert guard.overloaded() is None and periods > 1
    assert acc.accounted() <= resources.RESUME_AT * 150 * mib


def test_without_a_limit_the_guard_never_sheds(monkeypatch: pytest.MonkeyPatch) -> None:
    proc = _Process(sessions=10, per=2000, baseline=1 << 30)
    monkeypatch.setattr(resources, "rss_bytes", lambda: proc.rss)
    guard = MemoryGuard(0, proc.accounting(0))
    guard.check()
    assert guard.overloaded() is None and proc.dropped == 0


def test_memory_held_by_requests_in_flight_refuses_new_requests_and_drops_no_session(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """RSS over the limit while state is far under its share: the requests in flight hold the excess, so
    the guard refuses new requests until they are done, and drops neither sessions nor caches."""
    mib = 1 << 20
    proc = _Process(sessions=15_000, per=700, baseline=68 * mib)
    monkeypatch.setattr(resources, "rss_bytes", lambda: proc.rss)
    sheds: list[tuple[int, int]] = []
    guard = MemoryGuard(200, proc.accounting(68 * mib), on_shed=lambda n, b: sheds.append((n, b)))
    budget = guard.in_flight_budget()
    assert budget == int(resources.IN_FLIGHT_SHARE * 132 * mib)
    request = guard.in_flight.ticket()
    assert request.add(budget)
    proc.rss = 230 * mib  # the requests' buffers, and what the allocator keeps around them
    with caplog.at_level(logging.WARNING, logger="otelloop.resources"):
        guard.check()
    assert guard.overloaded() is not None  # refused retryably while the requests hold the memory
    assert proc.dropped == 0 and proc.cache == 1 << 20 and sheds == []
    assert "no session was dropped" in caplog.text
    guard.check()
    assert guard.overloaded() is not None and proc.dropped == 0
    request.close()  # the requests are done; RSS stays up (memory kept for reuse), the accounting is low
    guard.check()
    assert guard.overloaded() is None and proc.dropped == 0 and sheds == []


def test_state_over_its_share_is_shed_down_to_what_is_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions are dropped for state's own bytes only, and only as many as bring state to SHED_TO of its
    share: requests in flight at the moment change nothing."""
    mib = 1 << 20
    proc = _Process(sessions=45_000, per=2000, baseline=60 * mib)  # 60 MiB + 86 MiB of sessions
    monkeypatch.setattr(resources, "rss_bytes", lambda: proc.rss)
    acc = proc.accounting(60 * mib)
    guard = MemoryGuard(150, acc)
    share = guard.state_share(150 * mib)
    assert share == 150 * mib - int(resources.IN_FLIGHT_SHARE * 90 * mib)
    with guard.in_flight.ticket() as request:
        assert request.add(10 * mib)
        proc.rss = 160 * mib
        guard.check()
    target = 60 * mib + resources.SHED_TO * (share - 60 * mib)
    assert acc.accounted() <= target < acc.accounted() + proc.per  # not one session more than needed
    assert proc.cache == 0
    assert guard.overloaded() is None  # state and requests in flight are under RESUME_AT of the limit


def test_requests_in_flight_are_held_to_their_budget() -> None:
    """A ticket that would take the requests in flight over the budget is refused, and charges nothing; a
    request alone in flight is taken whatever its size; the export queue's bytes count."""
    queued = [0]
    in_flight = resources.InFlight(lambda: 1000)
    in_flight.queued = lambda: queued[0]
    first, second = in_flight.ticket(), in_flight.ticket()
    assert first.add(600) and first.add(300)
    assert not second.add(200) and second.nbytes == 0 and in_flight.nbytes == 900
    assert second.add(100)
    first.close()
    assert in_flight.nbytes == 100
    queued[0] = 850  # accepted, waiting for the upstream
    assert not in_flight.ticket().add(100)
    second.close()
    alone = in_flight.ticket()
    assert alone.add(5000), "a request alone in flight is taken while the queue is within the budget"
    alone.hold()  # processing that goes on after its handler returned
    alone.close()
    assert in_flight.requests == 5000
    alone.close()
    assert in_flight.requests == 0
    queued[0] = 1001  # the queue alone is over the budget: not even a lone request
    assert not in_flight.ticket().add(1)
    assert resources.InFlight().ticket().add(1 << 40), "no budget without a memory limit"
