"""What result texts say: volatile parts, results that say nothing, failures, acknowledgements."""

from __future__ import annotations

import pytest

from otelloop.mapping.canonical import Canonicalizer
from otelloop.mapping.results import ACK, BLANK, FAILED, normalise_result, result_flags


@pytest.mark.parametrize("a, b", [
    ("1 failed, 2 passed in 0.03s", "1 failed, 2 passed in 0.21s"),
    ("done at 2026-11-24T19:50:05.123Z", "done at 2026-11-25T08:01:00Z"),
    ("finished 12:01:33", "finished 23:59:59"),
    ("request 8f14e45f-ceea-467f-a9a1-5e3c2a0b7d11 ok", "request 1b4e28ba-2fa1-11d2-883f-0016d3cca427 ok"),
    ("object at 0x7f3a2b1c9d40", "object at 0x55d1e2f3a4b0"),
    ("commit 3f2a9c1d7e4b passed", "commit a81d0c3f9b27 passed"),
    ("rootdir: /tmp/pytest-of-root/pytest-12/test_a0", "rootdir: /tmp/pytest-of-root/pytest-13/test_a0"),
    ("took 15 ms", "took 230 ms"),
], ids=["duration", "datetime", "clock", "uuid", "address", "hex-id", "tmp-path", "millis"])
def test_volatile_parts_do_not_make_a_result_new(a: str, b: str) -> None:
    assert normalise_result(a) == normalise_result(b)


@pytest.mark.parametrize("a, b", [
    ("3 failed, 2 passed", "2 failed, 3 passed"),
    ("status: running", "status: done"),
    ("progress 40%", "progress 60%"),
    ("order 1042 shipped", "order 1043 shipped"),
], ids=["failure-count", "state", "percent", "plain-number"])
def test_counts_and_states_still_differ(a: str, b: str) -> None:
    assert normalise_result(a) != normalise_result(b)


@pytest.mark.parametrize("text, flags", [
    ("No results found for 'paris weather'.", BLANK),
    ("Found 0 documents matching 'x'", BLANK),
    ("Sorry, I could not find anything about it", BLANK),
    ("Nothing relevant in the index for x", BLANK),
    ("The file does not exist", BLANK),
    ("[]", BLANK),
    ("none", BLANK),
    ("Found 3 results: a, b, c", 0),
    ("No errors found", 0),
    ("def total(items):\n    return sum(items)\n", 0),
    ("..F\nFAILED tests/test_a.py::test_x - assert 1 == 2\n1 failed, 2 passed in 0.1s", FAILED),
    ("Traceback (most recent call last):\n  File \"x.py\"\nValueError: bad", FAILED),
    ("FAILED (failures=2)", FAILED),
    ("command exited with code 2", FAILED),
    ("5 passed in 0.2s", 0),
    # other runners' words for a failing count, and a failed assertion
    ("3 tests failed, 9 passed", FAILED),
    ("checks: 2 red, 4 green", FAILED),
    ("checks: 0 red, 6 green", 0),
    ("build finished: 1 broken link(s)", FAILED),
    ("  x test_hours - AssertionError: assert 720 == 7200", FAILED),
    # a failure report that says "not found" is a failure, not an empty result
    ("WARNING docs/a.md: link target not found: b.md\n1 broken link(s)", FAILED),
    ("0 tests failed", 0),
    ("Saved", ACK),
    ("File written successfully", ACK),
    ("ok", ACK),
], ids=lambda v: v if isinstance(v, int) else None)
def test_result_flags(text: str, flags: int) -> None:
    assert result_flags(text, text.strip() in ("", "[]")) == flags


def test_a_blank_result_is_never_an_acknowledgement_nor_a_long_text_blank() -> None:
    assert result_flags("", True) == BLANK
    long_text = "No results for the first query. " + "But here is a long document. " * 20
    assert not result_flags(long_text, False) & BLANK


def test_a_langchain_message_is_read_by_its_content() -> None:
    """A serialised ``ToolMessage`` ({"type", "data": {"content", "tool_call_id", …}}) says what its
    content says, and two of them with the same content hash alike whatever their ids and timings."""
    canon = Canonicalizer()
    a = ('{"type": "tool", "data": {"content": "1 failed, 2 passed in 0.03s", "tool_call_id": "call_1",'
         ' "id": "m1"}}')
    b = ('{"type": "tool", "data": {"content": "1 failed, 2 passed in 0.29s", "tool_call_id": "call_2",'
         ' "id": "m2"}}')
    (ha, _, fa), (hb, _, fb) = canon.output(a), canon.output(b)
    assert ha == hb and fa == fb == FAILED


def test_an_error_keeps_its_counts() -> None:
    """Two errors that differ only in their timing are the same result; in their counts, not."""
    canon = Canonicalizer()
    same = canon.error("AssertionError|3 failed in 0.04s")[0] == canon.error("AssertionError|3 failed in 0.9s")[0]
    fewer = canon.error("AssertionError|3 failed in 0.04s")[0] != canon.error("AssertionError|2 failed in 0.04s")[0]
    assert same and fewer
    assert canon.error("boom")[1] & FAILED
