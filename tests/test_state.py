"""Session state: least-recently-seen eviction, idle timeout, advising log line, bounded size."""

from __future__ import annotations

import gc
import logging
import sys

from spans import request, span, tool_span

from otelloop.pipeline import Pipeline
from otelloop.state import Session, SessionStore, slot


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_capacity_evicts_the_least_recently_seen() -> None:
    evicted: list[tuple[str, str]] = []
    store = SessionStore(3, 60, on_evict=lambda s, r: evicted.append((s.id, r)), clock=Clock())
    for sid in "abc":
        store.touch(sid)
    store.touch("a")  # a is now the most recent; b is the least recent
    store.touch("d")
    assert evicted == [("b", "capacity")] and len(store) == 3
    assert store.get("a") is not None and store.get("b") is None


def test_idle_sessions_are_swept() -> None:
    clock = Clock()
    evicted: list[tuple[str, str]] = []
    store = SessionStore(10, 30, on_evict=lambda s, r: evicted.append((s.id, r)), clock=clock)
    store.touch("old")
    clock.now = 20
    store.touch("young")
    clock.now = 31
    assert store.sweep() == 1 and evicted == [("old", "idle")] and store.get("young") is not None


def test_first_eviction_logs_one_advising_line(caplog) -> None:
    store = SessionStore(1, 60, clock=Clock())
    with caplog.at_level(logging.WARNING):
        for n in range(50):
            store.touch(str(n))
    lines = [r.getMessage() for r in caplog.records if "state.max_sessions" in r.getMessage()]
    assert len(lines) == 1 and "raise state.max_sessions" in lines[0].lower()


def test_eviction_metrics_and_pipeline_bounds() -> None:
    p = Pipeline()
    p.store.resize(100, 1800)
    for n in range(250):
        p.process(p.decode(request(tool_span(trace=1000 + n))))
    assert len(p.store) == 100
    assert p.metrics.registry.get_sample_value("otelloop_sessions_evicted_total", {"reason": "capacity"}) == 150


def deep_size(obj: object) -> int:
    """Bytes reachable from ``obj`` (shared immutable singletons such as small ints count once)."""
    seen: set[int] = set()
    stack = [obj]
    total = 0
    while stack:
        o = stack.pop()
        if id(o) in seen or isinstance(o, type):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        stack.extend(gc.get_referents(o))
    return total


def test_per_session_state_stays_bounded_with_all_detectors() -> None:
    """A session's memory does not grow with its length (all detectors on)."""
    p = Pipeline()

    def feed(start: int, n: int) -> None:
        for i in range(start, start + n):
            steps = [span("invoke_agent", {"gen_ai.operation.name": "invoke_agent",
                                           "gen_ai.agent.name": ["planner", "coder"][i % 2],
                                           "otelloop.progress.diff_hash": f"d{i}"}, trace=7, i=i),
                     tool_span("read_file", args=f'{{"path": "f{i % 7}.py"}}', result=f"content {i}", trace=7, i=i),
                     tool_span("write_file", args=f'{{"path": "f{i % 5}.py", "content": "v{i}"}}', trace=7, i=i),
                     span("chat", {"gen_ai.operation.name": "chat", "gen_ai.usage.output_tokens": 10}, trace=7, i=i)]
            p.process(p.decode(request(*steps)))

    feed(0, 300)
    session = p.store.get(format(7, "032x"))
    small = deep_size(session)
    feed(300, 3000)
    large = deep_size(session)
    assert session.steps == 3300 * 4
    assert large < small * 1.25 + 2048, (small, large)
    assert large < 64 * 1024, large


def test_session_count_is_bounded_by_max_sessions_under_a_flood() -> None:
    p = Pipeline()
    p.store.resize(1000, 1800)
    for n in range(20):
        p.process(p.decode(request(*[tool_span(trace=10_000 * n + k) for k in range(500)])))
    assert len(p.store) == 1000


def test_a_session_holds_a_vote_table_only_while_a_vote_is_held() -> None:
    session = Session("s", 0.0)
    assert session.votes is None
    session.apply_votes({"drift": ("nudge", "drift read_loop", "stop re-reading")})
    assert session.votes == {"drift": ("nudge", "drift read_loop", "stop re-reading")} and session.verdict == "nudge"
    session.apply_votes({"drift": ("continue", "", "")})
    assert session.votes is None and session.verdict == "continue"


def test_a_repeated_vote_is_kept_redacted() -> None:
    """A loop votes the same on every step; the session redacts each new vote text once and keeps the
    redacted one, with a secret masked however often it comes back."""
    session = Session("s", 0.0)
    secret = ("nudge", "run_shell failing", "stop running curl -H 'Authorization: Bearer abcdef123456'")
    for _ in range(3):
        session.apply_votes({"drift": secret})
        assert session.votes == {"drift": ("nudge", "run_shell failing",
                                           "stop running curl -H 'Authorization: Bearer ***'")}
    session.apply_votes({"drift": ("nudge", "run_shell failing", "stop")})
    assert session.votes == {"drift": ("nudge", "run_shell failing", "stop")} and session.message == "stop"


def test_ranking_in_slices_gives_the_naive_order_and_totals() -> None:
    """The sliced ranking (several batches of sessions) answers like a plain sort of every session."""
    import random

    import otelloop.state as state

    rng = random.Random(7)
    clock = Clock()
    store = SessionStore(10_000, 3600, clock=clock)
    for i in range(3000):
        clock.now += 0.001
        s = store.touch(f"s{i:05d}")
        s.agent = rng.choice(["planner", "coder", "Reviewer"])
        verdict = rng.choice(["continue"] * 6 + ["nudge", "stop", "paused"])
        if verdict != "continue":
            before, s.verdict = s.verdict, verdict
            store.verdict_changed(s, before)
    for i in rng.sample(range(3000), 300):  # touched again: last-seen order differs from creation
        clock.now += 0.001
        store.touch(f"s{i:05d}")
    every = list(store)

    def naive(verdict: str | None, query: str) -> list[str]:
        kept = [s for s in every if (verdict is None or s.verdict == verdict)
                and (not query or query in s.id.lower() or query in s.agent.lower())]
        return [s.id for s in sorted(kept, key=lambda s: (-state.VERDICT_RANK[s.verdict], -s.last_seen))]

    old_batch = state.RANK_BATCH
    state.RANK_BATCH = 64
    try:
        for verdict in (None, "nudge", "continue"):
            for query in ("", "review", "s01"):
                expected = naive(verdict, query)
                for offset, limit in ((0, 100), (150, 500), (2900, 200), (0, 5000)):
                    page, total = store.ranked(verdict, query, offset, limit)
                    assert total == len(expected), (verdict, query)
                    assert [s.id for s in page] == expected[offset:offset + limit], (verdict, query, offset)
    finally:
        state.RANK_BATCH = old_batch


def test_recent_step_excerpts_are_redacted_when_shown_and_keep_twenty() -> None:
    from otelloop.model import Step
    from otelloop.state import EXCERPT_CHARS, RECENT_STEPS, push_recent, recent_steps

    secret = "sk-live-7Qx9Lm2Vb8Rt4Kp6Zw1Nc3Hd5"
    session = Session("s", 0.0)
    for i in range(30):  # one step per request, as a slow agent sends them
        push_recent(session, [Step("s", "tool", f"t{i}", args_text=f'{{"api_key": "{secret}", "n": {i}}}',
                                   output_text="x" * 190 + " Bearer " + secret, end_ns=i * 1_000_000)])
    steps = recent_steps(session)
    assert [s["name"] for s in steps] == [f"t{i}" for i in range(30 - RECENT_STEPS, 30)]
    assert [s["time_unix_ms"] for s in steps] == list(range(30 - RECENT_STEPS, 30))
    assert all(secret not in s["args"] and secret not in s["result"] for s in steps)
    assert all(len(s["result"]) <= EXCERPT_CHARS and '"n": ' in s["args"] for s in steps)


def test_detector_states_have_a_place_per_name_for_the_life_of_the_process() -> None:
    """The store owns where a detector's state sits in a session: given on first ask, then kept."""
    first = slot("test_slot_a")
    assert slot("test_slot_b") == first + 1 and slot("test_slot_a") == first
    session = Session("s", 0.0)
    session.states.extend([None] * (first + 2))
    session.states[first + 1] = "state of b"
    assert session.state("test_slot_b") == "state of b" and session.state("test_slot_a") is None
    assert session.state("test_slot_never_placed") is None  # asking a session gives no name a place
    assert slot("test_slot_never_placed") == first + 2
