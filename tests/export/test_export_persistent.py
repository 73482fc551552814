"""The SQLite export queue: order, durability across restarts and SIGKILL, damaged files, bounds."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sinks import (
    GrpcSink,
    MakeExporter,
    exporter_config,
    free_port,
    make_request,
    sample,
    span_names,
    wait_until,
)

from otelloop.export.persistent import FILE_NAME, PersistentQueue, QueueLocked
from otelloop.telemetry import Metrics

MIB = 1 << 20


def drain(queue: PersistentQueue, max_bytes: int = MIB) -> list[str]:
    """Every span name left in the queue, in delivery order, acknowledging as a sender would."""
    names: list[str] = []
    while (batch := queue.peek_batch(max_bytes)) is not None:
        names += span_names(batch.data)
        queue.ack(batch)
    return names


@pytest.fixture
def qdir(tmp_path: Path) -> Path:
    return tmp_path / "queue"


def test_batches_come_out_in_order_and_coalesced(qdir: Path) -> None:
    queue = PersistentQueue(qdir, 100, MIB)
    requests = [make_request(2, f"r{i}") for i in range(5)]
    for data in requests:
        assert queue.put(data, 2)
    batch = queue.peek_batch(len(requests[0]) * 3)
    assert batch is not None and batch.requests == 3 and batch.spans == 6
    assert batch.data == b"".join(requests[:3])
    assert queue.peek_batch(len(requests[0]) * 3) == batch  # peek does not remove
    queue.ack(batch)
    assert queue.queued_spans == 4 and queue.queued_bytes == 2 * len(requests[0])
    head = queue.peek_batch(0)  # max_bytes 0: the head alone, as after a rejected batch
    assert head is not None and head.requests == 1 and head.data == requests[3]
    assert drain(queue) == ["r3-0", "r3-1", "r4-0", "r4-1"]
    assert queue.queued_spans == 0 and queue.peek_batch(MIB) is None
    queue.close()


def test_restart_delivers_what_was_not_acknowledged_in_order(qdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    queue = PersistentQueue(qdir, 1000, MIB)
    for i in range(10):
        queue.put(make_request(3, f"r{i}"), 3)
    first = queue.peek_batch(1)
    assert first is not None
    queue.ack(first)
    assert queue.close() == 0  # nothing is lost at shutdown: it stays on disk
    caplog.set_level(logging.INFO)
    again = PersistentQueue(qdir, 1000, MIB)
    assert again.queued_spans == 27 and again.queued_requests == 9
    assert "27 spans in 9 requests" in caplog.text
    assert again.put(make_request(1, "new"), 1)
    assert drain(again, 100) == [f"r{i}-{k}" for i in range(1, 10) for k in range(3)] + ["new-0"]
    again.close()


def test_every_acknowledged_put_survives_sigkill(qdir: Path) -> None:
    """A child process puts requests, prints each acknowledgement, then kills itself mid-way."""
    child = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent.parent)!r})
        from sinks import make_request
        from otelloop.export.persistent import PersistentQueue
        q = PersistentQueue({str(qdir)!r}, 10_000, 1 << 30)
        for i in range(200):
            assert q.put(make_request(2, f"r{{i}}"), 2)
            print(i, flush=True)
            if i == 149:
                os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == -9
    acknowledged = [int(line) for line in proc.stdout.split()]
    assert acknowledged == list(range(150))
    queue = PersistentQueue(qdir, 10_000, 1 << 30)  # the lock died with the process
    assert drain(queue) == [f"r{i}-{k}" for i in acknowledged for k in range(2)]
    queue.close()


@pytest.mark.parametrize("damage", ["garbage", "foreign", "torn_pages"])
def test_damaged_file_is_set_aside_and_a_fresh_queue_starts(qdir: Path, caplog: pytest.LogCaptureFixture,
                                                           damage: str) -> None:
    path = qdir / FILE_NAME
    if damage == "garbage":
        qdir.mkdir()
        path.write_bytes(b"this is not a database" * 100)
    elif damage == "foreign":
        qdir.mkdir()
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE something_else (x)")
    else:
        queue = PersistentQueue(qdir, 100_000, 1 << 30)
        for i in range(200):
            queue.put(make_request(20, f"r{i}"), 20)
        queue.close()
        raw = bytearray(path.read_bytes())
        assert len(raw) > 64 * 1024
        raw[8192:40960] = b"\xa5" * 32768  # scribble over interior pages, keep the header
        path.write_bytes(bytes(raw))
    caplog.set_level(logging.ERROR)
    queue = PersistentQueue(qdir, 100, MIB)
    aside = sorted(p.name for p in qdir.iterdir() if ".corrupt-" in p.name)
    assert aside and aside[0].startswith(f"{FILE_NAME}.corrupt-")
    line = next(r.getMessage() for r in caplog.records if "moved it aside" in r.getMessage())
    assert str(path) in line and aside[0] in line and "unreadable" in line
    assert queue.queued_spans == 0
    assert queue.put(make_request(1, "fresh"), 1)
    assert drain(queue) == ["fresh-0"]
    queue.close()


def test_bounded_by_spans(qdir: Path) -> None:
    queue = PersistentQueue(qdir, 10, MIB)
    assert queue.put(make_request(6, "a"), 6)
    assert not queue.has_room(5, 10) and not queue.put(make_request(5, "b"), 5)
    assert queue.has_room(4, 10) and queue.put(make_request(4, "c"), 4)
    assert not queue.put(make_request(1, "d"), 1)
    queue.close()


def test_bounded_by_bytes_with_room_checked_on_the_received_size(qdir: Path) -> None:
    data = make_request(1, "x" * 1000)
    queue = PersistentQueue(qdir, 1_000_000, 3 * len(data))
    for _ in range(3):
        assert queue.has_room(1, len(data))
        assert queue.put(data, 1)
    assert not queue.has_room(1, len(data)) and not queue.put(data, 1)
    assert queue.queued_bytes == 3 * len(data)
    batch = queue.peek_batch(0)
    assert batch is not None
    queue.ack(batch)
    assert queue.has_room(1, len(data))
    # admitted on its received size, then stored a little larger (enrichment): still taken
    assert queue.put(data + make_request(1, "extra"), 1)
    queue.close()


def test_request_larger_than_the_bounds_fits_an_empty_queue_only(qdir: Path) -> None:
    queue = PersistentQueue(qdir, 10, 1000)
    huge = make_request(25, "huge" * 100)
    assert queue.has_room(25, len(huge)) and queue.put(huge, 25)
    assert not queue.has_room(1, 10) and not queue.put(make_request(1, "a"), 1)
    assert len(drain(queue)) == 25
    assert queue.put(make_request(1, "a"), 1)
    queue.close()


def test_a_second_process_cannot_share_the_directory(qdir: Path) -> None:
    queue = PersistentQueue(qdir, 10, MIB)
    with pytest.raises(QueueLocked, match="another otelloop process"):
        PersistentQueue(qdir, 10, MIB)
    queue.close()
    PersistentQueue(qdir, 10, MIB).close()


def test_storage_error_refuses_instead_of_pretending(qdir: Path, caplog: pytest.LogCaptureFixture) -> None:
    queue = PersistentQueue(qdir, 10, MIB)
    assert queue.put(make_request(1, "kept"), 1)
    good = queue._db
    broken = sqlite3.connect(qdir / "other.sqlite3")
    broken.close()
    queue._db = broken  # every statement now fails like an I/O error would
    caplog.set_level(logging.ERROR)
    assert not queue.put(make_request(1, "lost?"), 1)
    assert "cannot store a request" in caplog.text
    assert queue.queued_spans == 1
    queue._db = good
    assert drain(queue) == ["kept-0"]
    queue.close()


def test_drained_queue_gives_space_back(qdir: Path) -> None:
    queue = PersistentQueue(qdir, 1_000_000, 1 << 30)
    blob = make_request(1, "y" * 100_000)
    for _ in range(200):
        queue.put(blob, 1)
    size_full = (qdir / FILE_NAME).stat().st_size + (qdir / f"{FILE_NAME}-wal").stat().st_size
    drain(queue, 4 * MIB)
    size_empty = (qdir / FILE_NAME).stat().st_size + (qdir / f"{FILE_NAME}-wal").stat().st_size
    assert size_full > 15 * MIB and size_empty < size_full / 4
    queue.close()


# ---------------------------------------------------------------------------------------------------
# Through the exporter


async def test_exporter_keeps_the_queue_across_a_restart(qdir: Path, metrics: Metrics,
                                                        make_exporter: MakeExporter) -> None:
    port = free_port()
    cfg = exporter_config(f"grpc://127.0.0.1:{port}", persistent_dir=str(qdir), queue_spans=100)
    first = await make_exporter(cfg)
    requests = [make_request(5, f"r{i}") for i in range(4)]
    for data in requests:
        assert first.has_room(5, len(data)) and first.offer(data, 5)
    assert await first.shutdown(0.2) == 0  # upstream down: kept on disk, not counted as lost
    assert sample(metrics, "otelloop_spans_export_failed_total", reason="shutdown") == 0
    sink = await GrpcSink(port=port).start()
    try:
        second = await make_exporter(cfg)
        assert second.queued_spans == 20
        assert sample(metrics, "otelloop_export_queue_spans") == 20
        await wait_until(lambda: second.queued_spans == 0)
        assert sink.delivered_names() == [f"r{i}-{k}" for i in range(4) for k in range(5)]
        assert sample(metrics, "otelloop_spans_exported_total") == 20
    finally:
        await sink.stop()
