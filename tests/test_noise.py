"""Per-call noise by shape and by behaviour; structured results compared as structures.

Shapes (``otelloop.mapping.noise``, ``results.normalise_result``): each form of per-call noise is masked,
and what carries information (words, counts, versions, paths, dates far from the span clock) is not.
Structures (``canonical.Canonicalizer.output``, ``progress``): results compared path by path, a cursor
handed back is the same call, echoed ids keep results apart, and the paths that change on every repeat
of a call are learned per tool, boundedly.
"""

from __future__ import annotations

import base64
import datetime
import json
import random
import string
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from spans import T0, request, tool_span

from otelloop import progress
from otelloop.mapping.canonical import MAX_LEAVES, Canonicalizer
from otelloop.mapping.results import BLANK, normalise_result
from otelloop.model import Step
from otelloop.pipeline import map_request

CLOCK_S = T0 / 1e9  # the span clock of tests/spans.py
B62 = string.ascii_letters + string.digits
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _ulid(ms: int, rng: random.Random) -> str:
    return "".join(CROCKFORD[(ms >> (5 * i)) & 31] for i in reversed(range(10))) + "".join(
        rng.choice(CROCKFORD) for _ in range(16))


def noise_value(form: str, seconds: float, rng: random.Random) -> str:
    """One per-call value of ``form`` as a server near ``seconds`` would write it."""
    if form == "epoch_s":
        return str(int(seconds))
    if form == "epoch_s_fraction":
        return f"{seconds:.6f}"
    if form == "epoch_ms":
        return str(int(seconds * 1e3))
    if form == "epoch_us":
        return str(int(seconds * 1e6))
    if form == "epoch_ns":
        return str(int(seconds * 1e9))
    if form == "rfc3339":
        zone = datetime.timezone(datetime.timedelta(minutes=rng.choice([0, 120, -300, 330])))
        return datetime.datetime.fromtimestamp(seconds, zone).isoformat(timespec="microseconds")
    if form == "http_date":
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    if form == "req_base62":
        return "req_" + "".join(rng.choice(B62) for _ in range(24))
    if form == "uuid":
        return str(uuid.UUID(int=rng.getrandbits(128), version=4))
    if form == "ulid":
        return _ulid(int(seconds * 1000), rng)
    if form == "snowflake":
        return str(((int(seconds * 1000) - 1_288_834_974_657) << 22) | rng.getrandbits(22))
    if form == "etag":
        return f'W/"{rng.getrandbits(64):016x}"'
    if form == "cursor":
        return base64.b64encode(json.dumps({"after": rng.getrandbits(40), "ts": int(seconds)}).encode()).decode()
    if form == "base64url":
        return base64.urlsafe_b64encode(rng.randbytes(18)).decode()
    if form == "age":
        return f"{rng.randint(1, 59)} minutes ago"
    if form == "duration":
        return f"{rng.randint(1, 9)}m{rng.randint(0, 59)}s"
    raise ValueError(form)


FORMS = ["epoch_s", "epoch_s_fraction", "epoch_ms", "epoch_us", "epoch_ns", "rfc3339", "http_date", "req_base62",
         "uuid", "ulid", "snowflake", "etag", "cursor", "base64url", "age", "duration"]


# -- shapes ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
def test_each_form_of_per_call_noise_is_masked(form: str) -> None:
    rng = random.Random(form)
    texts = {normalise_result(f"served {noise_value(form, CLOCK_S + i * 7.3, rng)} for page 2", CLOCK_S)
             for i in range(20)}
    assert len(texts) == 1, texts


#: Forms whose every value is masked (random ids of letters and digits are masked nearly always: see
#: test_random_tokens_are_ids_nearly_always).
EXACT_FORMS = [f for f in FORMS if f not in ("req_base62", "ulid", "base64url")]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(EXACT_FORMS), st.integers(0, 2**32), st.floats(-300 * 86400, 300 * 86400))
def test_noise_of_any_form_near_the_span_clock_is_masked(form: str, seed: int, offset: float) -> None:
    """Two results that differ only in one noise value of the same form read the same."""
    rng = random.Random(seed)
    a = noise_value(form, CLOCK_S + offset, rng)
    b = noise_value(form, CLOCK_S + offset + rng.uniform(0.001, 3600), rng)
    assert normalise_result(f"ok {a}\nitems: 3", CLOCK_S) == normalise_result(f"ok {b}\nitems: 3", CLOCK_S)


@pytest.mark.parametrize("text", [
    # words of any length, in any case, are information, never ids: their letters keep a vowel share of
    # a third or more and switch case only at word starts
    "implementation successfully completed", "CrashLoopBackOff", "CamelCaseIdentifierName", "Rechnungsnummer",
    "MAX_RETRIES_EXCEEDED",
    # counts, amounts and small ids: below 10 digits a number is never a clock or an id by its shape
    "3 failed, 2 passed", "order 1042 shipped", "total 123456789",
    # versions and paths: a dot or a slash ends a token, and path segments are words
    "upgraded to 1.2.3", "python3.11 -m pytest", "/src/utils/helper_functions_v2.py", "ubuntu-22.04-lts",
    # progress values: percentages and fractions move toward completion
    "progress 40%", "processed 40/100",
    # names that mix words and a number: one run of digits after letters
    "HelloWorld2024", "test_parse_config_values_2024", "x86_64-linux-gnu", "node_modules_v18_2024",
    # 12-digit account numbers and 13-digit ISBNs are stable numbers, not clocks (no epoch unit near now)
    "account 123456789012", "ISBN 9780306406157",
], ids=lambda t: t[:24])
def test_information_is_not_masked(text: str) -> None:
    assert normalise_result(text, CLOCK_S) == text


def test_a_clock_value_far_from_the_span_clock_is_information() -> None:
    """A record's date five years before the call is what the record says, not the server's clock."""
    long_ago = str(int(CLOCK_S - 5 * 365 * 86400))
    assert normalise_result(f"created {long_ago}", CLOCK_S) == f"created {long_ago}"
    assert normalise_result(f"created {int(CLOCK_S)}", CLOCK_S) == "created <clock>"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.from_regex(r"[a-z]{3,24}", fullmatch=True), st.integers(0, 10**9 - 1).map(str)),
                min_size=1, max_size=12))
def test_lowercase_words_and_small_numbers_are_never_masked(parts: list[str]) -> None:
    """Words of lower-case letters and numbers under 10 digits (joined so no duration can form)."""
    text = " | ".join(parts)
    assert normalise_result(text, CLOCK_S) == text


@pytest.mark.parametrize("alphabet, length", [
    (B62, 16), (B62, 24), ("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz", 22), (CROCKFORD, 26),
    (CROCKFORD, 16), ("0123456789abcdef", 16), (B62 + "-_", 22),
], ids=["base62-16", "base62-24", "base58-22", "base32-26", "base32-16", "hex-16", "base64url-22"])
def test_random_tokens_are_ids_nearly_always(alphabet: str, length: int) -> None:
    """Random tokens of every alphabet are ids by their shape at least 96 times in 100 (the rest are
    left to the per-tool learning); a prefixed one (``req_``) 98 times in 100."""
    rng = random.Random(alphabet + str(length))
    tokens = ["".join(rng.choice(alphabet) for _ in range(length)) for _ in range(2000)]
    plain = sum(normalise_result(t, CLOCK_S) != t for t in tokens) / len(tokens)
    prefixed = sum(normalise_result("req_" + t, CLOCK_S) != "req_" + t for t in tokens) / len(tokens)
    assert plain >= 0.96 and prefixed >= 0.98, (plain, prefixed)


def test_numbers_in_json_results_are_masked_by_shape_too() -> None:
    canon = Canonicalizer()
    a = canon.output(json.dumps({"rows": 3, "served_at": int(CLOCK_S * 1000)}), True, CLOCK_S)
    b = canon.output(json.dumps({"rows": 3, "served_at": int(CLOCK_S * 1000) + 812}), True, CLOCK_S)
    c = canon.output(json.dumps({"rows": 4, "served_at": int(CLOCK_S * 1000) + 999}), True, CLOCK_S)
    assert a[0] == b[0] != c[0]


# -- structures --------------------------------------------------------------------------------------------------


def _steps(*spans: Any) -> list[Step]:
    return map_request(request(*spans))


def _judge(steps: list[Step]) -> tuple[progress.ProgressState, list[tuple[bool | None, int]]]:
    state = progress.new_state()
    out = []
    for s in steps:
        progress.observe(state, s)
        out.append((s.novel, s.stale))
    return state, out


def test_json_results_are_compared_path_by_path() -> None:
    """Two pages whose items are the same and whose cursor and request id differ are the same page; a
    page with other items is another."""
    items = [{"sku": "A-1", "qty": 2}, {"sku": "B-7", "qty": 1}]
    page = [{"items": items, "next": noise_value("cursor", CLOCK_S, random.Random(i)),
             "request_id": noise_value("uuid", CLOCK_S, random.Random(i))} for i in range(3)]
    page[2]["items"] = [{"sku": "C-3", "qty": 5}]
    a, b, c = (_steps(tool_span("list_items", '{"q": "x"}', json.dumps(p), i=i))[0] for i, p in enumerate(page))
    assert a.output_hash == b.output_hash != c.output_hash


def test_stuck_pagination_is_the_same_call_giving_the_same_page() -> None:
    """Each call hands back the cursor the previous result gave; the items never change. From the second
    call on, the calls are one call repeating one result."""
    rng = random.Random(1)
    cursor = None
    steps = []
    for i in range(6):
        nxt = noise_value("cursor", CLOCK_S + i, rng)
        args = {"query": "open invoices"} | ({"cursor": cursor} if cursor else {})
        result = {"items": [{"invoice": "INV-1"}, {"invoice": "INV-2"}], "next_cursor": nxt}
        steps += _steps(tool_span("list_invoices", json.dumps(args), json.dumps(result), i=i))
        cursor = nxt
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True] + [False] * 5
    assert len({s.args_hash for s in steps[1:]}) == 1
    assert steps[-1].repeats >= 4


def test_pagination_that_brings_new_items_is_progress() -> None:
    rng = random.Random(2)
    cursor = None
    steps = []
    for i in range(6):
        nxt = noise_value("cursor", CLOCK_S + i, rng)
        args = {"query": "open invoices"} | ({"cursor": cursor} if cursor else {})
        result = {"items": [{"invoice": f"INV-{2 * i}"}, {"invoice": f"INV-{2 * i + 1}"}], "next_cursor": nxt}
        steps += _steps(tool_span("list_invoices", json.dumps(args), json.dumps(result), i=i))
        cursor = nxt
    _, judged = _judge(steps)
    assert all(n for n, _ in judged)


def test_a_new_token_that_no_result_handed_back_keeps_calls_apart() -> None:
    """Eight orders fetched by their (uuid) ids, whose results differ only in the id they repeat, are
    eight results: an id the result echoes is part of what it says."""
    rng = random.Random(3)
    steps = []
    for i in range(8):
        order = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        steps += _steps(tool_span("get_order", json.dumps({"order_id": order}),
                                  json.dumps({"id": order, "status": "shipped", "total": 20}), i=i))
    _, judged = _judge(steps)
    assert all(n for n, _ in judged)


def test_the_same_order_fetched_again_is_not_new() -> None:
    order = str(uuid.UUID(int=7, version=4))
    steps = [s for i in range(4) for s in _steps(tool_span(
        "get_order", json.dumps({"order_id": order}),
        json.dumps({"id": order, "status": "shipped",
                    "fetched": noise_value("rfc3339", CLOCK_S + i, random.Random(i))}),
        i=i))]
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, False, False, False]


def test_echoed_prose_does_not_keep_paraphrased_calls_apart() -> None:
    """A search that repeats its query in its result and finds the same documents for three wordings."""
    docs = [{"title": "Deploying with the CLI"}]
    steps = [s for i, q in enumerate(["deploy to staging", "how to deploy staging", "staging deployment steps"])
             for s in _steps(tool_span("search", json.dumps({"q": q}), json.dumps({"query": q, "hits": docs}), i=i))]
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, False, False]


def test_a_result_of_empty_containers_and_noise_says_nothing() -> None:
    canon = Canonicalizer()
    _, empty, flags, _ = canon.output(json.dumps({"items": [], "request_id": str(uuid.uuid4())}), True, CLOCK_S)
    assert empty and flags & BLANK
    _, empty, _, _ = canon.output(json.dumps({"items": [], "total": 0}), True, CLOCK_S)
    assert not empty  # a count of zero is something said


# -- learning per tool -------------------------------------------------------------------------------------------


def _poll(i: int, **fields: Any) -> Step:
    return _steps(tool_span("job_status", '{"job": "j-1"}', json.dumps({"job": "j-1", **fields}), i=i))[0]


def test_a_short_field_that_changes_on_every_repeat_is_learned_as_noise_after_two_changes() -> None:
    """``trace`` holds 5 random characters: too short to be an id by its shape. After it changed twice
    between repeats of the same call while the rest stayed equal, it is noise for the tool."""
    rng = random.Random(4)
    steps = [_poll(i, state="running", trace="".join(rng.choice(B62[:36]) + str(i))) for i in range(6)]
    state, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, True, False, False, False, False]
    assert len(progress.learned_noise(state, "job_status")) == 1


@pytest.mark.parametrize("field, values", [
    ("state", ["queued", "running", "running", "copying", "verifying", "done"]),
    ("percent", [10, 20, 35, 50, 80, 100]),
    ("processed", ["10/100", "20/100", "40/100", "60/100", "80/100", "100/100"]),
], ids=["state-words", "percent", "fraction"])
def test_values_that_move_toward_completion_are_progress_not_noise(field: str, values: list[Any]) -> None:
    steps = [_poll(i, **{field: v}) for i, v in enumerate(values)]
    state, judged = _judge(steps)
    changed = [values[i] != values[i - 1] if i else True for i in range(len(values))]
    assert [n for n, _ in judged] == changed
    assert progress.learned_noise(state, "job_status") == []


def test_learning_is_per_call_so_different_calls_teach_nothing() -> None:
    """Results of different calls differ in what they are about; only repeats of one call teach noise."""
    steps = [_steps(tool_span("get_user", json.dumps({"user": f"u{i}"}), json.dumps({"name": f"user{i}x"}), i=i))[0]
             for i in range(6)]
    state, judged = _judge(steps)
    assert all(n for n, _ in judged)
    assert progress.learned_noise(state, "get_user") == []


def test_structure_memory_is_bounded() -> None:
    state = progress.new_state()
    rng = random.Random(5)
    for i in range(200):
        tool = f"tool{i % 17}"
        fields = {f"f{j}": "".join(rng.choice(B62) for _ in range(4)) for j in range(i % 7)}
        (step,) = _steps(tool_span(tool, '{"a": 1}', json.dumps({"v": 1, **fields}), i=i))
        progress.observe(state, step)
        assert progress.tools_kept(state) <= progress.MAX_TOOLS
        for t in range(17):
            assert len(progress.learned_noise(state, f"tool{t}")) <= progress.MAX_NOISY
    assert state.tools is not None and len(state.tools) <= progress.MAX_TOOLS


def test_a_result_with_more_leaves_than_remembered_is_compared_by_its_hash() -> None:
    big = {f"k{i}": i for i in range(MAX_LEAVES + 1)}
    (step,) = _steps(tool_span("dump", "{}", json.dumps(big)))
    assert step.leaves is None and step.output_hash is not None


def test_a_text_in_an_envelope_of_metadata_reads_as_that_text() -> None:
    """``{"data": "…", "meta": {request id, serving time}}``: the flags are those of the one text."""
    canon = Canonicalizer()
    meta = {"request_id": str(uuid.uuid4()), "served_at": int(CLOCK_S * 1000)}
    for text, flag in [("Saved", "ACK"), ("No results for 'x'", "BLANK"), ("1 failed, 3 passed", "FAILED")]:
        wrapped = canon.output(json.dumps({"data": text, "meta": meta}), True, CLOCK_S)[2]
        bare = canon.output(text, True, CLOCK_S)[2]
        assert wrapped == bare != 0, flag


def test_a_changing_text_amid_noise_is_content_not_noise() -> None:
    """A test run whose output changes after each fix, wrapped with a request id: the output is what the
    result says, so it is never learned as noise (nothing it says stayed the same)."""
    steps = [_steps(tool_span("run_tests", '{"target": ""}', json.dumps(
        {"data": f"{5 - i} failed, {i} passed", "meta": {"request_id": str(uuid.UUID(int=i + 1, version=4))}}),
        i=i))[0] for i in range(5)]
    state, judged = _judge(steps)
    assert all(n for n, _ in judged)
    assert progress.learned_noise(state, "run_tests") == []


# -- durations: numbers with a time unit -------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["took_ms", "latencyMs", "elapsed_seconds", "uptime-s", "durationNs", "TOOK_MS"])
def test_a_number_under_a_key_naming_a_time_unit_is_a_duration_from_the_first_call(key: str) -> None:
    """A duration is per-call noise by its shape: two polls that differ only in it are the same result
    at once (no learning: the first repeat of a loop already counts)."""
    canon = Canonicalizer()
    a = canon.output(json.dumps({key: 408, "job_id": "deploy-42", "status": "running"}), True, CLOCK_S)
    b = canon.output(json.dumps({key: 1443, "job_id": "deploy-42", "status": "running"}), True, CLOCK_S)
    done = canon.output(json.dumps({key: 512, "job_id": "deploy-42", "status": "done"}), True, CLOCK_S)
    assert a[0] == b[0] != done[0]


@pytest.mark.parametrize("text", ["step 3/5: compiling\nuptime_ms: {}", "rows=12 latencyMs={}", "(took {} ms)",
                                  "elapsed: {}.2s"])
def test_a_duration_in_a_text_is_masked_by_its_unit(text: str) -> None:
    assert normalise_result(text.format(7340123), CLOCK_S) == normalise_result(text.format(7342311), CLOCK_S)


@pytest.mark.parametrize("pair", [
    ({"progress": 10, "state": "running"}, {"progress": 20, "state": "running"}),  # a percentage moves on
    ({"processed": 1200, "total": 5000}, {"processed": 2400, "total": 5000}),  # so does processed/total
    ({"ms": 3, "x": 1}, {"ms": 4, "x": 1}),  # a key that is only a unit does not say what it measures
    ({"items": [{"duration_ms": 12}]}, {"items": [{"duration_ms": 40}]}),  # listed items are what is listed
    ({"order": "A-1", "took_ms": 5}, {"order": "B-2", "took_ms": 5}),  # different work, alike durations
])
def test_progress_and_listed_values_are_not_durations(pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    canon = Canonicalizer()
    assert canon.output(json.dumps(pair[0]), True, CLOCK_S)[0] != canon.output(json.dumps(pair[1]), True, CLOCK_S)[0]


@pytest.mark.parametrize("text", ["processed 1200 of 5000", "progress: 40%", "count: 12", "total_pages: 3",
                                  "x_s: 4", "timeout 30"])
def test_counts_in_texts_are_not_durations(text: str) -> None:
    assert normalise_result(text, CLOCK_S) == text


def test_a_poll_whose_only_change_is_its_duration_repeats_from_its_second_call() -> None:
    rng = random.Random(3)
    steps = []
    for i in range(4):
        result = {"took_ms": rng.randint(3, 2400), "job_id": "build-7", "status": "running"}
        steps += _steps(tool_span("poll_job", '{"job_id": "build-7"}', json.dumps(result), i=i))
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, False, False, False]
    assert [s.repeats for s in steps] == [1, 2, 3, 4]


def test_a_healthy_batch_whose_durations_differ_stays_work() -> None:
    """Masking durations never merges different work: eight lookups of eight customers, each with its own
    timing, are eight new results."""
    rng = random.Random(4)
    steps = []
    for i in range(8):
        result = {"took_ms": rng.randint(3, 2400), "customer": f"C-{100 + i}", "tier": ["gold", "silver"][i % 2]}
        steps += _steps(tool_span("lookup_customer", json.dumps({"id": f"C-{100 + i}"}), json.dumps(result), i=i))
    _, judged = _judge(steps)
    assert all(n for n, _ in judged)


# -- counters that track the span clock --------------------------------------------------------------------------


def _polls(tool: str, results: list[str], gap_s: float = 1.0) -> list[Step]:
    steps = []
    for i, result in enumerate(results):
        sp = tool_span(tool, '{"job_id": "build-7"}', result, i=i)
        sp.start_time_unix_nano = T0 + int(i * gap_s * 1e9)
        sp.end_time_unix_nano = sp.start_time_unix_nano + 5 * 10**8
        steps += _steps(sp)
    return steps


@pytest.mark.parametrize(("unit_ns", "form"), [
    (1_000_000, lambda v: json.dumps({"uptime": v, "job_id": "build-7", "status": "running"})),
    (1_000, lambda v: json.dumps({"status": "running", "server": {"clock": v}})),
    (1_000_000, lambda v: f"job build-7: running\nserver uptime {v}"),
    (1_000_000_000, lambda v: f"status running (node up {v})"),
])
def test_a_counter_that_tracks_the_span_clock_is_noise_from_its_first_change(unit_ns: int, form: Any) -> None:
    """A value rising by the time between the calls (in s, ms, µs or ns), without a unit in its key, is a
    clock: learned at its first change, and the call's first repeat is already one."""
    gap = 30.0 if unit_ns == 1_000_000_000 else 1.3
    start = 7_340_000
    results = [form(start + int(i * gap * 1e9) // unit_ns + (i % 2)) for i in range(5)]  # jitter of one unit
    steps = _polls("poll_job", results, gap)
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, False, False, False, False]
    assert [s.repeats for s in steps] == [1, 2, 3, 4, 5]


def test_a_clock_counter_leaves_the_rest_of_the_result_judged() -> None:
    """Masking the clock never hides a change: when the state moves on, the result is new."""
    results = [json.dumps({"uptime": 7_340_000 + i * 1000, "status": s}) for i, s in
               enumerate(["running", "running", "running", "done"])]
    _, judged = _judge(_polls("poll_job", results))
    assert [n for n, _ in judged] == [True, False, False, True]


@pytest.mark.parametrize("values", [
    [1200, 2400, 3600, 4800],  # processed rows: rises steadily, but not by the clock (1000 per second)
    [100, 130, 190, 260],  # a slow count
    [7_340_000, 7_341_000, 7_345_500, 7_346_500],  # matched the clock once by chance, then not
])
def test_a_count_that_does_not_track_the_clock_stays_progress(values: list[int]) -> None:
    results = [json.dumps({"processed": v, "total": 9000, "status": "running"}) for v in values]
    _, judged = _judge(_polls("import_rows", results))
    assert [n for n, _ in judged][2:] == [True, True]
    results = [f"processed {v} rows" for v in values]
    _, judged = _judge(_polls("import_rows", results))
    assert [n for n, _ in judged][2:] == [True, True]


def test_clock_learning_is_bounded_per_session() -> None:
    state = progress.new_state()
    for t in range(12):
        for step in _polls(f"tool_{t}", [json.dumps({"uptime": 7_340_000 + i * 1000, "a": 1}) for i in range(2)]):
            progress.observe(state, step)
    assert state.clocks is not None and len(state.clocks.tools) <= 4
    assert all(len(t.clocks) <= 4 for t in state.clocks.tools)


def test_a_number_that_goes_up_and_down_while_all_else_stays_is_a_per_call_duration() -> None:
    """Without a unit in its key, a duration is learned by behaviour: between repeats of one call whose
    other parts stay the same, it rises and then falls. The repeats count from there on."""
    took = [408, 1943, 339, 2392, 1330, 175]
    results = [json.dumps({"took": t, "job_id": "build-7", "status": "running"}) for t in took]
    steps = _polls("poll_job", results)
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, True, False, False, False, False]
    assert [s.repeats for s in steps][-1] >= 4


def test_a_count_moving_one_way_is_never_jitter() -> None:
    results = [json.dumps({"imported": d, "status": "running"}) for d in (120, 340, 560, 610, 900)]
    _, judged = _judge(_polls("import_rows", results))
    assert all(n for n, _ in judged)
    batches = ((120, "b-1"), (340, "b-2"), (200, "b-3"), (500, "b-4"))
    results = [json.dumps({"imported": d, "batch": b}) for d, b in batches]
    _, judged = _judge(_polls("import_rows", results))  # up and down, but the rest changed too: work
    assert all(n for n, _ in judged)


def test_a_clock_trailer_after_a_text_full_of_numbers_is_still_learned() -> None:
    """A long text keeps its first two and last two numbers as candidates: a trailer line is compared, and
    the numbers between stay part of the result (a changed line number is a new result)."""
    body = "\n".join(f"line {n}: total {n * 7}" for n in range(100, 110))
    results = [f"{body}\nserver uptime {7_340_000 + i * 1000}" for i in range(4)]
    _, judged = _judge(_polls("read_log", results))
    assert [n for n, _ in judged] == [True, False, False, False]
    changed = [f"{body.replace('total 721', 'total 999') if i == 3 else body}\nserver uptime {7_340_000 + i * 1000}"
               for i in range(4)]
    _, judged = _judge(_polls("read_log", changed))
    assert [n for n, _ in judged] == [True, False, False, True]


# -- counters that count calls -----------------------------------------------------------------------------------


def _meta(remaining: int, rng: random.Random) -> dict[str, Any]:
    return {"request_id": noise_value("req_base62", CLOCK_S, rng), "duration_ms": round(rng.uniform(20, 400), 2),
            "rate_limit": {"limit": 600, "remaining": remaining}}


def test_a_quota_falling_by_one_per_call_is_noise() -> None:
    """A quota's ``remaining`` nested in a result's metadata falls by one per request: once it has done so
    twice in a row it is a count of calls, and the call's repeats are repeats (its float duration, under a
    key naming its unit, is masked by shape)."""
    rng = random.Random(3)
    orders = ["ord_4117", "ord_4130", "ord_4169", "ord_4169", "ord_4169", "ord_4169"]
    steps = []
    for i, order in enumerate(orders):
        result = {"data": {"id": order, "status": "pending"}, "meta": _meta(599 - i, rng)}
        steps += _steps(tool_span("get_order", json.dumps({"order_id": order}), json.dumps(result), i=i))
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, True, True, False, False, False]
    assert [s.repeats for s in steps][-1] >= 3


@pytest.mark.parametrize("step", [1, -1])
def test_a_sequence_number_in_a_text_moving_by_one_per_run_is_noise(step: int) -> None:
    """A build number rising by one per run (or a counter falling by one) in a text result: the same
    failure reported by runs 8211, 8212, 8213 is the same result from the third run on."""
    results = [f"CI build #{8211 + step * i} suite=unit\n1 failed, 23 passed in {rng_s}s"
               for i, rng_s in enumerate(("4.33", "4.19", "3.42", "2.71", "3.90"))]
    _, judged = _judge(_polls("run_ci", results))
    assert [n for n, _ in judged] == [True, True, False, False, False]


def test_a_quota_shared_by_tools_falls_by_the_calls_between() -> None:
    """A quota that two tools draw on falls, between two calls of one tool, by the calls both made."""
    rng = random.Random(5)
    steps = []
    for i in range(8):
        tool = ("list_orders", "get_stock")[i % 2]
        result = {"items": [f"{tool}-a", f"{tool}-b"], "meta": _meta(599 - i, rng)}
        steps += _steps(tool_span(tool, '{"q": "x"}', json.dumps(result), i=i))
    _, judged = _judge(steps)
    assert [n for n, _ in judged][-2:] == [False, False]


@pytest.mark.parametrize("values", [
    [120, 121, 122, 123, 124, 125],  # rising by one per poll, but the rest moves too (the state, a percent)
])
def test_a_count_moving_by_one_while_the_result_changes_stays_progress(values: list[int]) -> None:
    results = [json.dumps({"processed": v, "pct": 10 + 15 * i, "status": "running"}) for i, v in enumerate(values)]
    _, judged = _judge(_polls("import_rows", results))
    assert all(n for n, _ in judged)


@pytest.mark.parametrize("values", [
    [1200, 1300, 1400, 1500, 1600],  # a constant step that is work per poll, not one per request
    [500, 501, 503, 504, 506],  # moved by one, then by two: not a count of calls
    [700, 701, 701, 702, 702],  # a count of calls changes on every call
])
def test_a_count_that_does_not_move_by_one_per_call_stays_progress(values: list[int]) -> None:
    results = [json.dumps({"processed": v, "status": "running"}) for v in values]
    _, judged = _judge(_polls("import_rows", results))
    assert [n for n, _ in judged] == [v not in values[:i] for i, v in enumerate(values)]  # new unless repeated


def test_calls_counted_once_are_not_learned() -> None:
    """One move by one can be chance: a count that moved by one once and then by its work stays judged."""
    results = [json.dumps({"rows": v, "status": "running"}) for v in (400, 401, 650, 651, 900)]
    _, judged = _judge(_polls("import_rows", results))
    assert all(n for n, _ in judged)


def test_counts_calls_reads_a_change_as_one_call_or_the_calls_between() -> None:
    from otelloop.mapping.noise import counts_calls
    assert [counts_calls(c, 1) for c in (1, -1, 2, 0)] == [1, -1, 0, 0]
    assert [counts_calls(c, 3) for c in (3, -3, -2, 1)] == [1, -1, 0, 1]


# -- numbers written as strings ----------------------------------------------------------------------------------


def test_a_number_written_as_a_string_that_changes_on_every_repeat_is_learned_as_noise() -> None:
    """A resource version (``"88124"``: digits in a JSON string, a token rather than a quantity) that moves
    on every read of one deployment while all else stays is learned like any token: the reads repeat."""
    versions = ["88124", "88130", "88133", "88140", "88141", "88150"]
    results = [json.dumps({"name": "checkout", "replicas": 3, "ready": 1, "status": "Progressing",
                           "resourceVersion": v}) for v in versions]
    _, judged = _judge(_polls("get_deployment", results))
    assert [n for n, _ in judged][3:] == [False, False, False]


def test_a_quantity_written_as_a_json_number_is_never_learned() -> None:
    """The same values as JSON numbers are quantities: each answer is new."""
    results = [json.dumps({"name": "checkout", "status": "Progressing", "rows": v})
               for v in (88124, 88130, 88133, 88140, 88141, 88150)]
    _, judged = _judge(_polls("count_rows", results))
    assert all(n for n, _ in judged)


# -- counters in error messages ----------------------------------------------------------------------------------


def _failures(messages: list[str], tool: str = "charge_card") -> list[Step]:
    return [s for i, m in enumerate(messages)
            for s in _steps(tool_span(tool, '{"order": "ord_4117"}', None, i=i, error=m))]


def test_a_call_count_in_an_error_message_does_not_make_each_failure_new() -> None:
    """The failure's identity is its text with its noise masked: a request number rising by one per call
    in the message is a count of calls, as in a result."""
    steps = _failures([f"payment gateway rejected request #{8211 + i}: card declined" for i in range(5)])
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, True, False, False, False]
    assert steps[-1].repeats >= 3
    assert len({s.error_hash for s in steps[2:]}) == 1


def test_a_clock_counter_in_an_error_message_is_masked() -> None:
    steps = _failures([f"upstream busy (server uptime {7_340_000 + i * 1000})" for i in range(4)])
    _, judged = _judge(steps)
    assert [n for n, _ in judged] == [True, False, False, False]


def test_an_error_whose_count_moves_by_its_work_stays_a_new_failure() -> None:
    """Counter-example: a failure that got further each time (rows imported before it failed) is new."""
    steps = _failures([f"import failed after {v} rows: bad date" for v in (1200, 1900, 3100, 4800)])
    _, judged = _judge(steps)
    assert all(n for n, _ in judged)
