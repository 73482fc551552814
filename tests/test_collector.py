"""The service's garbage collection between requests (``otelloop.service.Collector``): young objects are
collected and their survivors frozen out of later collections; cyclic garbage frozen while in use is found
by full collections, which grow rarer while they find little."""

from __future__ import annotations

import gc
import logging
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


def test_a_cycle_frozen_while_in_use_is_freed_by_a_full_collection(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "otelloop")
    collector = Collector(young=1, full_min=10**9)
    held = Node()
    ref = weakref.ref(held)
    collector.collect()  # frozen while in use
    del held
    collector.collect()
    assert ref() is not None  # young collections no longer see it
    assert collector.full() >= 1
    assert ref() is None
    assert "full garbage collection:" in caplog.text  # the long pause is logged


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


def test_a_refused_request_leaves_no_garbage_that_holds_its_bytes() -> None:
    """A refusal aborts the gRPC call, which raises; the exception's traceback holds the handler's frames
    in a reference cycle that only a collection frees. Those frames must not hold the request's bytes:
    frozen by a collection while the call is answered, they would stay until a full collection. The
    same over HTTP."""
    import time

    import grpc
    from served import BackgroundLoop, http_call

    from otelloop.config import build_config
    from otelloop.service import Service

    config = build_config({"receiver": {"grpc": {"endpoint": "127.0.0.1:0"}, "http": {"endpoint": "127.0.0.1:0"}},
                           "admin": {"endpoint": "127.0.0.1:0"}}, env={})
    loop = BackgroundLoop()
    service = Service(config)
    loop.run(service.start())
    payload = b"\xff" * 300_000  # no OTLP request: refused as invalid
    try:
        gc.disable()
        with grpc.insecure_channel(service.addresses["grpc"]) as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            for _ in range(3):
                with pytest.raises(grpc.RpcError) as refused:
                    export(payload, timeout=10)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        for _ in range(3):  # and over HTTP
            code, _ = http_call("POST", f"http://{service.addresses['http']}/v1/traces", payload,
                                {"Content-Type": "application/x-protobuf"})
            assert code == 400
        time.sleep(0.2)  # the server has finished answering
        gc.set_debug(gc.DEBUG_SAVEALL)
        assert gc.collect() > 0  # the cycles are there (they hold the handler's frames)
        garbage = list(gc.garbage)
        holders = [o for o in garbage
                   if any(isinstance(r, bytes) and len(r) >= len(payload) for r in gc.get_referents(o))]
        assert not holders
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        loop.run(service.stop())
        loop.close()


def test_the_backlog_collects_between_jobs_when_due_and_no_handler_waits() -> None:
    """Under a steady stream of requests answered on receipt no quiet moment comes: the backlog's worker
    collects between two jobs instead (only while no receiver's handler waits in a request), so what the
    jobs leave is frozen as it goes rather than collected in one long pause later."""
    import asyncio

    from otelloop.config import build_config
    from otelloop.pipeline import Pipeline
    from otelloop.receiver.backlog import Backlog
    from otelloop.receiver.ingest import Ingest
    from otelloop.service import Service
    from otelloop.telemetry import Metrics

    class Job:
        spans = 1

        def __init__(self, keep: list[Node]) -> None:
            self.keep = keep

        async def run(self) -> None:
            self.keep += [Node() for _ in range(300)]  # survivors, as session state is
            garbage_cycle()

        def drop(self) -> None:
            pass

    def frozen(node: Node) -> bool:
        return not any(o is node for o in gc.get_objects())  # in no generation the collector visits

    async def scenario() -> tuple[list[Node], list[Node]]:
        service = Service(build_config({}, env={}))
        service.ingest = Ingest(Pipeline(), None, Metrics())  # as start() makes it
        service.collector = Collector(young=100)
        backlog = Backlog()
        backlog.between_jobs = service._between_jobs
        first: list[Node] = []
        second: list[Node] = []
        backlog.add(Job(first))
        await backlog.join(5)
        with service.ingest.serving():  # a handler waits in the middle of a request: no collection
            backlog.add(Job(second))
            await backlog.join(5)
        await backlog.close()
        return first, second

    gc.set_threshold(1_000_000)  # no collection of the interpreter's own in between (the fixture restores it)
    gc.freeze()
    first, second = asyncio.run(scenario())
    assert frozen(first[0]) and frozen(first[-1])  # the first job's survivors were frozen
    assert not frozen(second[0])  # not the second's, while a handler waited
