"""The service's garbage collection between requests (``otelloop.service.Collector``): young objects are
collected and their survivors frozen out of later collections; cyclic garbage frozen while in use is found
by full collections, which grow rarer while they find little."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from otelloop.service import GC_FULL_MAX_FACTOR, Collector


class Node:
    """A weakly referenceable object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: object = self


@pytest.fixture(autouse=True)
def gc_state() -> Iterator[None]:
    """Every test starts with nothing frozen and leaves the interpreter's collector as it found it."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.unfreeze()
    gc.collect()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    (gc.enable if enabled else gc.disable)()
    gc.collect()


def garbage_cycle() -> weakref.ref[Node]:
    """A cycle nothing else refers to: only a collection frees it."""
    return weakref.ref(Node())


def test_young_collection_frees_cycles_and_freezes_what_survives() -> None:
    collector = Collector(young=100)
    gc.freeze()  # as at start-up
    frozen_before = gc.get_freeze_count()
    dead = garbage_cycle()
    kept = [Node() for _ in range(200)]
    assert collector.due()
    collector.collect()
    assert dead() is None
    assert not collector.due()
    assert gc.get_freeze_count() >= frozen_before + len(kept)
    assert not any(any(o is kept[0] for o in gc.get_objects(g)) for g in range(3))  # out of every generation
    assert collector.full_collections == 0


def test_nothing_is_collected_between_requests_while_a_large_request_paused_collection() -> None:
    collector = Collector(young=10)
    _ = [Node() for _ in range(100)]
    gc.disable()
    assert not collector.due()
    gc.enable()
    assert collector.due()


def test_a_cycle_frozen_while_in_use_is_freed_by_a_full_collection() -> None:
    collector = Collector(young=1, full_min=10**9)
    held = Node()
    ref = weakref.ref(held)
    collector.collect()  # frozen while in use
    del held
    collector.collect()
    assert ref() is not None  # young collections no longer see it
    assert collector.full() >= 1
    assert ref() is None


def test_a_full_collection_comes_once_as_many_objects_were_frozen_as_were_alive() -> None:
    gc.freeze()  # as at start-up
    alive = gc.get_freeze_count()
    collector = Collector(young=1, full_min=1_000)
    kept: list[Node] = []
    batch = max(alive // 8, 1_000)
    while collector.full_collections == 0:
        kept += [Node() for _ in range(batch)]
        collector.collect()
    assert alive - batch <= len(kept) < alive + 2 * batch


def test_full_collections_grow_rarer_while_they_find_little_garbage_and_not_otherwise() -> None:
    collector = Collector(young=1)
    assert collector.factor == 1
    collector.full()
    assert collector.factor == 2
    for _ in range(10):
        collector.full()
    assert collector.factor == GC_FULL_MAX_FACTOR
    held = [Node() for _ in range(max(1000, gc.get_freeze_count() // 20))]
    collector.collect()  # frozen while in use, then garbage: 5 % of the heap
    del held
    assert collector.full() > 0
    assert collector.factor == 1


def test_the_receivers_admission_path_tells_when_no_request_is_in_flight() -> None:
    from otelloop.pipeline import Pipeline
    from otelloop.receiver.ingest import Ingest
    from otelloop.telemetry import Metrics

    ingest = Ingest(Pipeline(), None, Metrics())
    assert ingest.idle
    with ingest.serving():
        assert not ingest.idle
        with ingest.serving():
            pass
        assert not ingest.idle
    assert ingest.idle
    assert ingest.served_requests == 2


def test_a_sessions_state_is_freed_by_reference_counting() -> None:
    """What the collector freezes must not need it: a session's state, with every detector on, holds no
    reference cycle, so a session dropped from the store is freed at once even while frozen (otherwise
    every evicted session would wait for a full collection)."""
    import sys
    from pathlib import Path

    from otelloop.pipeline import Pipeline, run
    from otelloop.state import Session

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from workload import looping_batches, realistic_pool

    pipeline = Pipeline()
    requests = [*realistic_pool(requests=8, spans=256, slots=16).batches, *looping_batches(4, 64, 8)]
    for data in requests:
        run(pipeline.process_steps(run(pipeline.map_scan(pipeline.read(data)))))
    store = pipeline.store
    assert len(store) > 50 and any(s.findings for s in store)
    gc.collect()
    gc.disable()
    assert store.shed(len(store)) > 50
    assert not [o for o in gc.get_objects() if isinstance(o, Session)]  # freed as they left the store
    assert gc.collect() == 0
