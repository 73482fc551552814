"""Requests answered before they are processed, processed one after another in arrival order.

With ``receiver.acknowledge: received`` a client's answer does not wait for mapping and detection: the
receiver reads and checks the request, reserves room for it in the export queue, hands its processing
to the :class:`Backlog` and answers. One worker task then runs the backlog's jobs strictly in the order
they were added, so every session still sees its steps in the order they arrived, with no claims between
requests.

Whoever reads detector state on behalf of a client (the verdict endpoint) first awaits :meth:`settled`:
it returns once every job added before the call is done, so an agent that sent its steps and then asks
for its verdict reads one that includes them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

class Job(Protocol):
    """One request's processing, run in its turn or dropped unrun (at shutdown)."""

    #: spans it holds (0 while unknown: a request read only in its turn)
    spans: int

    async def run(self) -> None:
        """Process the request; it handles its own errors (an exception escaping it is logged)."""

    def drop(self) -> None:
        """The request will not be processed: give back what it holds, and count and log what is lost."""


class Backlog:
    """A first-in, first-out queue of jobs run by one worker task, started with the first job.

    Args:
        on_size: called with the number of jobs not yet done whenever it changes (for a gauge).
    """

    def __init__(self, on_size: Callable[[int], None] = lambda jobs: None) -> None:
        self._jobs: collections.deque[Job] = collections.deque()
        self._added = 0  # jobs added so far; a job's number is the count when it was added
        self._done = 0  # jobs finished so far (they finish in the order they were added)
        self._spans = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._on_size = on_size
        #: called after each job (the service collects garbage there: ``otelloop.service.Collector``)
        self.between_jobs: Callable[[], None] | None = None

    def __len__(self) -> int:
        """Jobs added and not yet done (the one running included)."""
        return self._added - self._done

    @property
    def spans(self) -> int:
        """Spans of the jobs not yet done (as far as known when they were added)."""
        return self._spans

    def add(self, job: Job) -> None:
        """Queue ``job`` behind every job added before it."""
        if self._worker is None:
            self._wake = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._run(), name="otelloop-backlog")
        self._jobs.append(job)
        self._added += 1
        self._spans += job.spans
        self._on_size(len(self))
        assert self._wake is not None
        self._wake.set()

    async def settled(self, timeout: float) -> bool:
        """Wait until every job added before this call is done, for at most ``timeout`` seconds; whether
        they all are."""
        target = self._added
        if self._done >= target:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        try:
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
        except TimeoutError:
            return False
        return True

    async def join(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds) until the backlog is empty; whether it is."""
        return await self.settled(max(timeout, 0.0))

    async def close(self) -> int:
        """Stop the worker: the job running is cancelled (it accounts for itself), every job still
        queued is dropped; returns how many jobs were not done. :meth:`join` first to lose none."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        left = len(self._jobs)
        while self._jobs:
            self._finish(self._jobs.popleft()).drop()
        return left

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            if not self._jobs:
                self._wake.clear()
                await self._wake.wait()
                continue
            job = self._jobs[0]
            try:
                await job.run()
            except asyncio.CancelledError:
                self._finish(self._jobs.popleft())
                raise
            except Exception:  # a job handles its own errors; anything else must not stop the worker
                log.exception("processing a request acknowledged on receipt failed")
            self._finish(self._jobs.popleft())
            del job  # nothing of it stays in use while the hook runs
            if self.between_jobs is not None:
                try:
                    self.between_jobs()
                except Exception:
                    log.exception("the backlog's hook between jobs failed")

    def _finish(self, job: Job) -> Job:
        """Count ``job`` done (run, cancelled or dropped) and wake whoever waited for it."""
        self._done += 1
        self._spans -= job.spans
        self._on_size(len(self))
        waiters, done = self._waiters, self._done
        while waiters and waiters[0][0] <= done:
            _, waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
        return job
