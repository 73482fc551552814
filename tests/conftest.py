"""Shared fixtures. ``tests/`` is on sys.path, so test modules import ``helpers``, ``spans``, ``served`` and
``sinks`` directly.

End-to-end tests get a background event loop for the async sinks (``loop``), started sinks on 127.0.0.1
(``grpc_sink``, ``http_sink``), and ``serve``: a factory of real ``otelloop serve`` subprocesses that are
stopped by their pid after the test.

Tests of an optional extra (``frameworks``, ``semantic``, ``deploy``) skip when it is not installed and
fail when it is missing under ``OTELLOOP_REQUIRE_EXTRAS=1`` (CI); see ``extras.py``.
Tests that take minutes are marked ``slow`` (see :data:`SLOW`): ``-m "not slow"`` leaves them out.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import extras
import pytest
from hypothesis import settings
from served import BackgroundLoop, Served
from sinks import GrpcSink, HttpSink

# Property tests explore new inputs on every local run (a failure they find is saved and replayed from
# .hypothesis/), while CI (``OTELLOOP_FUZZ_SEEDED=1`` in .ci/run) draws the same examples every time so that
# its verdict depends on the change, not on the draw. Longer exploration: ``OTELLOOP_FUZZ_EXAMPLES=5000``.
settings.register_profile("seeded", derandomize=True, database=None)
if os.environ.get("OTELLOOP_FUZZ_SEEDED") == "1":
    settings.load_profile("seeded")


#: Tests that take minutes, not seconds (load, outage and memory probes against a running server, replays
#: of the labelled corpus and its production-like variants, the fuzzers): marked ``slow``, so that
#: ``python -m pytest -m "not slow"`` is the quick loop. Nothing deselects them by default; .ci/run runs them.
SLOW = ("robustness/", "test_metamorphic.py", "test_corpus_quality.py", "test_reliability.py", "test_fuzz.py")
TESTS = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(TESTS).as_posix().startswith(SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Queue the corpus replays the selected tests will read, in their order (replays.py): a test module
    that reads replays says which, per test, in a function ``replays_for(item)``."""
    if session.config.option.collectonly:
        return
    for item in session.items:
        plan = getattr(getattr(item, "module", None), "replays_for", None)
        if plan is not None:
            plan(item)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The corpus replays' worker processes end with the session (replays.py; only if a test started them)."""
    replays = sys.modules.get("replays")
    if replays is not None:
        replays.shutdown()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked with an extra's name (``@pytest.mark.semantic``) needs that extra installed."""
    for extra in extras.EXTRAS:
        if item.get_closest_marker(extra) is not None:
            extras.require(extra, module_level=False)


@pytest.fixture(scope="module")
def loop() -> Iterator[BackgroundLoop]:
    bg = BackgroundLoop()
    yield bg
    bg.close()


@pytest.fixture
def served_processes() -> list[Served]:
    """The ``otelloop serve`` processes a test started (by ``serve``), for the fixtures that tear down."""
    return []


def _stop_all(processes: list[Served]) -> None:
    for s in processes:
        s.stop()  # a process already stopped is left as it is


@pytest.fixture
def grpc_sink(loop: BackgroundLoop, served_processes: list[Served]) -> Iterator[GrpcSink]:
    """A sink that outlives the test's servers: they are stopped first, so that their shutdown drains into a
    sink that still answers (an upstream gone first would hold each one for its whole grace period)."""
    sink = loop.run(GrpcSink().start())
    yield sink
    _stop_all(served_processes)
    loop.run(sink.stop())


@pytest.fixture
def http_sink(loop: BackgroundLoop, served_processes: list[Served]) -> Iterator[HttpSink]:
    """Like ``grpc_sink``: the test's servers stop before it does."""
    sink = loop.run(HttpSink().start())
    yield sink
    _stop_all(served_processes)
    loop.run(sink.stop())


@pytest.fixture
def serve(tmp_path: Path, served_processes: list[Served]) -> Iterator[Any]:
    """``serve(config, **kw)`` starts ``otelloop serve``; every process started is stopped afterwards."""

    def start(config: dict[str, Any] | None = None, **kw: Any) -> Served:
        d = tmp_path / f"otelloop{len(served_processes)}"
        d.mkdir()
        s = Served(d, config, **kw)
        served_processes.append(s)
        return s

    yield start
    _stop_all(served_processes)
