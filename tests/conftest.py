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
def grpc_sink(loop: BackgroundLoop) -> Iterator[GrpcSink]:
    sink = loop.run(GrpcSink().start())
    yield sink
    loop.run(sink.stop())


@pytest.fixture
def http_sink(loop: BackgroundLoop) -> Iterator[HttpSink]:
    sink = loop.run(HttpSink().start())
    yield sink
    loop.run(sink.stop())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    """``serve(config, **kw)`` starts ``otelloop serve``; every process started is stopped afterwards."""
    started: list[Served] = []

    def start(config: dict[str, Any] | None = None, **kw: Any) -> Served:
        d = tmp_path / f"otelloop{len(started)}"
        d.mkdir()
        s = Served(d, config, **kw)
        started.append(s)
        return s

    yield start
    for s in started:
        s.stop()
