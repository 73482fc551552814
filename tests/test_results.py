"""What result texts say: volatile parts, results that say nothing, failures, acknowledgements."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otelloop.mapping import canonical, results
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
    (ha, _, fa, _), (hb, _, fb, _) = canon.output(a), canon.output(b)
    assert ha == hb and fa == fb == FAILED


def test_an_error_keeps_its_counts() -> None:
    """Two errors that differ only in their timing are the same result; in their counts, not."""
    canon = Canonicalizer()
    same = canon.error("AssertionError|3 failed in 0.04s")[0] == canon.error("AssertionError|3 failed in 0.9s")[0]
    fewer = canon.error("AssertionError|3 failed in 0.04s")[0] != canon.error("AssertionError|2 failed in 0.04s")[0]
    assert same and fewer
    assert canon.error("boom")[1] & FAILED


#: The volatile-part patterns as plainly written, each beginning with ``\b``: the reference the
#: faster forms in ``results._VOLATILE`` must agree with.
_PLAIN_VOLATILE = (
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b",
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d{2} (?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} "
    r"\d{2}:\d{2}:\d{2} GMT",
    r"\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
    r"(?:/private)?/(?:tmp|var/tmp|var/folders|dev/shm)/[^\s'\":,)\]]*",
    r"\b0x[0-9a-fA-F]{4,}\b",
    r"\b[0-9a-fA-F]{8,}\b",
    r"\b\d+\s?(?:s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|wks?|weeks?|mo|months?|y|yrs?|years?)"
    r"\s+ago\b",
    r"\b\d+(?:h\d+m(?:\d+(?:\.\d+)?s)?|h\d+(?:\.\d+)?s|m\d+(?:\.\d+)?s)\b",
    r"\bP(?:\d+[YMWD])*T(?:\d+(?:\.\d+)?[HMS])+\b",
    r"\b\d+(?:\.\d+)?\s?(?:ms|msec|milliseconds?|s|secs?|seconds?|µs|us|ns)\b",
)
_EDGY = st.text(alphabet=st.sampled_from(list("0123456789abcdefABCDEFxTZsmu:-./_ é٣\nprivatempPHMSDgohMon,GT")),
                max_size=80)


@given(st.lists(_EDGY, min_size=1, max_size=4).map("".join))
@settings(max_examples=400, deadline=None)
def test_the_volatile_patterns_match_exactly_where_their_plain_forms_do(text: str) -> None:
    for (fast, _, _), plain in zip(results._VOLATILE, _PLAIN_VOLATILE, strict=True):
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in re.finditer(plain, text)], plain


@pytest.mark.parametrize("text", [
    "a1b2c3d4e5", "x1b2c3d4e5f", "_deadbeef12", "é0x1234", "0x1234", "z0x1234", "٣12:30:00", "12:30:00",
    "2026-11-25T10:00:00Z", "a2026-11-25", "in 0.03s", "took12ms", "/private/tmp/x y", "a/tmp/b",
])
def test_the_volatile_patterns_agree_with_their_plain_forms_at_word_edges(text: str) -> None:
    for (fast, _, _), plain in zip(results._VOLATILE, _PLAIN_VOLATILE, strict=True):
        assert [m.span() for m in fast.finditer(text)] == [m.span() for m in re.finditer(plain, text)], plain


#: A text's candidate counter (``canonical._TEXT_NUMBER``) as plainly written: the reference of its faster form.
_PLAIN_TEXT_NUMBER = r"(?<![\w.,/%<>-])[1-9]\d{2,}(?![\w.,/%<>])"
_NUMBERY = st.text(alphabet=st.sampled_from(list("0123456789 \n.,/%<>-_aZé٣")), max_size=60)


@given(st.lists(_NUMBERY, min_size=1, max_size=4).map("".join))
@settings(max_examples=400, deadline=None)
def test_the_text_counter_pattern_matches_exactly_where_its_plain_form_does(text: str) -> None:
    _text_counters_agree(text)


@pytest.mark.parametrize("text", ["123", "x123", "1234", "a 123 b", ".123", "-123", "0123", "٣123", "<n>123",
                                  "123%", "v1.234", "12 345", "\n456\n", "%999"])
def test_the_text_counter_pattern_agrees_with_its_plain_form_at_edges(text: str) -> None:
    _text_counters_agree(text)


def _text_counters_agree(text: str) -> None:
    assert ([m.span() for m in canonical._TEXT_NUMBER.finditer(text)]
            == [m.span() for m in re.finditer(_PLAIN_TEXT_NUMBER, text)])


@given(st.lists(_EDGY, min_size=1, max_size=4).map("".join))
@settings(max_examples=400, deadline=None)
def test_a_volatile_pattern_is_skipped_only_where_it_cannot_match(text: str) -> None:
    for pattern, _, gate in results._VOLATILE:
        if pattern.search(text) is not None:
            assert gate is None or gate.search(text) is not None, pattern.pattern


_PLAIN_FAILURE = re.compile(
    r"\b[1-9]\d*\s+(?:[\w-]+\s+)?(?:failed|failures?|errors?|failing|broken|red)\b"
    r"|\bAssertionError\b|\bFAILED\s*\((?:failures|errors)=[1-9]|^(?:FAIL|FAILED|ERROR)\b|^--- FAIL:"
    r"|Traceback \(most recent call last\)"
    r"|\b(?:exit|return)\s?(?:code|status)\s*[:=]?\s*[1-9]\d*\b|\bexited with (?:code|status) [1-9]"
    r"|\bcommand not found\b"
    r"|\b(?:[Ff]ail(?:ed|ures?|ing)?|[Ff]AIL(?:ED|URES?)?|[Ee]rrors?|[Ee]RRORS?)[\"']?\s*[:=]\s*[1-9]",
    re.MULTILINE)
_FAILURE_WORDS = ["2 failed", "1 test failed", "3 errors", "0 failed", "x2 failed", "AssertionError", "xAssertionError",
                  "FAILED (failures=1)", "FAILED (errors=0)", "FAIL", "FAILED", "ERROR", "--- FAIL:", "exit code 2",
                  "exit status: 1", "exited with code 3", "return code=4", "areturn code 1", "command not found",
                  "subcommand not found", "Traceback (most recent call last)", "é1 failed", "_1 failed", "red",
                  "Failures: 2", "Failed:     1", '"failed": 3', "Errors: 0", "xFailed: 1", "FAILURES=4", "errors=1"]


@given(st.lists(st.one_of(st.sampled_from(_FAILURE_WORDS), st.text(alphabet="ab1 \n:=-_é", max_size=4)),
                max_size=8).map("".join))
@settings(max_examples=400, deadline=None)
def test_the_failure_searches_find_what_one_plain_alternation_finds(text: str) -> None:
    assert any(p.search(text) for p in results._FAILURE_TEXTS) == (_PLAIN_FAILURE.search(text) is not None)
    assert results._reports_failure(text) == (_PLAIN_FAILURE.search(text) is not None)


@pytest.mark.parametrize("word", _FAILURE_WORDS)
def test_each_failure_form_is_found_as_by_the_plain_alternation(word: str) -> None:
    for text in (word, f"x {word} y", f"a\n{word}\n", f"z{word}"):
        assert any(p.search(text) for p in results._FAILURE_TEXTS) == (_PLAIN_FAILURE.search(text) is not None)
        assert results._reports_failure(text) == (_PLAIN_FAILURE.search(text) is not None)


_PLAIN_BLANK = re.compile(
    r"\b(?:no|0|zero)\s+(?:\w+\s+)?(?:results?|matches|match|hits?|documents?|docs|entries|items|records|"
    r"rows|files?|pages?|articles?|sources?|information|info|data)\b"
    r"|\bnothing\s+(?:\w+\s+)?(?:found|matched|matching|returned|relevant|useful)\b|\bnot\s+found\b"
    r"|\bfound\s+nothing\b|\b(?:could\s*n[o']t|can\s*n[o']t|cannot|unable\s+to|did\s*n[o']t|does\s*n[o']t)\s+find\b"
    r"|\b(?:does\s*n[o']t|did\s*n[o']t)\s+exist\b|\bno\s+such\b|\breturned\s+(?:no|nothing|0)\b|\bempty\s+result"
    r"|^\W*(?:none|null|nil|n/?a|empty|no data|\[\]|\{\})\W*$",
    re.IGNORECASE)
_BLANK_WORDS = ["no", "No", "0", "zero", "results", "reſults", "matches", "hits", "docs", "entries", "items", "records",
                "rows", "file", "pages", "articles", "sources", "information", "info", "data", "DATA", "nothing",
                "found", "FOUND", "matched", "relevant", "not", "could not", "can't", "cannot", "unable to",
                "didn't", "doesn't", "find", "exist", "such", "returned", "empty", "result", "none", "null", "nil",
                "n/a", "NA", "no data", "[]", "{}", "new", "rowing", "K"]


@given(st.lists(st.one_of(st.sampled_from(_BLANK_WORDS), st.text(alphabet=" \n.:-xé", max_size=3)),
                max_size=8).map("".join))
@settings(max_examples=500, deadline=None)
def test_the_gated_blank_search_finds_what_the_plain_alternation_finds(text: str) -> None:
    text = text.strip()
    assert results._says_nothing(text, text.lower()) == (_PLAIN_BLANK.search(text) is not None)


@pytest.mark.parametrize("text", ["no results", "No  matching docs", "0 hits", "nothing relevant found",
                                  "Nothing found", "not found", "found nothing", "I couldn't find it",
                                  "does not exist", "no such file", "returned 0", "empty result set", " none ",
                                  "N/A", "[]", "no reſults", "results: 3", "rowing home", "not  Found",
                                  # each hint alone
                                  *(f"no {noun}" for noun in ("results", "matches", "hits", "documents", "docs",
                                                              "entries", "items", "records", "rows", "files",
                                                              "pages", "articles", "sources", "info", "data")),
                                  "nothing useful", "cannot find", "does not exist", "no such", "returned no",
                                  "empty result", "zero relevant hits", "sorry, no data today"])
def test_each_blank_form_is_judged_as_by_the_plain_alternation(text: str) -> None:
    assert results._says_nothing(text, text.lower()) == (_PLAIN_BLANK.search(text) is not None)


# -- test runners without a status: failures from their counts ---------------------------------------------------

_MAVEN = """[INFO] Running com.example.PricingTest
[ERROR] Tests run: 2, Failures: 2, Errors: 0, Skipped: 0, Time elapsed: 0.041 s <<< FAILURE!
[ERROR] com.example.PricingTest.testDiscount -- Time elapsed: 0.003 s <<< FAILURE!
org.opentest4j.AssertionFailedError: expected: <90> but was: <100>
[INFO] Results:
[ERROR] Tests run: 15, Failures: 2, Errors: 0, Skipped: 0
[INFO] BUILD FAILURE"""
_DOTNET = """Starting test execution, please wait...
  Failed Shop.Tests.PricingTests.Discount [12 ms]
  Error Message:
   Assert.Equal() Failure: Expected 90, Actual 100
Failed!  - Failed:     2, Passed:    13, Skipped:     0, Total:    15, Duration: 212 ms - Shop.Tests.dll (net8.0)"""


@pytest.mark.parametrize("text", [
    _MAVEN, _DOTNET, '{"failed": 2, "passed": 13}', "Errors: 1, Warnings: 0", "FAILURES=3",
])
def test_a_failing_count_written_label_first_is_a_failure(text: str) -> None:
    """Maven/Surefire and ``dotnet test`` write the count after its label; a JSON report as a field."""
    assert result_flags(text, False) & FAILED


@pytest.mark.parametrize("text", [
    "[INFO] Tests run: 15, Failures: 0, Errors: 0, Skipped: 0\n[INFO] BUILD SUCCESS",
    "Passed!  - Failed:     0, Passed:    15, Skipped:     0, Total:    15, Duration: 212 ms",
    '{"failed": 0, "passed": 15}', "error_rate: 1", "failover: 2 replicas", "Fail-safe: 3",
])
def test_a_zero_count_or_another_word_is_no_failure(text: str) -> None:
    assert not result_flags(text, False) & FAILED


def test_a_runner_summary_fails_the_same_way_whatever_its_timings() -> None:
    """The failing test's identity with noise masked: two runs of one failing suite are one result, a run
    with one failure fewer is another."""
    canon = Canonicalizer()
    again = _DOTNET.replace("[12 ms]", "[15 ms]").replace("Duration: 212 ms", "Duration: 340 ms")
    fewer = _DOTNET.replace("Failed:     2, Passed:    13", "Failed:     1, Passed:    14")
    assert canon.output(_DOTNET)[0] == canon.output(again)[0] != canon.output(fewer)[0]


def test_langsmith_wraps_a_tool_message_in_output_and_its_text_is_read_by_lines() -> None:
    """LangSmith's OTel mode records a tool's result as ``{"output": <ToolMessage fields>}``: the message's
    content is the result, read line by line (``--- FAIL:`` starts a line of ``go test`` output)."""
    import json

    go = ("--- FAIL: TestHours (0.00s)\n    durations_test.go:16: assert 720 == 7200\n"
          "FAIL\nFAIL\texample.com/shop\t0.07s")
    wrapped = json.dumps({"output": {"content": go, "additional_kwargs": {}, "response_metadata": {}, "type": "tool",
                                     "name": "run_checks", "tool_call_id": "call_1", "status": "success"}})
    canon = Canonicalizer()
    h, _, flags, _ = canon.output(wrapped)
    assert flags & FAILED and h == canon.output(go)[0]


# -- results that are empty but for noise ------------------------------------------------------------------------

CLOCK = 1_795_554_986.0


@pytest.mark.parametrize("noise", [
    "timestamp_ms=1795554986398", "served_at: 1795554986", "generated at 2026-11-26T05:17:40.971304+02:00",
    "Date: Wed, 26 Nov 2026 05:16:26 GMT", "request_id: req_H28GflmVxBoTVaZSzQERM3",
    "correlation-id: 0b6f4d3e-1f5c-4c55-9d9a-6a4e0f0b7c11", "event 01M8B4KF7BHTMNGAXDF5S162Y5",
    "message id 1861234567890123456", 'ETag: W/"9fc43adb8dcdbb5f"', "uptime_ms: 7341234", "(took 123 ms)",
])
@pytest.mark.parametrize("answer", ["[]", "{}", "null", ""])
def test_an_empty_answer_with_a_noise_line_says_nothing(answer: str, noise: str) -> None:
    """An empty answer followed by a line that is only noise with its label is empty, as the same answer
    as a JSON result with a noise field is."""
    text = f"{answer}\n{noise}" if answer else noise
    _, empty, flags, _ = Canonicalizer().output(text, True, CLOCK)
    assert empty and flags & BLANK


@pytest.mark.parametrize("text", [
    '["INV-1042"]\nrequest_id: req_H28GflmVxBoTVaZSzQERM3',  # something found, beside the noise
    "[]\nfound 3 files at 2026-11-26T05:17:40Z",  # a line that says more than a label
    "[]\nrequest 42 took 123 ms",  # a number standing alone is no label
    "invoice INV-1042 generated at 2026-11-26T05:17:40Z",
])
def test_an_answer_beside_noise_is_not_blank(text: str) -> None:
    _, empty, flags, _ = Canonicalizer().output(text, True, CLOCK)
    assert not empty and not flags & BLANK


def test_noise_lines_are_left_out_only_for_judging() -> None:
    """The noise line is masked in the result's identity as before; only its blankness reads past it."""
    a = Canonicalizer().output("[]\nrequest_id: req_H28GflmVxBoTVaZSzQERM3", True, CLOCK)
    b = Canonicalizer().output("[]\nrequest_id: req_vFAjgoRVXbELAgRpHaIv6Q", True, CLOCK)
    assert a[0] == b[0] and a[1:3] == b[1:3]
    assert results.without_noise_lines("a\nrequest_id: req_<id>\nb") == "a\nb"


# -- the search for numbers after keys ---------------------------------------------------------------------------


def test_every_time_unit_ends_in_a_letter_the_keyed_number_search_looks_after() -> None:
    """The search for a number after a key only looks after the letters time units end in: a unit added
    to the list that ends in another letter must widen it, or numbers under keys naming it stay."""
    from otelloop.mapping.noise import TIME_UNITS

    for unit in TIME_UNITS:
        for key in (f"took_{unit}", f"took_{unit.upper()}", f"took{unit.capitalize()}"):
            assert results._KEYED_NUMBER.search(f"{key}: 12") is not None, key
            assert results._KEYED_NUMBER.search(f'"{key}"=12') is not None, key


#: The search for numbers after keys as it was before it looked only after a time unit's last letter: a
#: number after any letter (or a letter and a quote), each match put back unless its key names a unit.
_ANY_KEYED_NUMBER = re.compile(r"([:=](?:(?<=[A-Za-z][:=])|(?<=[A-Za-z][\"'][:=]))[ \t]*)\d+(?:\.\d+)?(?![\w.])")
_KEY_TEXT = st.lists(st.one_of(
    st.sampled_from(["took_ms", "latencyMs", "uptime-s", "elapsed_seconds", "TOOK_MS", "size", "rows", "line",
                     "passed", "items", "status", "nanos", "ids", "x", "abc_d", "timeSec", "msecs", "uptime_s2"]),
    st.sampled_from([":", "=", ": ", "=\t", '":', "':", '"=']), st.from_regex(r"\d{1,6}(\.\d{1,3})?", fullmatch=True),
    st.sampled_from([" ", ",", "\n", ".", "x", "_", "{", "}", '"']), st.text(max_size=4)), max_size=12).map("".join)


@settings(max_examples=400, deadline=None)
@given(_KEY_TEXT)
def test_numbers_after_keys_are_masked_as_the_search_after_any_key_masked_them(text: str) -> None:
    assert (results._KEYED_NUMBER.sub(results._unit_keyed, text)
            == _ANY_KEYED_NUMBER.sub(results._unit_keyed, text))
