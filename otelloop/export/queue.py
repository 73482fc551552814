"""The export queue: accepted requests waiting for the upstream, bounded in spans (docs/architecture.md).

The sender talks to a queue only through :class:`SpanQueue` (put / peek_batch / ack / close), so a
persistent implementation can replace the in-memory one without touching delivery or retry code. A
request stays counted in the queue until the sender acknowledges it, so "queued" means "accepted and
not yet delivered or dropped", including the batch currently on the wire.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Batch:
    """Consecutive queued requests sent as one upstream request.

    Attributes:
        data: the request bytes; the original object when the batch holds one request, else the
            concatenation of the requests (repeated protobuf fields concatenate into one valid message).
        spans: spans in the batch.
        requests: how many queued requests it covers, counted from the head of the queue.
    """

    data: bytes
    spans: int
    requests: int


class SpanQueue(Protocol):
    """What the sender needs from a queue. One consumer; requests leave in arrival order."""

    @property
    def capacity_spans(self) -> int: ...

    @property
    def queued_spans(self) -> int: ...

    def has_room(self, spans: int, nbytes: int) -> bool:
        """Whether a request of ``spans`` spans and about ``nbytes`` bytes would be taken now.

        The receivers ask this before processing a request, so a refusal changes no detector state; a
        request admitted this way is then always taken by :meth:`put` (barring a storage error).
        """
        ...

    def put(self, data: bytes, spans: int) -> bool:
        """Append a request; False when it does not fit."""
        ...

    def put_many(self, parts: Sequence[tuple[bytes, int]]) -> bool:
        """Append the parts of one client request, all or none; False when they do not fit."""
        ...

    def peek_batch(self, max_bytes: int) -> Batch | None:
        """The head of the queue as one batch (without removing it), or None when empty."""
        ...

    def ack(self, batch: Batch) -> None:
        """Remove a batch returned by :meth:`peek_batch` once it is delivered or dropped."""
        ...

    def close(self) -> int:
        """Stop the queue at shutdown; returns the spans lost by doing so."""
        ...


class MemoryQueue:
    """An in-memory FIFO of serialized requests, bounded by the number of spans they hold.

    A request larger than the whole capacity is accepted when the queue is empty; refusing it would only
    make the client retry a request that could never fit.
    """

    def __init__(self, capacity_spans: int) -> None:
        self._capacity = capacity_spans
        self._items: deque[tuple[bytes, int]] = deque()
        self._spans = 0
        self._bytes = 0

    @property
    def capacity_spans(self) -> int:
        return self._capacity

    @property
    def queued_spans(self) -> int:
        return self._spans

    @property
    def queued_bytes(self) -> int:
        """Bytes of the queued requests (memory the guard counts as held by requests in flight)."""
        return self._bytes

    def has_room(self, spans: int, nbytes: int) -> bool:
        return not self._items or self._spans + spans <= self._capacity

    def put(self, data: bytes, spans: int) -> bool:
        return self.put_many(((data, spans),))

    def put_many(self, parts: Sequence[tuple[bytes, int]]) -> bool:
        spans = sum(n for _, n in parts)
        if self._items and self._spans + spans > self._capacity:
            return False
        self._items.extend(parts)
        self._spans += spans
        self._bytes += sum(len(data) for data, _ in parts)
        return True

    def peek_batch(self, max_bytes: int) -> Batch | None:
        """Coalesces requests from the head while they fit in ``max_bytes``; the head always goes."""
        if not self._items:
            return None
        head, spans = self._items[0]
        parts = [head]
        size = len(head)
        for data, count in islice(self._items, 1, None):
            if size + len(data) > max_bytes:
                break
            parts.append(data)
            size += len(data)
            spans += count
        data = head if len(parts) == 1 else b"".join(parts)
        return Batch(data, spans, len(parts))

    def ack(self, batch: Batch) -> None:
        for _ in range(batch.requests):
            data, spans = self._items.popleft()
            self._spans -= spans
            self._bytes -= len(data)

    def close(self) -> int:
        lost = self._spans
        self._items.clear()
        self._spans = self._bytes = 0
        return lost
