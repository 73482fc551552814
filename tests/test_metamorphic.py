"""The metamorphic suite: production-like variants of the corpus and the held-out set.

``benchmarks/variants.py`` turns each recorded run into what the same agent would send under one
production condition (per-call noise in results, content capture off, at-least-once delivery, one trace
per call, another language, another test runner, retries and polls that succeed, uniform batches),
keeping its label by construction. Two groups of tests:

- the transformations keep to their rules (noise values differ between calls, content off leaves no
  content key, redelivery doubles every request, ...), on a few runs of every dialect;
- the detection targets, per variant, on corpus and held-out set together (``bench_quality.py
  --variant``): every loop stopped within 6 tool calls of its start, median lag <= 3, no healthy run
  stopped, at most 1 in 20 nudged (content off: none), at most 1 in 10 with any finding. With content
  off, loops are held to what their spans still identify: each that repeats one failure is stopped in
  time (a session is never judged by tool names alone).

``BASELINE`` below is the one table to update: the figures measured per variant. A target those figures
miss is a strict expected failure (it turns into a failure the day it holds, so the table gets the new
figures); every figure is also a floor that no change may fall below.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
import replays

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_quality  # noqa: E402
import variants as V  # noqa: E402

from otelloop.pipeline import Pipeline  # noqa: E402

# -- the table: figures per variant (corpus + held-out set), today's detectors and defaults ----------------------

#: variant: (loops stopped in time, loop runs, median lag, healthy stopped, healthy nudged,
#: healthy with any finding, healthy runs). Measured with ``python benchmarks/bench_quality.py --variant all``;
#: ``--variant all --baseline`` prints these rows.
BASELINE: dict[str, tuple[int, int, float | None, int, int, int, int]] = {
    "recorded": (87, 87, 3, 0, 0, 0, 88),
    "noise-epoch-s": (87, 87, 3, 0, 0, 0, 88),
    "noise-epoch-ms": (87, 87, 3, 0, 0, 0, 88),
    "noise-rfc3339": (87, 87, 3, 0, 0, 0, 88),
    "noise-http-date": (87, 87, 3, 0, 0, 0, 88),
    "noise-request-id": (87, 87, 3, 0, 0, 0, 88),
    "noise-uuid4": (87, 87, 3, 0, 0, 0, 88),
    "noise-ulid": (87, 87, 3, 0, 0, 0, 88),
    "noise-snowflake": (87, 87, 3, 0, 0, 0, 88),
    "noise-etag": (87, 87, 3, 0, 0, 0, 88),
    "noise-cursor": (87, 87, 3, 0, 0, 0, 88),
    "noise-counter": (87, 87, 3, 0, 0, 0, 88),
    "noise-duration": (87, 87, 3, 0, 0, 0, 88),
    "content-off": (11, 87, 3, 0, 0, 0, 88),
    "redelivered": (87, 87, 3, 0, 0, 0, 88),
    "redelivered-delayed": (87, 87, 3, 0, 0, 0, 88),
    "trace-per-call": (87, 87, 3, 0, 0, 0, 88),
    "trace-per-call-session": (87, 87, 3, 0, 0, 0, 88),
    "lang-de": (87, 87, 3, 0, 0, 0, 88),
    "lang-ja": (87, 87, 3, 0, 0, 0, 88),
    "runner-maven": (26, 26, 2, 0, 0, 0, 25),
    "runner-phpunit": (26, 26, 2, 0, 0, 0, 25),
    "runner-dotnet": (26, 26, 2, 0, 0, 0, 25),
    "runner-go": (26, 26, 2, 0, 0, 0, 25),
    "runner-jest": (26, 26, 2, 0, 0, 0, 25),
    "runner-cargo": (26, 26, 2, 0, 0, 0, 25),
    "retry-succeeds-3": (0, 0, None, 0, 0, 0, 88),
    "retry-succeeds-4": (0, 0, None, 0, 0, 0, 88),
    "retry-succeeds-5": (0, 0, None, 0, 1, 1, 88),
    "retry-succeeds-6": (0, 0, None, 0, 0, 0, 88),
    "retry-succeeds-7": (0, 0, None, 0, 1, 1, 88),
    "retry-succeeds-8": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-3": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-4": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-5": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-6": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-7": (0, 0, None, 0, 0, 0, 88),
    "poll-succeeds-8": (0, 0, None, 0, 0, 0, 88),
    "batch-alike": (0, 0, None, 0, 0, 0, 88),
    "batch-empty": (0, 0, None, 0, 0, 0, 88),
    "roles-reads-misnamed": (43, 43, 3, 0, 0, 0, 30),
    "roles-writes-misnamed": (21, 21, 2, 0, 0, 0, 43),
    "roles-search-path-text": (24, 24, 3, 0, 0, 0, 16),
}

# -- targets -----------------------------------------------------------------------------------------------------

Figures = tuple[int, int, float | None, int, int, int, int]


TARGETS: dict[str, tuple[str, Callable[[str, Figures], bool | None]]] = {
    # name: (what it says, check(variant, figures) -> True held / False missed / None not applicable)
    # Content off: a loop is judged by what its spans still identify, its failures (see
    # test_content_off_stops_every_loop_that_repeats_its_failure); names alone never stop a session.
    "loops_in_time": ("every loop stopped within 6 tool calls of its start",
                      lambda v, f: None if not f[1] or v == "content-off" else f[0] == f[1]),
    "median_lag": ("median lag <= 3", lambda v, f: None if not f[1] else f[2] is not None and f[2] <= 3),
    "healthy_stopped": ("no healthy run stopped", lambda v, f: None if not f[6] else f[3] == 0),
    "healthy_nudged": ("at most 1 in 20 healthy runs nudged (content off: none)",
                       lambda v, f: None if not f[6] else (f[4] == 0 if v == "content-off" else f[4] * 20 <= f[6])),
    "healthy_finding": ("at most 1 in 10 healthy runs with any finding",
                        lambda v, f: None if not f[6] else f[5] * 10 <= f[6]),
}


def _describe(f: Figures) -> str:
    lag = "-" if f[2] is None else f"{f[2]:g}"
    return (f"loops in time {f[0]}/{f[1]}, median lag {lag}, healthy stopped {f[3]}/{f[6]}, "
            f"nudged {f[4]}/{f[6]}, any finding {f[5]}/{f[6]}")


def _cases() -> list[Any]:
    cases = []
    for variant, figures in BASELINE.items():
        for target, (_, check) in TARGETS.items():
            held = check(variant, figures)
            if held is None:
                continue
            reason = f"{_describe(figures)}: target not yet met"
            marks = () if held else (pytest.mark.xfail(strict=True, reason=reason),)
            cases.append(pytest.param(variant, target, id=f"{variant}-{target}", marks=marks))
    return cases


# -- measuring (once per variant per session, in worker processes: see replays.py) ---------------------------------


def replays_for(item: pytest.Item) -> None:
    """The variants a test reads, queued after collection in the order of the tests (see replays.py)."""
    callspec = getattr(item, "callspec", None)
    variant = callspec.params.get("variant") if callspec is not None else None
    name = getattr(item, "originalname", "")
    if name == "test_misleading_tool_names_change_no_verdict":
        replays.prefetch([bench_quality.RECORDED, variant])
    elif name in ("test_target", "test_no_regression_below_the_measured_figures"):
        replays.prefetch([variant])
    elif name == "test_content_off_stops_every_loop_that_repeats_its_failure":
        replays.prefetch(["content-off"])
    elif name == "test_bench_quality_reports_variants_side_by_side":
        replays.prefetch(["batch-alike"])


def _per_set(variant: str) -> dict[str, list[bench_quality.RunResult]]:
    return replays.results(variant)


def _results(variant: str) -> tuple[bench_quality.RunResult, ...]:
    return tuple(r for rs in _per_set(variant).values() for r in rs)


def _figures(variant: str) -> Figures:
    rs = _results(variant)
    loops = [r for r in rs if r.label == "loop"]
    healthy = [r for r in rs if r.label == "healthy"]
    lags = [r.lag for r in loops if r.lag is not None and r.lag >= 0]
    return (sum(r.outcome == "in_time" for r in loops), len(loops), statistics.median(lags) if lags else None,
            sum(r.stop_at is not None for r in healthy), sum(r.nudge_at is not None for r in healthy),
            sum(bool(r.findings) for r in healthy), len(healthy))


def _offenders(variant: str, target: str) -> str:
    rs = _results(variant)
    if target in ("loops_in_time", "median_lag"):
        bad = [r for r in rs if r.label == "loop" and (r.outcome != "in_time" or (r.lag or 0) > 3)]
    else:
        bad = [r for r in rs if r.label == "healthy" and (r.stop_at or r.nudge_at or r.findings)]
    return "\n".join(f"  {r.id}: stop {r.stop_at}, nudge {r.nudge_at}, start {r.loop_start} "
                     f"({r.stop_by or r.nudge_by or ', '.join(r.findings) or 'nothing'})" for r in bad[:12])


@pytest.mark.parametrize(("variant", "target"), _cases())
def test_target(variant: str, target: str) -> None:
    figures = _figures(variant)
    what, check = TARGETS[target]
    assert check(variant, figures), f"{variant}: {what}: {_describe(figures)}\n{_offenders(variant, target)}"


@pytest.mark.parametrize("variant", list(BASELINE))
def test_no_regression_below_the_measured_figures(variant: str) -> None:
    """The ratchet: whatever a target's status, no figure gets worse than the table's."""
    now, base = _figures(variant), BASELINE[variant]
    assert (now[1], now[6]) == (base[1], base[6]), (
        f"{variant} applies to {now[1]} loop and {now[6]} healthy runs, the table says {base[1]} and {base[6]}")
    worse = []
    if now[0] < base[0]:
        worse.append(f"loops in time {now[0]} < {base[0]}")
    if base[2] is not None and (now[2] is None or now[2] > base[2]):
        worse.append(f"median lag {now[2]} > {base[2]}")
    for i, what in ((3, "healthy stopped"), (4, "healthy nudged"), (5, "healthy with a finding")):
        if now[i] > base[i]:
            worse.append(f"{what} {now[i]} > {base[i]}")
    assert not worse, f"{variant}: {'; '.join(worse)} (now: {_describe(now)})"


#: A failure repeated this many times from a loop's start is a loop the spans identify without content.
FAILURE_REPEATS = 3


def test_content_off_stops_every_loop_that_repeats_its_failure() -> None:
    """With content capture off a step carries no arguments or results, so a session is never judged by
    tool names alone (no healthy run stopped or nudged: ``test_target``). What spans still say is whether a
    call failed and how (span status, error type, exception message): every loop run that repeats one
    identified failure from its start is stopped in time; the others are the misses content-off costs."""
    loops = [r for r in _results("content-off") if r.label == "loop"]
    identified = [r for r in loops if r.failure_repeats >= FAILURE_REPEATS]
    late = [f"{r.id}: stop {r.stop_at}, start {r.loop_start}, failure repeated {r.failure_repeats} times"
            for r in identified if r.outcome != "in_time"]
    assert identified and not late, "\n".join(late)


ROLE_VARIANTS = [name for name, v in V.VARIANTS.items() if v.family == "roles"]


@pytest.mark.parametrize("variant", ROLE_VARIANTS)
def test_misleading_tool_names_change_no_verdict(variant: str) -> None:
    """Tools renamed so that their verbs mislead (reads named ``check_update``, writes named ``view``) and
    searches given ``path`` + ``text`` arguments: every run ends as recorded — a loop stopped in time
    still is (the call it stops at may move, as any renaming moves the similarity of call texts), a
    healthy run is left as alone as it was."""
    recorded = {(name, r.id): r for name, rs in _per_set(bench_quality.RECORDED).items() for r in rs}
    changed = []
    for name, rs in _per_set(variant).items():
        for r in rs:
            base = recorded[(name, r.id)]
            if (r.outcome, r.verdict) != (base.outcome, base.verdict):
                changed.append(f"{name} {r.id}: {base.outcome}/{base.verdict} (stop {base.stop_at}, {base.stop_by}) "
                               f"-> {r.outcome}/{r.verdict} (stop {r.stop_at}, {r.stop_by or r.nudge_by})")
    assert not changed, f"{variant}:\n" + "\n".join(changed)


def test_the_table_covers_every_variant() -> None:
    assert set(BASELINE) == {bench_quality.RECORDED, *V.VARIANTS}


def test_bench_quality_reports_variants_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    # the report over the variant's replay the tests above share (the same call: replays.py)
    asked: list[tuple[str, str | None]] = []

    def shared(name: str, config_path: str | None = None) -> dict[str, list[bench_quality.RunResult]]:
        asked.append((name, config_path))
        return replays.results(name)

    monkeypatch.setattr(bench_quality, "evaluate_variant", shared)
    rep = bench_quality.variant_report(["batch-alike"])
    assert asked == [("batch-alike", None)]
    figs = json.loads(json.dumps(rep))["variants"]["batch-alike"]
    assert set(figs) == {"corpus", "holdout", "all"}
    for key in ("in_time", "median_lag", "recall", "healthy_stopped", "healthy_nudged", "healthy_with_finding",
                "stop_precision", "finding_precision"):
        assert key in figs["all"]
    assert figs["all"]["healthy"] == BASELINE["batch-alike"][6]
    assert "| batch-alike | corpus |" in bench_quality.render_variants(rep)
    row = bench_quality.baseline_rows(rep).strip()
    assert row == '"batch-alike": ' + repr(BASELINE["batch-alike"]) + ","
    with pytest.raises(ValueError, match="unknown variants"):
        bench_quality.variant_names("noise-nonsense")


# -- the transformations keep to their rules ---------------------------------------------------------------------


@lru_cache(maxsize=1)
def _sample() -> tuple[tuple[dict[str, Any], tuple[bytes, ...]], ...]:
    """Per dialect a loop run and a healthy test-fix run (corpus, pytest output); two held-out runs whose
    tests report as ``checks:`` and as unittest."""
    out: list[tuple[dict[str, Any], tuple[bytes, ...]]] = []
    runs = bench_quality.load_labels(bench_quality.CORPUS)
    for dialect in sorted({r["dialect"] for r in runs}):
        mine = [r for r in runs if r["dialect"] == dialect]
        for label, scenario in (("loop", "repeat"), ("healthy", "test_fix")):
            run = next((r for r in mine if r["label"] == label and r["scenario"] == scenario),
                       next(r for r in mine if r["label"] == label))
            out.append((run, tuple(bench_quality.read_requests(run))))
    held = bench_quality.load_labels(bench_quality.HOLDOUT)
    for run in held:
        requests = tuple(bench_quality.read_requests(run, bench_quality.HOLDOUT))
        texts = "\n".join(t for t in _results_of(requests) if t)
        if any(run["id"] == r["id"] for r, _ in out):
            continue
        if ("checks: " in texts and not any("checks: " in "".join(map(str, _results_of(q))) for _, q in out[12:])) \
                or ("Ran " in texts and not any("Ran " in "".join(map(str, _results_of(q))) for _, q in out[12:])):
            out.append((run, requests))
    return tuple(out)


def _tool_steps(requests: list[bytes] | tuple[bytes, ...], config: Any = None) -> list[Any]:
    pipeline = Pipeline(config)
    steps = [s for r in requests for _, s, _ in pipeline.decode(r).steps if s.kind == "tool"]
    return sorted(steps, key=lambda s: s.start_ns)


def _results_of(requests: list[bytes] | tuple[bytes, ...]) -> list[str | None]:
    return [V.result_text(s) for s in V.tool_spans(V.decode(list(requests)))]


def test_every_variant_is_documented_with_its_label_rule() -> None:
    for name, variant in V.VARIANTS.items():
        assert "Label rule:" in variant.doc, f"{name}: its docstring states no label rule"


@pytest.mark.parametrize("name", list(V.VARIANTS))
def test_variants_are_deterministic_and_keep_the_tool_calls(name: str) -> None:
    """Same seed, same bytes; the mapping finds the labelled tool calls (plus any the variant inserts)."""
    applied = 0
    for run, requests in _sample():
        made = V.apply(name, run, list(requests))
        if made is None:
            continue
        applied += 1
        labels, out = made
        assert V.apply(name, run, list(requests)) == made
        assert (labels["label"] == run["label"] and labels["loop_start"] == run["loop_start"]) or (
            run["label"] == "healthy" and labels["label"] == "healthy")
        assert len({s.span_id for s in _tool_steps(out)}) == labels["tool_calls"], f"{name} {run['id']}"
    assert applied, f"{name} applies to none of the sample runs"


@pytest.mark.parametrize("form", V.NOISE_FORMS)
def test_noise_differs_between_calls_and_is_all_it_adds(form: str) -> None:
    for run, requests in _sample():
        before = _results_of(requests)
        _, out = V.apply(f"noise-{form}", run, list(requests))  # type: ignore[misc]
        after = _results_of(out)
        added: list[str] = []
        for b, a in zip(before, after, strict=True):
            if b is None:
                continue
            assert a is not None and a != b
            if b[:1] == "{" and isinstance(_json(b), dict):
                obj = json.loads(a)
                key = next(iter(obj))
                assert {k: v for k, v in obj.items() if k != key} == json.loads(b), "embedded as one new field"
                added.append(f"{key}={obj[key]}")
            else:
                assert (a.startswith(b) and "\n" in a[len(b):]) or not b, "appended as a line"
                added.append(a[len(b):])
        assert len(added) >= 2 and len(set(added)) == len(added), f"{form}: noise repeats between calls in {run['id']}"
    if form not in ("epoch-s", "epoch-ms", "http-date", "counter"):  # the clock forms are the span clock's
        run, requests = _sample()[0]
        assert V.apply(f"noise-{form}", run, list(requests), seed=1) != V.apply(f"noise-{form}", run, list(requests),
                                                                              seed=2)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def test_noise_forms_look_like_what_they_are() -> None:
    t = 1_795_555_024_941_746_333
    vals = V._noise_values(t, t - 5_000_000_000, V._rng(1))
    assert len(V.NOISE_FORMS) >= 8
    assert vals["epoch-s"][1] == t // 10**9 and vals["epoch-ms"][1] == t // 10**6
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}[+-]\d\d:\d\d", vals["rfc3339"][1])
    assert re.fullmatch(r"\w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", vals["http-date"][1])
    assert re.fullmatch(r"req_[0-9A-Za-z]{24}", vals["request-id"][1])
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", vals["uuid4"][1])
    assert re.fullmatch(r"[0-9A-HJKMNP-TV-Z]{26}", vals["ulid"][1])
    assert re.fullmatch(r"\d{18,19}", vals["snowflake"][1])
    assert re.fullmatch(r'W/"[0-9a-f]{16}"', vals["etag"][1])
    assert json.loads(__import__("base64").urlsafe_b64decode(vals["cursor"][1]))["ts"] == t // 10**6
    later = V._noise_values(t + 2_000_000_000, t - 5_000_000_000, V._rng(1))
    assert later["counter"][1] - vals["counter"][1] == 2000, "the counter tracks the span clock"
    assert "took" in vals["duration"][2] and " ms" in vals["duration"][2]


def test_content_off_leaves_no_content() -> None:
    for run, requests in _sample():
        _, out = V.apply("content-off", run, list(requests))  # type: ignore[misc]
        for sp in V.spans_of(V.decode(out)):
            keys = [kv.key for kv in sp.attributes if V.is_content_key(kv.key)]
            assert not keys, f"{run['id']}: {sp.name} keeps {keys}"
            assert not [e.name for e in sp.events if e.name in V.CONTENT_EVENTS]
        steps = _tool_steps(out)
        assert len(steps) == run["tool_calls"]
        assert all(s.args_hash is None and s.output_hash is None for s in steps), (
            f"{run['id']}: the mapping still reads arguments or results")


def test_content_keys_cover_every_content_key_the_mapping_reads() -> None:
    from otelloop.mapping import mapper

    read = [*getattr(mapper, "_ARGS_KEYS", ()), *getattr(mapper, "_TOOL_ARGS_KEYS", ()),
            *getattr(mapper, "_OUTPUT_KEYS", ())]
    assert read, "the mapping's argument and output keys moved: point this test at them"
    missing = [k for k in read if not V.is_content_key(k)]
    assert not missing, f"content keys the mapping reads that content-off keeps: {missing}"
    events = {e for _, e, _ in mapper.EVENT_SOURCES}
    assert events <= V.CONTENT_EVENTS, f"content events kept: {events - V.CONTENT_EVENTS}"


@pytest.mark.parametrize(("name", "delay"), [("redelivered", 0), ("redelivered-delayed", 2)])
def test_redelivery_sends_every_request_twice(name: str, delay: int) -> None:
    for run, requests in _sample():
        _, out = V.apply(name, run, list(requests))  # type: ignore[misc]
        assert len(out) == 2 * len(requests)
        assert Counter(out) == Counter({r: 2 * n for r, n in Counter(requests).items()})
        firsts = [out.index(r) for r in requests]
        assert firsts == sorted(firsts), "the originals keep their order"
        for i, r in enumerate(requests):
            second = out.index(r, firsts[i] + 1)
            if delay == 0:
                assert second == firsts[i] + 1
            else:  # after the original of the request `delay` later (or the last one)
                assert second > firsts[min(i + delay, len(requests) - 1)]


def test_trace_per_call_gives_each_call_its_own_trace_and_the_conversation_id() -> None:
    for run, requests in _sample():
        _, out = V.apply("trace-per-call", run, list(requests))  # type: ignore[misc]
        spans = list(V.spans_of(V.decode(out)))
        assert all(V._attr(s, "gen_ai.conversation.id") == run["id"] for s in spans)
        calls = [s for s in spans if V.step_kind(s) is not None]
        assert len({s.trace_id for s in calls}) == len(calls), "one trace per call"
        assert all(not s.parent_span_id for s in calls)
        tools = [s for s in calls if V.step_kind(s) == "tool"]
        assert len(tools) == run["tool_calls"]


def test_trace_per_call_joined_by_session_is_the_run_again() -> None:
    from otelloop.config import load_config

    config = load_config(None, dict(V.VARIANTS["trace-per-call-session"].config), env={})
    run, requests = _sample()[0]
    _, out = V.apply("trace-per-call-session", run, list(requests))  # type: ignore[misc]
    assert {s.session for s in _tool_steps(out, config)} == {run["id"]}


@pytest.mark.parametrize("lang", ["de", "ja"])
def test_translation_keeps_equal_results_equal_and_different_ones_different(lang: str) -> None:
    changed = 0
    for run, requests in _sample():
        before = [r for r in _results_of(requests) if r is not None]
        _, out = V.apply(f"lang-{lang}", run, list(requests))  # type: ignore[misc]
        after = [r for r in _results_of(out) if r is not None]
        assert len(before) == len(after)
        pairs = dict(zip(before, after, strict=True))
        assert len(set(pairs.values())) == len(pairs), "two different results became one"
        changed += sum(a != b for a, b in pairs.items())
    assert changed >= 10
    assert V.translate("No results for 'tax rules'", "de") == "Keine Ergebnisse für 'tax rules'"
    if lang == "ja":
        assert re.search(r"[\u3040-\u30ff]", V.translate("No matching documents.", "ja"))


@pytest.mark.parametrize("runner", list(V.RUNNERS))
def test_runner_rewrites_keep_the_facts(runner: str) -> None:
    rewritten = 0
    for run, requests in _sample():
        made = V.apply(f"runner-{runner}", run, list(requests))
        if made is None:
            continue
        before, after = _results_of(requests), _results_of(made[1])
        pairs: dict[str, str] = {}
        for b, a in zip(before, after, strict=True):
            facts = V.parse_test_run(b or "")
            if facts is None:
                assert a == b
                continue
            rewritten += 1
            assert a is not None
            assert not re.search(r"^FAILED \S+::|^\d+ failed, \d+ passed|^\d+ passed$|^Ran \d+ test|^checks: ", a,
                                 re.M), "no pytest, unittest or checks summary left"
            for f in facts.failures:
                stem = f.name.removeprefix("test_")
                assert stem.replace("_", "").lower() in a.replace("_", "").replace(" ", "").lower(), f.name
                assert f.text in a
            assert facts.tail in a
            if runner != "go":  # go test names each failing test and counts nothing
                assert str(facts.failed) in a and (str(facts.passed) in a or str(facts.total) in a)
            assert pairs.setdefault(b, a) == a
        assert len(set(pairs.values())) == len(pairs), "different test runs became the same output"
    assert rewritten >= 10


def test_runner_formats_state_their_counts() -> None:
    facts = V.TestRun(8, [V.Failure("tests/test_emails.py", "test_no_domain", "assert not True")])
    assert "Tests run: 9, Failures: 1, Errors: 0, Skipped: 0" in V.render_maven(facts)
    assert "Tests: 9, Assertions: 9, Failures: 1." in V.render_phpunit(facts)
    assert "Failed!  - Failed:     1, Passed:     8, Skipped:     0, Total:     9" in V.render_dotnet(facts)
    assert "--- FAIL: TestNoDomain" in V.render_go(facts)
    assert "Tests:       1 failed, 8 passed, 9 total" in V.render_jest(facts)
    assert "test result: FAILED. 8 passed; 1 failed;" in V.render_cargo(facts)
    ok = V.TestRun(9)
    assert "OK (9 tests, 9 assertions)" in V.render_phpunit(ok) and "BUILD SUCCESS" in V.render_maven(ok)
    assert "test result: ok. 9 passed; 0 failed;" in V.render_cargo(ok) and "\n.........\n" in V.render_cargo(ok)


def _healthy_sample() -> list[tuple[dict[str, Any], tuple[bytes, ...]]]:
    return [(r, q) for r, q in _sample() if r["label"] == "healthy"]


@pytest.mark.parametrize("n", range(3, 9))
def test_retry_fails_n_minus_1_times_then_succeeds(n: int) -> None:
    for run, requests in _healthy_sample():
        labels, out = V.apply(f"retry-succeeds-{n}", run, list(requests))  # type: ignore[misc]
        assert labels["label"] == "healthy" and labels["tool_calls"] == run["tool_calls"] + n - 1
        steps = _tool_steps(out)
        by_call = [i for i in range(len(steps) - n + 1)
                   if all(s.outcome == "error" for s in steps[i:i + n - 1])
                   and len({(s.name, s.args_hash) for s in steps[i:i + n]}) == 1
                   and steps[i + n - 1].outcome != "error"]
        assert by_call, f"{run['id']}: no run of {n - 1} failures then a success of one call"
        i = by_call[0]
        assert len({s.error_signature for s in steps[i:i + n - 1]}) == n - 1, "each failure carries its own id"
        starts = [s.start_ns for s in steps]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)


@pytest.mark.parametrize("n", range(3, 9))
def test_poll_answers_running_then_completes(n: int) -> None:
    for run, requests in _healthy_sample():
        labels, out = V.apply(f"poll-succeeds-{n}", run, list(requests))  # type: ignore[misc]
        assert labels["label"] == "healthy" and labels["tool_calls"] == run["tool_calls"] + n
        polls = [s for s in V.tool_spans(V.decode(out)) if "get_job_status" in s.name
                 or "GetJobStatus" in s.name]
        assert len(polls) == n
        texts = [V.result_text(s) or "" for s in polls]
        assert all(re.search("running|pending", t) for t in texts[:-1]) and "succeeded" in texts[-1]
        assert len({s.args_hash for s in _tool_steps(out) if s.name == "get_job_status"}) == 1


@pytest.mark.parametrize("kind", ["alike", "empty"])
def test_batches_are_different_calls_with_uniform_results(kind: str) -> None:
    for run, requests in _healthy_sample():
        labels, out = V.apply(f"batch-{kind}", run, list(requests))  # type: ignore[misc]
        assert labels["tool_calls"] == run["tool_calls"] + 8
        names = Counter(s.name for s in _tool_steps(out))
        before = Counter(s.name for s in _tool_steps(requests))
        added = names - before
        (tool, count), = added.items()
        batch = [s for s in _tool_steps(out) if s.name == tool]
        assert count == 8 and len({s.args_hash for s in batch}) == 8
        assert len({s.output_hash for s in batch}) == 1
        ids = {s.span_id for s in batch}
        texts = {V.result_text(s) for s in V.tool_spans(V.decode(out)) if s.span_id.hex() in ids}
        assert len(texts) == 1 and texts <= set(V._EMPTY if kind == "empty" else V._ALIKE)
