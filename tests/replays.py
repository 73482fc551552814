"""Replays of the labelled corpus and held-out set, shared by the test modules that assert on them.

One replay of both sets (``bench_quality.evaluate_variant``, or the novelty gate's comparison in
``test_gate``) takes seconds of CPU, and the metamorphic suite and the gate test need one per variant. They
run in worker processes (one core fewer than the machine has), each replay once per test session whichever
test asks first; the replays are the benchmark's own, unchanged, so every figure is the one
``python benchmarks/bench_quality.py --variant`` prints.

After collection, ``tests/conftest.py`` asks each selected test's module what it will replay (a module
function ``replays_for(item)``, which calls :func:`start`), so the replays are queued in the order the tests
will read them. The workers run at a lower priority: they take the core the test process leaves idle (it
runs one test at a time) and yield it to a running test and its servers (some tests bound their latency).
A test then waits for its replay (:func:`results` or ``start(...).result()``); a replay that raised raises
again there, for that replay's tests only. ``tests/conftest.py`` shuts the workers down at the end of the
session, dropping replays nobody waited for.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_quality
import variants as V

from otelloop.config import Config, load_config

T = TypeVar("T")
#: How much lower the workers' priority is than the test process's (``nice`` steps).
NICENESS = 10

_pool: ProcessPoolExecutor | None = None
_futures: dict[tuple[str, str, tuple[Any, ...]], Future[Any]] = {}


def _lower_priority() -> None:
    os.nice(NICENESS)


def _executor() -> ProcessPoolExecutor:
    """The worker processes, started on first use: one core fewer than the machine has (at least one), so
    that the tests that bound a probe's latency under a burst keep a core for their servers. ``spawn``: the
    test process has threads (event loops, gRPC) that a forked child would inherit half-way through
    whatever they were doing."""
    global _pool
    if _pool is None:
        _pool = ProcessPoolExecutor(max_workers=max(1, len(os.sched_getaffinity(0)) - 1),
                                    mp_context=multiprocessing.get_context("spawn"), initializer=_lower_priority)
    return _pool


def start(fn: Callable[..., T], *args: Any) -> Future[T]:
    """``fn(*args)`` in a worker, queued once per session (``fn`` a module-level function a worker imports)."""
    key = (fn.__module__, fn.__qualname__, args)
    if key not in _futures:
        _futures[key] = _executor().submit(fn, *args)
    return _futures[key]


def _replay(variant: str) -> dict[str, list[bench_quality.RunResult]]:
    """In a worker: the benchmark's replay (looked up there, so a test that stands in for it in the test
    process changes nothing here)."""
    return bench_quality.evaluate_variant(variant)


def variant_config(variant: str) -> Config:
    """The configuration ``variant`` is measured with (the defaults, or what the variant sets)."""
    spec = V.VARIANTS.get(variant)
    return load_config(None, dict(spec.config) if spec else {}, env={})


def variant_runs(variant: str) -> list[tuple[str, list[bytes]]]:
    """Every run of the corpus and the held-out set as ``variant`` makes it: (``set/run id``, its export
    requests), leaving out the runs the variant does not apply to."""
    out = []
    for corpus in (bench_quality.CORPUS, bench_quality.HOLDOUT):
        for run in bench_quality.load_labels(corpus):
            requests = bench_quality.read_requests(run, corpus)
            if variant != "recorded":
                made = V.apply(variant, run, requests)
                if made is None:
                    continue
                run, requests = made
            out.append((f"{corpus.name}/{run['id']}", requests))
    return out


def prefetch(variants: Iterable[str]) -> None:
    """Queue the replays of ``variants`` (in this order) that are not queued yet."""
    for name in variants:
        start(_replay, name)


def results(variant: str) -> dict[str, list[bench_quality.RunResult]]:
    """Every run of the corpus and the held-out set in ``variant``, per set (``corpus``, ``holdout``)."""
    return start(_replay, variant).result()


def shutdown() -> None:
    """Stop the workers; replays still queued are dropped (a session ended by ``-x`` does not wait)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
        _pool = None
        _futures.clear()


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The workers stopped (``SIGSTOP``) while a test measures the machine itself — a probe's latency under
    a burst, the server's CPU per span with and without readers — and continued after it: on two cores,
    even a low-priority worker shares caches and cycles with the server measured. Replays queued are
    only delayed; a test inside must not wait for one."""
    workers = list(getattr(_pool, "_processes", None) or ())
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
