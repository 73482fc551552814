"""The in-memory export queue: capacity in spans, ordered batches, coalescing, acknowledgement."""

from __future__ import annotations

from sinks import make_request, span_names

from otelloop.export.queue import MemoryQueue


def test_lone_request_is_the_original_object() -> None:
    queue = MemoryQueue(10)
    data = make_request(3, "a")
    assert queue.put(data, 3)
    batch = queue.peek_batch(1 << 20)
    assert batch is not None
    assert batch.data is data and batch.spans == 3 and batch.requests == 1


def test_coalesces_in_order_up_to_max_bytes() -> None:
    queue = MemoryQueue(100)
    requests = [make_request(2, f"r{i}") for i in range(5)]
    for data in requests:
        queue.put(data, 2)
    batch = queue.peek_batch(len(requests[0]) * 3)
    assert batch is not None
    assert batch.requests == 3 and batch.spans == 6
    assert batch.data == b"".join(requests[:3])
    assert span_names(batch.data) == ["r0-0", "r0-1", "r1-0", "r1-1", "r2-0", "r2-1"]


def test_head_goes_even_when_larger_than_max_bytes() -> None:
    queue = MemoryQueue(100)
    queue.put(make_request(5, "big"), 5)
    queue.put(make_request(1, "small"), 1)
    batch = queue.peek_batch(10)
    assert batch is not None and batch.requests == 1 and batch.spans == 5


def test_capacity_is_counted_in_spans() -> None:
    queue = MemoryQueue(10)
    assert queue.put(make_request(6, "a"), 6)
    assert not queue.put(make_request(5, "b"), 5)
    assert queue.put(make_request(4, "c"), 4)
    assert queue.queued_spans == 10
    assert not queue.put(make_request(1, "d"), 1)


def test_request_larger_than_capacity_fits_an_empty_queue_only() -> None:
    queue = MemoryQueue(10)
    assert queue.put(make_request(25, "huge"), 25)
    assert not queue.put(make_request(1, "a"), 1)
    batch = queue.peek_batch(1 << 20)
    assert batch is not None
    queue.ack(batch)
    assert queue.queued_spans == 0
    assert queue.put(make_request(1, "a"), 1)


def test_peek_does_not_remove_and_ack_does() -> None:
    queue = MemoryQueue(10)
    for i in range(3):
        queue.put(make_request(1, f"r{i}"), 1)
    first = queue.peek_batch(1)
    assert first is not None and first == queue.peek_batch(1)
    assert queue.queued_spans == 3
    queue.ack(first)
    second = queue.peek_batch(1 << 20)
    assert second is not None and span_names(second.data) == ["r1-0", "r2-0"]
    queue.ack(second)
    assert queue.queued_spans == 0 and queue.peek_batch(1 << 20) is None


def test_close_reports_what_it_loses() -> None:
    queue = MemoryQueue(10)
    queue.put(make_request(4, "a"), 4)
    queue.put(make_request(3, "b"), 3)
    assert queue.close() == 7
    assert queue.queued_spans == 0


def test_memory_queue_counts_the_bytes_it_holds_until_acknowledged() -> None:
    """What the memory guard charges to requests in flight once they are queued."""
    queue = MemoryQueue(100)
    assert queue.put(b"a" * 10, 1) and queue.put_many([(b"b" * 20, 2), (b"c" * 30, 3)])
    assert queue.queued_bytes == 60
    batch = queue.peek_batch(1000)
    assert batch is not None and queue.queued_bytes == 60  # still held while on the wire
    queue.ack(batch)
    assert queue.queued_bytes == 0
    queue.put(b"d" * 5, 1)
    queue.close()
    assert queue.queued_bytes == 0
