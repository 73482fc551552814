"""The native progress tracker (``otelloop/_progress.c``) gives exactly the Python tracker's judgements.

``otelloop.progress`` is the reference: its rules are documented and tested there (tests/test_progress.py,
test_noise.py, test_work.py, test_content_off.py). The engine runs the native tracker where it is built.
Here both judge the same steps, each on its own session states, and every field of every step must come
out the same (what the tracker writes: ``result``, ``novel``, ``repeats``, ``tool_repeats``, ``retry``,
``wait``, ``progress``, ``stale``, and the ``args_hash`` and ``error_hash`` it may rewrite):

- every run of the corpus and the held-out set, as recorded and in the metamorphic variants of every
  noise form, content off, redelivery, one trace per call, retries, polls and batches;
- every step the tracker's own test modules feed it (recorded in a pytest run of them);
- random sessions drawn to reach the rare rules: pagination, learned noise, counters that track the clock,
  count calls or jitter, echoed failures after an edit, batches, polls, retries, values beyond 64 bits.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import random
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import replays

from otelloop import progress, work
from otelloop.mapping import canonical, noise, results
from otelloop.model import Step
from otelloop.pipeline import Pipeline

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import variants as V  # noqa: E402

FIELDS = [f.name for f in dataclasses.fields(Step)]


def _native() -> Any:
    from otelloop import _progress

    return _progress


def test_the_native_tracker_is_built_and_runs() -> None:
    """CI builds the extension (``pip install -e .``); a missing one would hide behind the fallback."""
    assert progress.NATIVE, "otelloop._progress is missing: reinstall with a C compiler (pip install -e .)"
    assert progress.tracker().native
    from otelloop.detection import DetectorEngine

    assert DetectorEngine().progress.native


def test_the_version_says_when_the_tracker_falls_back() -> None:
    """The image's build checks ``otelloop --version`` for "(native request reader)": a tracker that could
    not be loaded beside a native reader must change that line."""
    hide = ("import sys; sys.modules['otelloop._progress'] = None; sys.argv = ['otelloop', '--version']; "
            "from otelloop.cli import main; main()")
    out = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=60)
    assert "(native request reader, pure-Python progress tracker)" in out.stdout, out.stdout + out.stderr
    built = subprocess.run([sys.executable, "-m", "otelloop", "--version"], capture_output=True, text=True, timeout=60)
    assert "(native request reader)" in built.stdout, built.stdout + built.stderr


def test_its_bounds_and_flags_are_the_python_trackers() -> None:
    native = _native()
    expected = {
        "MAX_RESULTS": progress.MAX_RESULTS, "MAX_CALLS": progress.MAX_CALLS, "MAX_RUN": progress.MAX_RUN,
        "MAX_TOOLS": progress.MAX_TOOLS, "MAX_NOISY": progress.MAX_NOISY, "LEARN_AFTER": progress.LEARN_AFTER,
        "MAX_CHANGES": progress.MAX_CHANGES, "MAX_CLOCK_TOOLS": noise.MAX_CLOCK_TOOLS,
        "MAX_CLOCKS": noise.MAX_CLOCKS, "CALL_COUNT_AFTER": noise.CALL_COUNT_AFTER, "MAX_POLLS": work.MAX_POLLS,
        "MAX_FORMS": work.MAX_FORMS, "MIN_CLOCK_TICKS": noise.MIN_CLOCK_TICKS, "BLANK": results.BLANK,
        "FAILED": results.FAILED, "ACK": results.ACK, "TRANSIENT": results.TRANSIENT, "TERSE": results.TERSE,
        "LEARNABLE": canonical.LEARNABLE, "SAYS": canonical.SAYS,
    }
    assert {name: getattr(native, name) for name in expected} == expected
    assert noise.CLOCK_UNITS_NS == (1_000_000_000, 1_000_000, 1_000, 1)
    assert (noise.CLOCK_TOLERANCE, noise.CLOCK_SLACK_NS) == (0.05, 100_000_000)


def judge_both(sessions: Iterable[list[Step]]) -> int:
    """Run each session's steps through both trackers (each on copies) and assert that every step comes
    out the same; how many steps were compared."""
    python, native = progress.tracker(False), progress.tracker(True)
    compared = 0
    for steps in sessions:
        ps, ns = python.new_state(), native.new_state()
        for i, step in enumerate(steps):
            a, b = copy.copy(step), copy.copy(step)
            python.observe(ps, a)
            native.observe(ns, b)
            got = {f: getattr(b, f) for f in FIELDS}
            want = {f: getattr(a, f) for f in FIELDS}
            assert got == want, (f"step {i} ({step.kind} {step.name}) differs: "
                                 + repr({f: (want[f], got[f]) for f in FIELDS if want[f] != got[f]}))
            compared += 1
    return compared


def _sessions_of(requests: list[bytes]) -> list[list[Step]]:
    """The steps of a run's requests per session, in the order the pipeline detects them."""
    pipeline = Pipeline()
    by_session: dict[str, list[Step]] = {}
    for data in requests:
        for _, step, _ in pipeline.decode(data).steps:
            by_session.setdefault(step.session, []).append(step)
    return list(by_session.values())


def compare_variant(variant: str) -> int:
    """In a worker (replays.py): every run of ``variant`` through both trackers; the steps compared."""
    return sum(judge_both(_sessions_of(requests)) for _, requests in replays.variant_runs(variant))


def replays_for(item: pytest.Item) -> None:
    if getattr(item, "originalname", "") == "test_both_trackers_judge_every_corpus_run_alike":
        replays.start(compare_variant, item.callspec.params["variant"])  # type: ignore[attr-defined]


#: The variants replayed besides the recordings: every noise form, content off, redelivery, one trace per call,
#: and the healthy retry, poll and batch patterns (the novelty gate's list). Every other variant goes through
#: the native tracker in the metamorphic suite, which holds its verdicts to the recorded ones.
COMPARED_VARIANTS = ("recorded", *(name for name in V.VARIANTS if name.startswith("noise-")), "content-off",
                     "redelivered", "trace-per-call-session", "retry-succeeds-8", "poll-succeeds-7", "batch-alike",
                     "batch-empty")


@pytest.mark.parametrize("variant", COMPARED_VARIANTS)
def test_both_trackers_judge_every_corpus_run_alike(variant: str) -> None:
    compared = replays.start(compare_variant, variant).result()
    assert compared > 0


#: The tracker's own test modules, whose steps are recorded and judged by both trackers.
TRACKER_TESTS = ("tests/test_progress.py", "tests/test_noise.py", "tests/test_work.py", "tests/test_content_off.py")


def test_both_trackers_judge_the_tracker_tests_steps_alike(tmp_path: Path) -> None:
    """Those tests call the Python tracker directly, and some reach into its state; the steps they pass to
    ``progress.observe`` are recorded per state (``tests/progress_recorder.py``) and judged afresh by both."""
    out = tmp_path / "steps.pickle"
    env = {**os.environ, "OTELLOOP_RECORD_PROGRESS": str(out), "PYTHONPATH": str(ROOT / "tests")}
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "progress_recorder", "-p", "no:cacheprovider"]
    done = subprocess.run([*command, *TRACKER_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sessions: list[list[Step]] = pickle.loads(out.read_bytes())
    assert len(sessions) > 50
    assert judge_both(sessions) > 500


# -- random sessions ------------------------------------------------------------------------------------------

_U64 = (1 << 64) - 1
_NAMES = ("read", "poll", "search", "write_file", "run")
_TEXTS = ("FAIL: expected 3 got 4 in x_1", "FAIL: expected 3 got <v> in x_2", "error: name foo not found",
          "error: name bar not found", "ok", "No results.")


def _step(rnd: random.Random, clock: list[int]) -> Step:
    """One step of a random session: small alphabets, so that calls, results and paths repeat."""
    clock[0] += rnd.choice((1_000_000, 2_000_000_000, 30_000_000_000, 7))
    kind = rnd.choice(("tool", "tool", "tool", "tool", "llm", "agent"))
    name = rnd.choice(_NAMES[:3] if rnd.random() < 0.5 else _NAMES)
    if kind != "tool":
        return Step("s", kind, name, start_ns=clock[0])

    def small() -> int | None:
        return rnd.choice((None, 0, 1, 2))

    def leaf() -> int:
        return rnd.randrange(4) << 32 | rnd.randrange(4) << 2 | rnd.randrange(4)

    leaves = rnd.choice((
        None, None,
        # a result that says the same with an id that changes: noise to learn
        (0 << 32 | 1 << 2 | canonical.SAYS, 1 << 32 | rnd.randrange(6) << 2 | canonical.LEARNABLE),
        tuple(leaf() for _ in range(rnd.randint(1, 4)))))
    seconds = clock[0] // 1_000_000_000
    values = (100, 101, 102, 150, seconds, seconds * 1000, clock[0], (1 << 70) + 1, (1 << 70) + 2, (1 << 63) + 5,
              2 ** 64 + seconds)
    numbers = () if rnd.random() < 0.4 else tuple(x for _ in range(rnd.randint(1, 3))
                                                   for x in (rnd.randint(1, 3), rnd.choice(values)))
    outcome = rnd.choice(("success", "success", "error"))
    text = rnd.choice((None, *_TEXTS[:2], *_TEXTS))
    error_hash = small() if outcome == "error" else None
    output_hash = small()
    if text is not None and rnd.random() < 0.75:  # hashes of the text as the mapper forms them
        error_hash = canonical.hash_text(results.normalise_result(text)) if outcome == "error" else None
        output_hash = canonical.hash_text(results.normalise_result(text, clock[0] / 1e9))
    return Step(
        "s", "tool", name, start_ns=clock[0], args_hash=small(), output_hash=output_hash, outcome=outcome,
        error_hash=error_hash, tool_class=rnd.choice((None, None, "read", "write", "exec")),
        content_hash=small(), file_path=rnd.choice((None, "a.py")), edit_old_hash=small(), edit_new_hash=small(),
        edit_fragments=rnd.choice((((), ()), (("4",), ("3",)), (("4",), ("3",)), (("foo",), ("bar",)))),
        output_text=text, result_flags=rnd.randrange(32), args_key=small(),
        arg_tokens=tuple(rnd.randint(7, 9) for _ in range(rnd.randint(0, 2))), leaves=leaves,
        result_tokens=tuple(rnd.randint(7, 9) for _ in range(rnd.randint(0, 2))), echo=rnd.choice((0, 0, 5)),
        numbers=numbers, numbers_free=rnd.randint(0, 2), args_form=rnd.randint(0, 2), target=rnd.randint(0, 2))


def random_sessions(seed: int, sessions: int = 400) -> list[list[Step]]:
    """Seeded random sessions of 30 to 80 steps each (the same ones on every run)."""
    rnd = random.Random(seed)
    out = []
    for _ in range(sessions):
        clock = [1_764_000_000_000_000_000]
        out.append([_step(rnd, clock) for _ in range(rnd.randint(30, 80))])
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_both_trackers_judge_random_sessions_alike(seed: int) -> None:
    judge_both(random_sessions(seed))


def test_random_sessions_reach_the_rare_rules() -> None:
    """The random sessions above are worth something only if they reach the rules the corpus seldom does:
    counted on those of the first seed, with the Python tracker."""
    seen = {"paged": 0, "noise": 0, "clocks": 0, "echoed": 0, "batch": 0, "wait": 0, "retry": 0}
    for steps in random_sessions(1):
        state = progress.new_state()
        for step in steps:
            before = (step.args_hash, step.error_hash)
            progress.observe(state, step)
            seen["paged"] += step.args_hash != before[0]
            seen["echoed"] += step.error_hash != before[1] and not step.numbers
            seen["wait"] += step.wait > 0
            seen["retry"] += step.retry > 0
            seen["batch"] += step.result is not None and step.result != progress.result_key(step, step.output_hash)
        seen["noise"] += any(progress.learned_noise(state, name) for name in _NAMES)
        seen["clocks"] += state.clocks is not None and any(t.clocks or t.jitter for t in state.clocks.tools)
    assert min(seen.values()) >= 10, seen


def test_the_native_state_reports_its_size_and_bounds() -> None:
    native = progress.tracker(True)
    state = native.new_state()
    empty = sys.getsizeof(state)
    for i in range(500):
        native.observe(state, Step("s", "tool", f"t{i % 9}", args_hash=i, output_hash=i, leaves=(i << 32 | 2,),
                                   numbers=(1, 100 + i), start_ns=i))
    kept = state.kept()
    assert kept == {"results": progress.MAX_RESULTS, "calls": progress.MAX_CALLS, "tools": progress.MAX_TOOLS,
                    "clock_tools": noise.MAX_CLOCK_TOOLS}
    assert empty < sys.getsizeof(state) < empty + 4096
    assert state.counts == (500, 0)


def test_the_native_tracker_refuses_a_key_outside_64_bits() -> None:
    """Hashes are unsigned 64-bit integers (``otelloop.model.Step``; the mapper forms no other): the native
    tracker keeps them in 64 bits and refuses any other value as a caller's bug, where the Python tracker
    reduces some of them modulo 2**64 and refuses others."""
    native = progress.tracker(True)
    for bad in (-1, _U64 + 1):
        for field in ("output_hash", "args_hash", "error_hash"):
            step = Step("s", "tool", "t", args_hash=1, output_hash=2, outcome="error", error_hash=3)
            setattr(step, field, bad)
            with pytest.raises(OverflowError):
                native.observe(native.new_state(), step)
