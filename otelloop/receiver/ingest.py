"""Admission of one received request: decode, check room, process, hand to the exporter.

Both receivers await :meth:`Ingest.handle`; a refusal is raised as :class:`Refusal` *before* any
detector state changes, so a client that retries a refused request does not count twice.

The event loop that runs the receivers also answers ``/healthz``, ``/readyz`` and ``/metrics``, so no
request may hold it for long. A small request (at most ``CHUNK_BYTES`` and :data:`INLINE_STEPS` steps)
is handled in one go: it takes a few milliseconds. A larger one is handled in slices of about
:data:`SLICE_SECONDS`: it is read in chunks, its steps are detected a few dozen at a time and its parts
are cut for the upstream piece by piece, with the loop free to serve everything else in between. Three
rules keep that safe:

* **Nothing changes before the whole request is decoded.** Room in the export queue is then reserved
  (:meth:`Exporter.reserve`), so the request cannot be refused for lack of room once its detectors ran.
* **A session's steps stay in order.** A request that processes in slices first claims its sessions
  (:class:`SessionGate`); any later request touching one of them waits until it is done, while requests
  of other sessions go on. Requests in flight at the same moment are processed in the order they finish
  decoding; steps inside one request are processed in time order.
* **Processing, once begun, finishes.** It runs in its own task that a client hanging up cannot cancel,
  so a session never sees half a request; the service waits for such tasks when it stops.

Memory: every request carries a :class:`~otelloop.resources.Ticket` of the bytes it holds, charged by its
receiver as its body arrives and here for what decoding and enrichment copy of it
(:data:`PROCESSING_COPIES`). A request that would take the requests in flight over their budget (a share
of ``limits.memory_mib``) is refused retryably before it is decoded, so memory held by requests is
pushed back to clients instead of being paid for with detector state.

Large requests are handled one at a time (:class:`LargeRequests`), which bounds the memory their decoded
steps take; small ones never wait for them except to keep a shared session's order. While one is in
flight the cyclic garbage collector is paused: a request of hundreds of thousands of spans makes millions
of young objects, and a full collection over them would hold the loop for a second; reference counting
frees everything the pipeline allocates, and collection resumes when the request is done. Its memory is
also given back in slices, for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import logging
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar

from otelloop.logs import ThrottledLog
from otelloop.pipeline import CHUNK_BYTES, Decoded, InvalidRequest, Pipeline, Position
from otelloop.pipeline import run as run_steps
from otelloop.receiver.backlog import Backlog
from otelloop.resources import InFlight, Ticket
from otelloop.telemetry import Metrics

if TYPE_CHECKING:
    from otelloop.export import Exporter
    from otelloop.export.exporter import Reservation

log = logging.getLogger(__name__)

T = TypeVar("T")

RefusalReason = Literal["invalid", "too_large", "unauthenticated", "backpressure"]

#: Seconds a client is asked to wait when otelloop pushes back.
RETRY_AFTER_S = 1

#: Longest stretch of work on one request before the event loop gets a turn.
SLICE_SECONDS = 0.01

#: A request with at most this many steps (and read in one chunk) is processed in one go: even with every
#: detector busy on every step that stays within a few tens of milliseconds.
INLINE_STEPS = 512

#: Longest stretch of processing of a request answered on receipt before the event loop gets a turn:
#: short, because a request arriving meanwhile waits that long for its answer.
BACKLOG_SLICE_SECONDS = 0.001

#: Longest wait of the sessions API (sessions, verdicts, alerts, commands) for the requests received
#: before a call (``acknowledge: received``); after it, it answers with the state as it is.
SETTLE_SECONDS = 5.0

#: Copies of a request's bytes its processing holds besides the request itself: the decoded chunks and
#: the enriched parts for the upstream (measured: about 1 each for a request of 1.6 MB).
PROCESSING_COPIES = 2


class LargeRequests:
    """The right to handle a large request (read in chunks): one at a time, with the cyclic garbage
    collector paused meanwhile (when the service had it on)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._resume_gc = False

    async def acquire(self) -> None:
        await self._lock.acquire()
        self._resume_gc = gc.isenabled()
        gc.disable()

    def release(self) -> None:
        if self._resume_gc:
            gc.enable()
        self._lock.release()


class Refusal(Exception):
    """A request otelloop will not take; receivers turn it into a gRPC status or HTTP response.

    ``spans`` is the number of spans refused when known (the request decoded), else None.
    """

    def __init__(self, reason: RefusalReason, message: str, spans: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.spans = spans


class Accepted(NamedTuple):
    """A request taken: ``spans`` accepted, ``rejected`` refused inside it (an OTLP partial success, with
    ``message`` saying why)."""

    spans: int
    rejected: int = 0
    message: str = ""


class BearerAuth:
    """Constant-time bearer-token check. Tokens are never logged."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._tokens = [t.encode() for t in tokens if t]

    @property
    def enabled(self) -> bool:
        return bool(self._tokens)

    def check(self, header: str | None) -> bool:
        if not self._tokens:
            return True
        if not header or header[:7].lower() != "bearer ":
            return False
        given = header[7:].strip().encode()
        ok = False
        for token in self._tokens:  # compare against every token so timing does not reveal which matched
            ok |= hmac.compare_digest(given, token)
        return ok


#: A claim on sessions: (this claim, its sessions, the earlier claims to wait for).
Claim = tuple["asyncio.Future[None]", list[str], list["asyncio.Future[None]"]]


class SessionGate:
    """Keeps the requests that touch one session from being processed interleaved.

    A request claims all its sessions at once; for each, it waits for the request that claimed it last
    (if that one is not done). Claims are taken in one step without pausing, so waits always point at
    earlier claims and can never form a cycle.
    """

    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}

    @property
    def busy(self) -> bool:
        """Whether any request holds a claim (only then can a new request have to wait)."""
        return bool(self._last)

    def conflicts(self, sessions: list[str]) -> bool:
        """Whether one of these sessions is claimed."""
        last = self._last
        return any(session in last for session in sessions)

    def claim(self, sessions: list[str]) -> Claim:
        """Claim distinct sessions: (this claim, the sessions, the earlier claims to wait for)."""
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        last = self._last
        earlier: dict[int, asyncio.Future[None]] = {}
        for session in sessions:
            prev = last.get(session)
            if prev is not None:
                earlier[id(prev)] = prev
            last[session] = mine
        return mine, sessions, list(earlier.values())

    def release(self, mine: asyncio.Future[None], sessions: list[str]) -> None:
        last = self._last
        for session in sessions:
            if last.get(session) is mine:
                del last[session]
        if not mine.done():
            mine.set_result(None)


class Ingest:
    """Shared admission path of the receivers.

    Args:
        pipeline: decodes and processes requests.
        exporter: the export queue, or None in detect-only mode (spans are then dropped after detection).
        metrics: counters for received/refused spans and request durations.
        overloaded: returns a reason when the process must shed load (memory limit), else None.
        in_flight: the bytes requests in flight hold, against their budget (default: no budget).
        acknowledge: ``received`` to answer requests on receipt and process them afterwards in a
            :class:`~otelloop.receiver.backlog.Backlog`; ``processed`` to answer once processed.
        backlog_spans: with ``received``, how many spans may wait for processing before clients are asked
            to retry.
    """

    def __init__(self, pipeline: Pipeline, exporter: Exporter | None, metrics: Metrics,
                 overloaded: Callable[[], str | None] = lambda: None, in_flight: InFlight | None = None,
                 acknowledge: Literal["processed", "received"] = "processed", backlog_spans: int = 16_384) -> None:
        self.pipeline = pipeline
        self.exporter = exporter
        self.metrics = metrics
        self.overloaded = overloaded
        self.in_flight = in_flight if in_flight is not None else InFlight()
        self.draining = False
        self.gate = SessionGate()
        self._large: LargeRequests | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._throttled = ThrottledLog(log)
        #: requests answered on receipt, processed in arrival order (``acknowledge: received``), else None
        self.backlog = (Backlog(metrics.receive_backlog_requests.set) if acknowledge == "received"
                        else None)
        self.backlog_spans = backlog_spans
        #: requests whose receiver's handler is running, and requests served so far (see :meth:`serving`)
        self.serving_requests = 0
        self.served_requests = 0

    @contextlib.contextmanager
    def serving(self) -> Iterator[None]:
        """Counts a request while its receiver's handler runs, so the service can tell a moment when no
        request's objects are in use (:attr:`idle`)."""
        self.serving_requests += 1
        self.served_requests += 1
        try:
            yield
        finally:
            self.serving_requests -= 1

    @property
    def idle(self) -> bool:
        """No request is being received, processed or answered (the garbage collector may then freeze what
        survives without catching a request's objects: ``otelloop.service.Collector``)."""
        return not self.serving_requests and not self._tasks and not self.backlog

    def ticket(self) -> Ticket:
        """A ticket for a request about to be read (see :meth:`charge`)."""
        return self.in_flight.ticket()

    def charge(self, ticket: Ticket, nbytes: int, what: str) -> None:
        """Charge a request ``nbytes`` more; raises :class:`Refusal` (retryable) when the requests in flight
        would exceed their budget. ``what`` names the stage, for the log line."""
        if ticket.add(nbytes):
            return
        in_flight, budget = self.in_flight.nbytes, self.in_flight.budget() or 0
        self._throttled("in_flight", logging.WARNING,
                        f"requests in flight hold {in_flight >> 20} MiB of their {budget >> 20} MiB share of "
                        f"limits.memory_mib; refusing new requests retryably ({what} of {nbytes >> 10} KiB) "
                        "rather than dropping detector state")
        raise Refusal("backpressure", "too many bytes in flight; retry later")

    async def handle(self, data: bytes, transport: str, ticket: Ticket | None = None) -> Accepted:
        """Admit one serialised ``ExportTraceServiceRequest``; ``ticket``: the receiver's for this request
        (None: one is opened here, charged with ``data`` too)."""
        started = time.perf_counter()
        own = ticket is None
        if ticket is None:
            ticket = self.ticket()
        try:
            return await self._handle(data, transport, ticket, len(data) if own else 0)
        finally:
            if own:
                ticket.close()
            self.metrics.request_duration.labels(transport).observe(time.perf_counter() - started)

    async def wait_idle(self, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds) for requests whose processing has begun, and those answered on
        receipt, to finish; those answered on receipt and still waiting then are dropped, counted and
        logged."""
        deadline = time.monotonic() + timeout
        if self.backlog is not None:
            await self.backlog.join(timeout)
            if await self.backlog.close():
                log.error("shutdown: the requests still waiting for processing after %.0fs were dropped "
                          "(counted in otelloop_spans_export_failed_total{reason=\"shutdown\"} when they "
                          "had been answered; the others were refused retryably)", timeout)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(deadline - time.monotonic(), 0.0))

    async def settled(self) -> None:
        """Wait until the requests answered on receipt before this call are processed (at most
        :data:`SETTLE_SECONDS`), so state read next includes them; returns at once without a backlog."""
        if self.backlog is not None and len(self.backlog):
            await self.backlog.settled(SETTLE_SECONDS)

    # -- admission ---------------------------------------------------------------------------------

    async def _handle(self, data: bytes, transport: str, ticket: Ticket, received: int) -> Accepted:
        if self.draining:
            raise Refusal("backpressure", "otelloop is shutting down; retry against another replica")
        if self.backlog is not None:
            self._check_backlog()
        self.charge(ticket, received + PROCESSING_COPIES * len(data), "processing")
        exporter = self.exporter
        span_limit = exporter.max_request_bytes if exporter is not None else None
        if self.backlog is not None:
            if len(data) <= min(CHUNK_BYTES, span_limit or CHUNK_BYTES):
                return self._receive(data, transport, ticket)
            return await self._in_turn(self._process(data, transport, ticket, span_limit), ticket)
        return await self._process(data, transport, ticket, span_limit)

    def _check_backlog(self) -> None:
        """Refuse retryably, before reading the request, while the backlog holds its fill of spans (a
        request is taken whatever its size while the backlog holds fewer, so none is refused forever)."""
        assert self.backlog is not None
        waiting = self.backlog.spans
        if waiting < self.backlog_spans:
            return
        self._throttled("backlog", logging.WARNING,
                        f"detection is behind: {waiting} spans answered on receipt wait for processing "
                        f"(receiver.backlog_spans: {self.backlog_spans}); refusing new requests retryably")
        raise Refusal("backpressure", "detection is behind; retry later")

    async def _process(self, data: bytes, transport: str, ticket: Ticket, span_limit: int | None) -> Accepted:
        """Decode, check and process a request, answering once it is processed (and queued for export)."""
        if len(data) <= CHUNK_BYTES:
            decoded = self._decode_inline(data, span_limit)
            return await self._admit(decoded, transport, None, ticket)
        if self._large is None:
            self._large = LargeRequests()
        await self._large.acquire()
        try:
            decoded = await self._decode_sliced(data, span_limit)
        except BaseException:
            self._large.release()
            raise
        return await self._admit(decoded, transport, self._large, ticket)

    def _decode_inline(self, data: bytes, span_limit: int | None) -> Decoded:
        try:
            return run_steps(self.pipeline.decode_steps(data, CHUNK_BYTES, span_limit))
        except InvalidRequest as e:
            raise Refusal("invalid", str(e)) from None

    async def _decode_sliced(self, data: bytes, span_limit: int | None) -> Decoded:
        try:
            return await drive(self.pipeline.decode_steps(data, CHUNK_BYTES, span_limit))
        except InvalidRequest as e:
            raise Refusal("invalid", str(e)) from None

    def _check(self, spans: int, nbytes: int, too_large: list[tuple[Position, int]], invalid: list[str],
               transport: str) -> tuple[Accepted, Reservation | None]:
        """Checks on a request read whole, before anything changes: spans refused inside it, memory, and room
        in the export queue (reserved here). Raises :class:`Refusal`."""
        refused = _refused_inside(too_large, invalid)
        rejected = sum(count for _, count, _ in refused)
        self.metrics.spans_received.labels(transport).inc(spans + rejected)
        if refused:
            self._refuse_spans(spans, refused, transport)
        shed = self.overloaded()
        if shed is not None:
            raise Refusal("backpressure", shed, spans)
        reservation = None
        if self.exporter is not None:
            reservation = self.exporter.reserve(spans, nbytes)
            if reservation is None:
                raise Refusal("backpressure", "export queue is full; retry later", spans)
        return Accepted(spans, rejected, "; ".join(message for _, _, message in refused)), reservation

    async def _admit(self, decoded: Decoded, transport: str, large: LargeRequests | None,
                     ticket: Ticket) -> Accepted:
        """Checks on a decoded request, then its processing (in one go, or in a task of its own).

        ``large`` is held by this request if it is a large one; it is released when processing ends. So is
        ``ticket``: processing in a task of its own holds it until that task ends.
        """
        handed_over = False
        try:
            accepted, reservation = self._check(decoded.spans, len(decoded.data), decoded.too_large,
                                                decoded.invalid, transport)
            if (large is None and len(decoded.steps) <= INLINE_STEPS
                    and not (self.gate.busy and self.gate.conflicts(decoded.sessions()))):
                await self._commit_inline(decoded, reservation)
                return accepted
            claim = self.gate.claim(decoded.sessions())  # now: a request admitted after this one waits for it
            ticket.hold()
            task = asyncio.ensure_future(self._commit(decoded, reservation, large, claim, ticket))
            handed_over = True
            self._tasks.add(task)
            task.add_done_callback(self._task_done)
            await asyncio.shield(task)
            return accepted
        finally:
            if large is not None and not handed_over:
                large.release()

    def _refuse_spans(self, spans: int, refused: list[tuple[RefusalReason, int, str]], transport: str) -> None:
        """Spans too large for the upstream even alone, or with invalid ids: refused inside an otherwise
        accepted request (an OTLP partial success), or the whole request when it holds nothing else (then
        with the last reason, counted by the receiver with the refusal)."""
        for reason, count, message in refused:
            self._throttled(reason, logging.WARNING, f"refused {count} spans to a client over {transport}: "
                                                     f"{message}")
        *counted, (last_reason, last_count, _) = refused
        if spans != 0:
            counted.append((last_reason, last_count, ""))
        for reason, count, _ in counted:
            self.metrics.spans_refused.labels(transport, reason).inc(count)
        if spans == 0:
            raise Refusal(last_reason, "; ".join(message for _, _, message in refused), last_count)

    # -- answered on receipt (acknowledge: received) ------------------------------------------------

    def _receive(self, data: bytes, transport: str, ticket: Ticket) -> Accepted:
        """Read and check a request, queue its processing behind the requests received before it, and
        answer: the reader's pass is all the answer waits for."""
        assert self.backlog is not None
        try:
            scanned = self.pipeline.read(data)
        except InvalidRequest as e:
            raise Refusal("invalid", str(e)) from None
        accepted, reservation = self._check(scanned.spans, len(scanned.data), [], scanned.invalid, transport)
        ticket.hold()
        self.backlog.add(_Received(self, scanned.data, scanned.spans, reservation, ticket))
        return accepted

    async def _in_turn(self, processing: Coroutine[Any, Any, Accepted], ticket: Ticket) -> Accepted:
        """Run a request that is answered only once processed (one read in chunks) in its turn behind those
        answered on receipt, and answer with its outcome."""
        assert self.backlog is not None
        job = _InTurn(processing, ticket)
        ticket.hold()  # the processing may outlive the handler, whose receiver closes the ticket
        self.backlog.add(job)
        return await job.outcome

    # -- processing --------------------------------------------------------------------------------

    async def _commit_inline(self, decoded: Decoded, reservation: Reservation | None) -> None:
        """Process a small request without pausing (nothing else runs meanwhile), then queue it (a
        persistent queue writes it to disk with the loop free)."""
        try:
            processed = self.pipeline.process(decoded)
            if self.exporter is not None:
                parts = run_steps(self.exporter.prepare(processed))
                await self._offer(parts, processed.spans, reservation)
        finally:
            if reservation is not None and self.exporter is not None:
                self.exporter.release(reservation)

    async def _commit(self, decoded: Decoded, reservation: Reservation | None, large: LargeRequests | None,
                      claim: Claim, ticket: Ticket) -> None:
        """Process and queue a request in slices, holding its sessions (runs as a task of its own)."""
        mine, sessions, earlier = claim
        try:
            if earlier:
                await asyncio.gather(*earlier)
            processed = await drive(self.pipeline.process_steps(decoded))
            if self.exporter is not None:
                parts = await drive(self.exporter.prepare(processed))
                await self._offer(parts, processed.spans, reservation)
            await drive(_forget(decoded.steps, processed.findings))
            await drive(_forget(processed.parts, decoded.chunks or [], batch=1))  # megabytes each
        finally:
            ticket.close()
            self.gate.release(mine, sessions)
            if reservation is not None and self.exporter is not None:
                self.exporter.release(reservation)
            if large is not None:
                large.release()

    async def _offer(self, parts: list[tuple[bytes, int]], spans: int,
                     reservation: Reservation | None) -> None:
        assert self.exporter is not None
        if not await self.exporter.offer_parts_async(parts, reservation):
            # Room was reserved at admission, so only shutdown or a storage error of the persistent queue
            # gets here. The data is not safe, so the client must retry: success would be a lie.
            log.error("export queue could not store an admitted request; the client is asked to retry")
            raise Refusal("backpressure", "export queue could not store the request; retry later", spans)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        error = None if task.cancelled() else task.exception()
        if error is not None and not isinstance(error, Refusal):
            log.error("processing a request failed", exc_info=error)

    def aborted(self, transport: str, reason: str = "client_gone", detail: str = "") -> None:
        """Count a request abandoned before it was read whole, with one log line now and then (never a
        traceback: a client hanging up is not otelloop's error)."""
        self.metrics.requests_aborted.labels(transport, reason).inc()
        what = "a client went away before its request was complete" if reason == "client_gone" else (
            "a client was too slow sending its request")
        self._throttled(f"aborted:{reason}", logging.INFO if reason == "client_gone" else logging.WARNING,
                        f"{what} ({transport}{': ' + detail if detail else ''}); the request was dropped "
                        "unacknowledged")

    def refused(self, refusal: Refusal, transport: str) -> None:
        """Count a refusal; spans of a request that did not decode are counted as one."""
        self.metrics.spans_refused.labels(transport, refusal.reason).inc(
            refusal.spans if refusal.spans is not None else 1)


class _Received:
    """The processing of a request answered on receipt (a :class:`~otelloop.receiver.backlog.Job`).

    It holds the request's bytes only (without the spans refused for invalid ids), not what the reader
    made of them at receipt: the reader runs again in its turn (about 2 µs a span), which keeps a waiting
    request at the size it came in and gives the garbage collector nothing to visit while it waits.
    """

    def __init__(self, ingest: Ingest, data: bytes, spans: int, reservation: Reservation | None,
                 ticket: Ticket) -> None:
        self.ingest = ingest
        self.data = data
        self.reservation = reservation
        self.ticket = ticket
        self.spans = spans

    async def run(self) -> None:
        """Map, detect, enrich and queue the request. It was promised delivery, so if its processing fails
        it goes upstream as it came; what even the queue will not take (only at shutdown) is counted as
        lost and logged."""
        exporter, pipeline = self.ingest.exporter, self.ingest.pipeline
        try:
            try:
                decoded = await drive(pipeline.map_scan(pipeline.read(self.data)), BACKLOG_SLICE_SECONDS)
                processed = await drive(pipeline.process_steps(decoded), BACKLOG_SLICE_SECONDS)
                parts = (await drive(exporter.prepare(processed), BACKLOG_SLICE_SECONDS)
                         if exporter is not None else [])
            except Exception:
                log.exception("processing a request acknowledged on receipt failed; forwarding it as it came")
                parts = [(self.data, self.spans)]
            if exporter is not None and not await exporter.offer_parts_async(parts, self.reservation):
                self._lost("the export queue refused them")
        except asyncio.CancelledError:
            self._lost("shutdown came while they were processed")
            raise
        finally:
            self._give_back()

    def drop(self) -> None:
        self._lost("shutdown came before they were processed")
        self._give_back()

    def _lost(self, why: str) -> None:
        self.ingest.metrics.spans_export_failed.labels("shutdown").inc(self.spans)
        log.error("%d spans acknowledged on receipt were dropped: %s", self.spans, why)

    def _give_back(self) -> None:
        self.ticket.close()
        exporter = self.ingest.exporter
        if self.reservation is not None and exporter is not None:
            exporter.release(self.reservation)


class _InTurn:
    """A request answered only once processed, waiting for its turn in the backlog (a
    :class:`~otelloop.receiver.backlog.Job`); its handler awaits :attr:`outcome`."""

    spans = 0  # not known before it is read

    def __init__(self, processing: Coroutine[Any, Any, Accepted], ticket: Ticket) -> None:
        self.processing = processing
        self.ticket = ticket
        self.outcome: asyncio.Future[Accepted] = asyncio.get_running_loop().create_future()

    async def run(self) -> None:
        outcome = self.outcome
        try:
            if outcome.done():  # its handler was cancelled while it waited (a gRPC client went away)
                self.processing.close()
                return
            result = await self.processing
        except asyncio.CancelledError:  # shutdown; processing already begun goes on in its own task
            self._refuse()
            raise
        except BaseException as e:
            if not outcome.done():
                outcome.set_exception(e)
        else:
            if not outcome.done():
                outcome.set_result(result)
        finally:
            self.ticket.close()

    def drop(self) -> None:
        self.processing.close()
        self.ticket.close()
        self._refuse()

    def _refuse(self) -> None:
        """Its client is told to send it again (it was not answered, so nothing was promised)."""
        if not self.outcome.done():
            self.outcome.set_exception(Refusal("backpressure", "otelloop is shutting down; retry against "
                                                               "another replica"))


def _refused_inside(too_large: list[tuple[Position, int]], invalid: list[str]
                    ) -> list[tuple[RefusalReason, int, str]]:
    """(reason, spans, message) of the spans of a request read whole that were left out of it."""
    out: list[tuple[RefusalReason, int, str]] = []
    if too_large:
        out.append(("too_large", len(too_large), _too_large_message(too_large)))
    if invalid:
        out.append(("invalid", len(invalid), _invalid_message(invalid)))
    return out


def _invalid_message(invalid: list[str]) -> str:
    """Says how many spans had invalid ids and why, most frequent reason first (a bounded text: the
    reasons are a handful of fixed forms)."""
    count = len(invalid)
    spans = "1 span has" if count == 1 else f"{count} spans have"
    reasons = ", ".join(f"{reason} ({n})" if count > 1 else reason
                        for reason, n in Counter(invalid).most_common(3))
    more = ", …" if len(set(invalid)) > 3 else ""
    return (f"{spans} invalid ids: {reasons}{more} (OTLP requires a 16-byte trace_id and an 8-byte span_id, "
            f"not all zero)")


def _too_large_message(too_large: list[tuple[Position, int]]) -> str:
    largest = max(size for _, size in too_large)
    spans = "1 span is" if len(too_large) == 1 else f"{len(too_large)} spans are"
    return (f"{spans} too large for the upstream even alone (largest {largest} bytes with its resource and "
            f"scope; exporter.max_request_mib allows fewer)")


def _forget(*lists: list[Any], batch: int = 4096) -> Generator[None, None, None]:
    """Empty large lists a slice at a time: freeing a few hundred thousand steps, or hundreds of MiB of
    enriched requests, at once takes long too."""
    for items in lists:
        while items:
            del items[-batch:]
            yield


async def drive(steps: Generator[None, None, T], slice_seconds: float = SLICE_SECONDS) -> T:
    """Run a sliced phase, letting the event loop run whenever a slice has taken ``slice_seconds``."""
    deadline = time.perf_counter() + slice_seconds
    try:
        while True:
            next(steps)
            if time.perf_counter() >= deadline:
                await asyncio.sleep(0)
                deadline = time.perf_counter() + slice_seconds
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
