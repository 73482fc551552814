"""The default profile on whole sessions: loops stop early, repetition that makes progress is left alone.

Each scenario is a ReAct session (a model call before every tool call) built from the same fields the
mapping gives a step: canonical output hashes of the tool's text, what the text says (nothing, a
failure, an acknowledgement), the file a write gives content to. All six detectors run, as in ``serve``.
The labelled corpus (``tests/test_corpus_quality.py``) holds the same on recorded framework traces; these
tables pin the behaviour each detector contributes, one pattern at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from otelloop.detectors.registry import registered
from otelloop.mapping.canonical import hash_text
from otelloop.mapping.results import normalise_result, result_flags
from otelloop.model import Step
from tests.helpers import DetectorRun, SeedRun, make_step

ALL = tuple(registered())


@dataclass
class Session:
    """A session under construction; ``verdicts`` holds the verdict after each tool call."""

    run: DetectorRun = field(default_factory=lambda: DetectorRun(*ALL))
    t: int = 0
    verdicts: list[str] = field(default_factory=list)
    findings: list[tuple[int, str, str]] = field(default_factory=list)
    by: list[str] = field(default_factory=list)

    def _feed(self, step: Step) -> None:
        ctx = self.run.step(step)
        self.findings += [(len(self.verdicts) + 1, f.detector, f.severity) for f in ctx.findings]
        if step.kind == "tool":
            self.verdicts.append(self.run.session().verdict)
            self.by.append(self.run.session().reason)

    def call(self, name: str, args: dict[str, Any], out: str, **kw: Any) -> None:
        """The model asks for a tool call, then the tool answers ``out``."""
        self.t += 2
        self._feed(make_step("chat", kind="llm", i=self.t - 1, output_hash=hash_text(f"{name}{args}"),
                             output_tokens=40))
        error = kw.pop("error", None)
        empty = not out.strip()
        self._feed(make_step(name, i=self.t, args_hash=hash_text(repr(sorted(args.items()))),
                             args_text=repr(args), output_hash=hash_text(normalise_result(out)),
                             result_flags=result_flags(out, empty),
                             outcome="error" if error else "empty" if empty else "success",
                             error_signature=error, error_hash=hash_text(error) if error else None, **kw))

    def read(self, path: str, content: str) -> None:
        self.call("read_file", {"path": path}, content, tool_class="read", file_path=path)

    def write(self, path: str, content: str) -> None:
        self.call("write_file", {"path": path, "content": content}, "File written successfully",
                  tool_class="write", file_path=path, content_hash=hash_text(content))

    def first(self, verdict: str) -> int | None:
        """The tool call (1-based) at which the verdict first reached ``verdict``."""
        rank = {"continue": 0, "nudge": 1, "stop": 2}
        return next((i for i, v in enumerate(self.verdicts, 1) if rank[v] >= rank[verdict]), None)


PYTEST_FAIL = "F..\nFAILED tests/test_cart.py::test_total - assert 41 == 42\n1 failed, 2 passed in {t}s"


def same_call(s: Session) -> None:
    s.call("search", {"q": "release notes"}, "v2 notes: faster sync")
    for _ in range(9):
        s.call("search", {"q": "weather"}, "Sunny, 20 °C")


def paraphrased_nothing(s: Session) -> None:
    for q in ["paris weather", "weather in paris", "paris forecast", "forecast paris today",
             "paris temperature now", "what is the weather in paris", "paris climate today"]:
        s.call("search", {"q": q}, f"No results found for '{q}'.")


def same_failure_after_edits(s: Session) -> None:
    for i in range(5):
        s.read("src/cart.py", f"def total(items): ...  # v{i}")
        s.write("src/cart.py", f"def total(items): ...  # v{i + 1}")
        s.call("run_tests", {}, PYTEST_FAIL.format(t=0.03 + i / 100))


def edit_revert(s: Session) -> None:
    for i in range(6):
        s.write("src/retry.py", "base * 2 ** attempt" if i % 2 else "base * (2 ** attempt)")
        s.call("run_tests", {}, PYTEST_FAIL.format(t=0.05))


def two_tools_alternating(s: Session) -> None:
    for _ in range(6):
        s.call("job_status", {"job": "ci-5"}, "status: running")
        s.call("job_log", {"job": "ci-5"}, "compiling module 3 of 9")


def polling_never_completes(s: Session) -> None:
    s.call("submit", {"job": "export"}, "job 17 queued")
    for _ in range(10):
        s.call("status", {"job": 17}, "status: running")


def loop_after_work(s: Session) -> None:
    for i in range(10):
        s.read(f"src/m{i}.py", f"module {i}")
    for _ in range(10):
        s.call("grep", {"pattern": "TODO", "path": "src"}, "src/m3.py:4: TODO")


def batch_reads(s: Session) -> None:
    for i in range(12):
        s.read(f"data/{i}.csv", f"id,value\n{i},{i * 7}")


def batch_writes(s: Session) -> None:
    for i in range(12):
        s.write(f"docs/{i}.md", f"# Page\nThe same body, page {i}.")
    for i in range(8):
        s.call("save_note", {"title": f"note {i}", "text": "same text"}, "Saved")


def polling_completes(s: Session) -> None:
    s.call("submit", {"job": "export"}, "job 17 queued")
    for status in ("queued", "running", "running", "running", "done"):
        s.call("status", {"job": 17}, f"status: {status}")


def fix_cycle(s: Session) -> None:
    for n in (3, 2, 1, 0):
        s.call("run_tests", {}, f"{n} failed, {5 - n} passed in 0.1s" if n else "5 passed in 0.2s")
        if n:
            s.write("src/cart.py", f"fix {n}")


def rerun_after_edit(s: Session) -> None:
    for i in range(4):
        s.write("src/a.py", f"attempt {i}")
        s.call("run_tests", {}, "5 passed in 0.2s" if i == 3 else f"FAILED test_{i}\n1 failed in 0.1s")


def retries(s: Session) -> None:
    for _ in range(2):
        s.call("fetch", {"url": "https://example.test/a"}, "", error="TimeoutError: read timed out")
    s.call("fetch", {"url": "https://example.test/a"}, "<html>page a</html>")


def refactor_green(s: Session) -> None:
    for i in range(6):
        s.write("src/app.py", f"version {i}")
        s.call("run_tests", {}, "12 passed in 0.4s")


def long_run(s: Session) -> None:
    for i in range(45):
        if i % 3 == 0:
            s.read(f"m{i}.py", f"src {i}")
        elif i % 3 == 1:
            s.write(f"m{i}.py", f"new {i}")
        else:
            s.call("run_tests", {}, f"{50 - i} passed in 1.{i}s")


LOOPS: list[tuple[Callable[[Session], None], int, int]] = [
    # scenario, loop start (tool call), latest acceptable stop (tool call)
    (same_call, 2, 6),
    (paraphrased_nothing, 1, 5),
    (same_failure_after_edits, 1, 6),
    (edit_revert, 1, 5),
    (two_tools_alternating, 1, 6),
    (polling_never_completes, 2, 7),
    (loop_after_work, 11, 15),
]
HEALTHY = [batch_reads, batch_writes, polling_completes, fix_cycle, rerun_after_edit, retries,
           refactor_green, long_run]


@pytest.mark.parametrize("scenario, start, latest", LOOPS, ids=[s.__name__ for s, *_ in LOOPS])
def test_loops_are_stopped_soon_after_they_start(scenario: Callable[[Session], None], start: int,
                                                  latest: int) -> None:
    s = Session()
    scenario(s)
    stop = s.first("stop")
    assert stop is not None, s.verdicts
    assert start <= stop <= latest, (stop, s.by[stop - 1])


@pytest.mark.parametrize("scenario", HEALTHY, ids=[s.__name__ for s in HEALTHY])
def test_repetition_with_progress_gets_no_finding_at_all(scenario: Callable[[Session], None]) -> None:
    s = Session()
    scenario(s)
    assert set(s.verdicts) == {"continue"}
    assert s.findings == []


def test_the_seed_profile_stops_healthy_batches_and_polling() -> None:
    """What the default profile changes: the seed profile's strict rules stop these healthy sessions."""
    for scenario in (batch_writes, polling_completes, refactor_green):
        seed = Session(run=_seed_run())
        scenario(seed)
        assert seed.first("nudge") is not None, scenario.__name__


def _seed_run() -> DetectorRun:
    return SeedRun(*ALL)
