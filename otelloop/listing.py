"""Session lists of the admin API (``GET /v1/sessions``) that cannot starve ingest or the probes.

The admin listener runs on the event loop that also serves both OTLP receivers, ``/healthz``, ``/readyz``
and ``/metrics`` (one process, one loop), so a list computed in one go holds all of them: ranking 100,000
live sessions by a query and rendering a page of 10,000 took a third of a second, and a burst of such
requests queued up for seconds. Three rules bound what lists can cost:

- **A bounded page.** ``limit`` is at most :data:`MAX_LIMIT` sessions; a larger one is refused with 400
  (a client that pages gets every session, one page at a time; ``total`` says how many there are).
- **Work in slices.** Ranking (:meth:`SessionStore.ranking`) and rendering run in slices of
  :data:`SLICE_SECONDS`, one list's slice at a time, each followed by a rest that keeps list work to
  :data:`SHARE` of the loop's time; the page is serialised a slice of sessions at a time, and nothing is
  made per live session that the cyclic garbage collector would have to visit.
- **A few at a time.** At most ``admin.max_concurrent_lists`` lists are computed at once; up to
  :data:`QUEUED_PER_SLOT` times as many wait their turn in arrival order (at most :data:`WAIT_SECONDS`),
  and any more are answered 503 with ``Retry-After`` (logged, counted in
  ``otelloop_admin_lists_refused_total``). A list served from the cache of recent answers (``max_age``)
  never waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Generator
from typing import Any, TypeVar

from aiohttp import web

from otelloop.state import Session, SessionStore

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Largest page of sessions one request may ask for.
MAX_LIMIT = 1000
#: Requests that may wait for a turn, per list computed at once, and for how long at most (seconds).
QUEUED_PER_SLOT = 64
WAIT_SECONDS = 10.0
#: Longest stretch of list work before the event loop gets a turn. Short, because a request needs several
#: turns of the loop (accept, read, answer) and waits for every active list's slice at each of them.
SLICE_SECONDS = 0.001
#: Seconds a refused client is asked to wait.
RETRY_AFTER_S = 1
#: Share of the event loop's time that list work may take while lists are being computed.
SHARE = 0.3
#: Sessions rendered between two checks of the slice's time.
RENDER_BATCH = 20
#: Minimum seconds between two log lines about refused lists.
LOG_INTERVAL = 60.0


class ListGate:
    """At most ``concurrent`` list computations at once, a bounded queue of waiting ones, 503 beyond.

    Args:
        concurrent: lists computed at once (``admin.max_concurrent_lists``).
        refused: called once per refused request (the metric).
    """

    def __init__(self, concurrent: int, refused: Callable[[], None]) -> None:
        self.concurrent = concurrent
        self.queued = concurrent * QUEUED_PER_SLOT
        self._slots = asyncio.Semaphore(concurrent)
        self._waiting = 0
        self._refused = refused
        self._last_log = -LOG_INTERVAL
        self._resume_at = 0.0

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Hold one of the slots while the body runs; raise 503 when every slot is taken and the queue full."""
        if self._slots.locked() and self._waiting >= self.queued:
            self._refuse()
        self._waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), WAIT_SECONDS)
        except TimeoutError:
            self._refuse()
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._slots.release()

    async def run(self, steps: Generator[None, None, T]) -> T:
        """Run a sliced computation: slices of :data:`SLICE_SECONDS`, one list's at a time, each followed
        by a rest (shared by every list) that keeps list work to :data:`SHARE` of the loop's time. Resting,
        the process sleeps, so it is woken at once for a probe or an OTLP request even on a busy host."""
        while True:
            delay = self._resume_at - time.perf_counter()
            await asyncio.sleep(max(0.0, delay))
            if self._resume_at > time.perf_counter():
                continue  # another list took the turn meanwhile
            started = time.perf_counter()
            deadline = started + SLICE_SECONDS
            try:
                next(steps)  # at least one step per slice
                while time.perf_counter() < deadline:
                    next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            finally:
                ended = time.perf_counter()
                self._resume_at = ended + (ended - started) * (1 - SHARE) / SHARE

    def _refuse(self) -> None:
        self._refused()
        now = time.monotonic()
        if now - self._last_log >= LOG_INTERVAL:
            self._last_log = now
            log.warning("admin API: session lists refused (503): %d being computed and %d waiting "
                        "(admin.max_concurrent_lists)", self.concurrent, self.queued)
        raise web.HTTPServiceUnavailable(
            text=f"too many session lists at once (admin.max_concurrent_lists: {self.concurrent}); retry shortly",
            headers={"Retry-After": str(RETRY_AFTER_S)})


async def render_page(gate: ListGate, store: SessionStore, verdict: str | None, query: str, offset: int,
                      limit: int, brief: Callable[[Session], dict[str, Any]], dumps: Callable[[Any], str]) -> bytes:
    """The JSON body of one page of ``/v1/sessions``, ranked and rendered in slices of the event loop.

    The body is what ``dumps`` makes of ``{"sessions": [...], "total", "offset", "limit", "counts"}``, built
    one session at a time."""
    page, total = await gate.run(store.ranking(verdict, query, offset, limit))
    parts = await gate.run(_render(page, brief, dumps))
    tail = dumps({"total": total, "offset": offset, "limit": limit, "counts": store.verdict_counts()})
    return ('{"sessions": [' + ", ".join(parts) + "], " + tail[1:]).encode()


def _render(page: list[Session], brief: Callable[[Session], dict[str, Any]],
            dumps: Callable[[Any], str]) -> Generator[None, None, list[str]]:
    parts: list[str] = []
    for start in range(0, len(page), RENDER_BATCH):
        parts.extend(dumps(brief(s)) for s in page[start:start + RENDER_BATCH])
        yield
    return parts


def page_limit(query: Any, default: int = 100) -> int:
    """``limit`` of a list request: 1 to :data:`MAX_LIMIT`, else 400 (a page is never silently shortened)."""
    raw = query.get("limit")
    if raw is None:
        return default
    try:
        limit = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text="limit must be an integer") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise web.HTTPBadRequest(text=f"limit must be between 1 and {MAX_LIMIT} (page with offset)")
    return limit

