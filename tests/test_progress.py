"""The progress tracker: whether a step brought something new, and how results repeat."""

from __future__ import annotations

from typing import Any

from otelloop import progress
from otelloop.mapping.canonical import hash_text
from otelloop.mapping.results import ACK, BLANK, FAILED
from otelloop.model import Step
from otelloop.progress import MAX_RESULTS
from tests.helpers import make_step


def tool(name: str, args: int, output: int | None, **kw: Any) -> Step:
    """A tool step; hashes are 64-bit like the mapping's (small numbers stand for them here)."""
    return make_step(name, args_hash=args, output_hash=None if output is None else hash_text(str(output)), **kw)


def judged(*steps: Step) -> list[tuple[bool | None, int, int, int]]:
    """(novel, repeats, tool_repeats, stale) of each step, fed in order to one session."""
    state = progress.new_state()
    out = []
    for step in steps:
        progress.observe(state, step)
        out.append((step.novel, step.repeats, step.tool_repeats, step.stale))
    return out


def test_a_new_result_is_progress_and_a_repeated_one_is_not() -> None:
    assert judged(tool("poll", 1, 10), tool("poll", 1, 11), tool("poll", 1, 11), tool("poll", 1, 11),
                  tool("poll", 1, 12)) == [
        (True, 1, 0, 0), (True, 1, 0, 0), (False, 2, 0, 1), (False, 3, 0, 2), (True, 1, 0, 0)]


def test_results_are_compared_whichever_tool_returned_them() -> None:
    assert [n for n, *_ in judged(tool("a", 1, 10), tool("b", 2, 10))] == [True, False]


def test_a_call_repeats_its_result_even_when_other_calls_come_between() -> None:
    """Parallel or alternating calls: each call's own run of identical results counts."""
    steps = [tool("status", 1, 10), tool("log", 2, 20)] * 3
    assert [(r, s) for _, r, _, s in judged(*steps)] == [(1, 0), (1, 0), (2, 1), (2, 2), (3, 3), (3, 4)]


def test_results_that_say_nothing_are_never_progress_and_repeat_for_the_tool() -> None:
    """Searches worded differently that all find nothing: one tool, the same (blank) result again."""
    steps = [tool("search", i, 100 + i, result_flags=BLANK) for i in range(4)]
    assert judged(*steps) == [(False, 1, 1, 1), (False, 1, 2, 2), (False, 1, 3, 3), (False, 1, 4, 4)]


def test_a_failing_tool_repeats_its_failure_whatever_its_arguments() -> None:
    steps = [tool("run", i, 7, result_flags=FAILED) for i in range(3)]
    assert [t for _, _, t, _ in judged(*steps)] == [1, 2, 3]


def test_acknowledged_actions_are_told_apart_by_what_they_were_asked() -> None:
    """A batch of different calls all answered "Saved" is work; the same call again is not."""
    steps = [tool("save_note", i, 5, result_flags=ACK) for i in range(3)] + [tool("save_note", 2, 5,
                                                                                 result_flags=ACK)]
    assert [n for n, *_ in judged(*steps)] == [True, True, True, False]


def test_writes_are_judged_by_the_file_version_they_produce() -> None:
    def write(content: int) -> Step:
        return tool("write_file", content, 1, tool_class="write", file_path="a.py", content_hash=content)

    assert [n for n, *_ in judged(write(1), write(2), write(1), write(3))] == [True, True, False, True]


def test_an_edit_and_the_edit_that_undoes_it_are_the_same_change() -> None:
    def edit(old: int, new: int) -> Step:
        return tool("edit", old * 10 + new, 1, tool_class="write", file_path="a.py", edit_old_hash=old,
                    edit_new_hash=new)

    assert [n for n, *_ in judged(edit(1, 2), edit(2, 1), edit(1, 2), edit(2, 3))] == [True, False, False, True]


def test_errors_are_results_too() -> None:
    def err(h: int) -> Step:
        return tool("fetch", 1, None, outcome="error", error_hash=h)

    assert [n for n, *_ in judged(err(1), err(1), err(2))] == [True, False, True]


def test_steps_without_a_result_cannot_be_judged() -> None:
    [(novel, *_)] = judged(tool("search", 1, None))
    assert novel is None
    llm = make_step("chat", kind="llm", output_hash=3)
    assert judged(llm) == [(None, 0, 0, 0)]


def test_result_keys_are_stable_hashes() -> None:
    """Replicas and replays must agree on the keys findings quote."""
    a = tool("write_file", 1, 1, tool_class="write", file_path="a.py", content_hash=9)
    # the same in every process: no per-process string hashing (PYTHONHASHSEED) goes into it
    assert progress.result_key(a) == hash_text("file\x1fa.py\x1f9")


def test_state_stays_bounded() -> None:
    state = progress.new_state()
    for i in range(10 * MAX_RESULTS):
        progress.observe(state, tool(f"t{i % 50}", i, i))
    assert progress.results_kept(state) == len(state.seen) == MAX_RESULTS
    assert progress.calls_kept(state) == progress.MAX_CALLS
    assert len(state.calls) == len(state.results) == len(state.runs) == progress.MAX_CALLS


def test_the_oldest_result_is_forgotten_first() -> None:
    """Beyond MAX_RESULTS distinct results the oldest counts as new again; the others are still known."""
    state = progress.new_state()
    for i in range(MAX_RESULTS + 1):
        progress.observe(state, tool("read", i, i))
    again = [tool("read", 99, 1), tool("read", 98, MAX_RESULTS), tool("read", 97, 0)]
    for step in again:
        progress.observe(state, step)
    assert [s.novel for s in again] == [False, False, True]


def test_the_least_recently_used_call_is_forgotten_first() -> None:
    """Beyond MAX_CALLS distinct calls the one used longest ago loses its run; using a call keeps it."""
    state = progress.new_state()
    calls = progress.MAX_CALLS
    for i in range(calls):
        progress.observe(state, tool("get", i, 1000 + i))
    repeated = tool("get", 0, 1000)  # call 0 is used again: now call 1 is the oldest
    progress.observe(state, repeated)
    progress.observe(state, tool("get", calls, 1000 + calls))  # one call too many: call 1 goes
    kept, forgotten = tool("get", 0, 1000), tool("get", 1, 1001)
    progress.observe(state, kept)
    progress.observe(state, forgotten)
    assert (repeated.repeats, kept.repeats, forgotten.repeats) == (2, 3, 1)
    assert progress.calls_kept(state) == calls


def test_a_run_saturates_at_its_maximum_and_a_new_result_starts_it_again() -> None:
    steps = [tool("poll", 1, 10) for _ in range(progress.MAX_RUN + 5)] + [tool("poll", 1, 11), tool("poll", 1, 11)]
    runs = [r for _, r, _, _ in judged(*steps)]
    assert runs[:3] == [1, 2, 3]
    assert runs[progress.MAX_RUN - 1:progress.MAX_RUN + 5] == [progress.MAX_RUN] * 6
    assert runs[-2:] == [1, 2]
    assert progress.MAX_RUN == 255


def test_a_tool_run_and_a_call_run_are_counted_apart() -> None:
    """A failing tool's run whatever its arguments sits beside each call's own run, in the same bounded
    memory of recent calls."""
    steps = [tool("run", i % 2, 7, result_flags=FAILED) for i in range(4)]
    assert [(r, t) for _, r, t, _ in judged(*steps)] == [(1, 1), (1, 2), (2, 3), (2, 4)]


def structured(name: str, args: int, *leaves: int, tokens: tuple[int, ...] = ()) -> Step:
    """A tool step whose result is structured: ``leaves`` as the mapping makes them (path << 32 | value)."""
    return make_step(name, args_hash=args, output_hash=hash_text(repr(leaves)), leaves=leaves,
                     result_tokens=tokens)


def test_the_least_recently_used_tool_is_forgotten_first() -> None:
    state = progress.new_state()
    for name in "abcd":
        progress.observe(state, structured(name, 1, 1 << 32 | 2))
    progress.observe(state, structured("a", 1, 1 << 32 | 3))  # a is used again: b is now the oldest
    progress.observe(state, structured("e", 1, 1 << 32 | 4))
    assert progress.tools_kept(state) == progress.MAX_TOOLS
    assert state.tools is not None
    assert [m.tool for m in state.tools] == [progress._tool_hash(n) for n in "cdae"]


def test_a_tool_forgotten_no_longer_recognises_its_cursor() -> None:
    """Pagination needs the tool's memory: once evicted, a call handing back its cursor is a new call."""
    state = progress.new_state()
    cursor = 77
    progress.observe(state, structured("list", 1, 1 << 32 | 2, tokens=(cursor,)))
    page = make_step("list", args_hash=2, args_key=5, arg_tokens=(cursor,), output_hash=1, leaves=(1 << 32 | 3,))
    progress.observe(state, page)
    assert page.args_hash == 5  # the call it continues
    for name in "bcde":  # four other tools: "list" is forgotten
        progress.observe(state, structured(name, 1, 1 << 32 | 2))
    late = make_step("list", args_hash=2, args_key=5, arg_tokens=(cursor,), output_hash=1, leaves=(1 << 32 | 3,))
    progress.observe(state, late)
    assert late.args_hash == 2


def test_a_new_noisy_path_takes_the_place_of_the_one_seen_changing_least() -> None:
    memory = progress.ToolMemory(1)
    for path in (1, 1, 2, 3, 2, 4, 1):
        progress._count_change(memory, path)
    assert (list(memory.noisy or ()), list(memory.changes or b"")) == ([1, 2, 3, 4], [3, 2, 1, 1])
    progress._count_change(memory, 5)  # full: 3 and 4 changed once; the first of them gives way
    assert (list(memory.noisy or ()), list(memory.changes or b"")) == ([1, 2, 5, 4], [3, 2, 1, 1])
    for _ in range(300):
        progress._count_change(memory, 2)
    assert memory.changes is not None and memory.changes[1] == progress.MAX_CHANGES == 255


def test_a_call_key_equal_to_a_remembered_result_is_not_taken_for_that_call() -> None:
    """Calls and their results are remembered apart: a call whose key equals another call's result is a
    call of its own."""
    state = progress.new_state()
    first, result = 5 << 8, 7 << 8
    assert progress._remember_call(state, first, result) == 1
    assert progress._remember_call(state, result, 9 << 8) == 1
    assert progress.calls_kept(state) == 2
    assert progress._remember_call(state, result, 9 << 8) == 2
    assert progress._remember_call(state, first, result) == 2


def test_a_step_known_only_by_its_name_is_unjudged() -> None:
    """No result; a write or an acknowledgement whose arguments are unknown; an error that names only its
    type: the tool's name is all that is left, and a name is no evidence."""
    steps = [make_step("lookup"),
             make_step("write_file", tool_class="write"),
             make_step("save_note", output_hash=hash_text("ok"), result_flags=ACK),
             make_step("charge_card", outcome="error", result_flags=FAILED)]
    assert [n for n, *_ in judged(*steps)] == [None, None, None, None]
    assert all(progress.unjudged(s) and s.result is None for s in steps)
    described = make_step("charge_card", outcome="error", error_hash=hash_text("card declined"),
                          result_flags=FAILED)
    assert judged(described)[0][0] is True and not progress.unjudged(described)


def test_an_unjudged_step_ends_the_runs_of_its_call_and_its_tool_and_the_stale_row() -> None:
    blank = {"result_flags": BLANK}
    steps = [tool("search", 1, 0, **blank), tool("search", 1, 0, **blank), tool("search", 1, None),
             tool("search", 1, 0, **blank), tool("search", 2, 0, **blank)]
    assert judged(*steps) == [(False, 1, 1, 1), (False, 2, 2, 2), (None, 1, 0, 0), (False, 1, 1, 1),
                              (False, 1, 2, 2)]
