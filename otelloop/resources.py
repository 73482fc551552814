"""Memory protection: refuse new requests (retryably) before the process can be killed, shed, recover.

The limit defaults to 80 % of the container's cgroup memory limit when there is one; ``limits.memory_mib:
0`` disables the guard.

Two kinds of memory compete for the limit, and each is charged only for its own bytes:

* **Requests in flight** (:class:`InFlight`): from the moment a request's body arrives until the upstream
  has it, its bytes (as received, decompressed, decoded and enriched) and the bytes the in-memory export
  queue holds. They get :data:`IN_FLIGHT_SHARE` of the memory above the idle process. A request that
  would take them over that budget is refused retryably at once, before it is decoded: a burst of large
  requests is pushed back to its clients, not paid for with detector state.
* **State**: the resident size at startup, plus the live sessions times their estimated size, plus the
  byte budgets in use by the process-wide caches (:class:`Accounting`). It gets the rest of the limit.

Resident memory (RSS) is what the kernel kills on, so it is what trips the guard, checked once a second.
When it trips, the allocator is first asked to give back what finished requests freed; if RSS is still
above the limit, the guard sheds state only when *state's own* accounted bytes exceed its share: the
caches are emptied and the least recently seen sessions dropped until state is at :data:`SHED_TO` of its
share, and no further. Otherwise (requests in flight hold the memory, or memory nothing accounts for)
nothing is dropped: new requests are refused (retryably) until RSS is back under the limit, or the
accounted memory (state plus requests in flight) is under :data:`RESUME_AT` of it with the requests in
flight down to :data:`IN_FLIGHT_RESUME` of their budget, which happens as they finish.

RSS does not shrink by itself: memory freed inside the process stays with the allocator for reuse. So
recovery is judged on the accounting. After a recovery with RSS still above the limit (memory kept for
reuse), the guard trips again when the accounted memory reaches the limit, or when RSS grows by a
further :data:`REGROW` of the limit; a recovery that leaves RSS far above everything accounted is logged.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
#: Share of the limit above the idle process that requests in flight may hold; state has the rest.
IN_FLIGHT_SHARE = 0.25
#: Shedding drops sessions until state's accounted memory is at most this fraction of its share.
SHED_TO = 0.8
#: While RSS is over the limit, requests are let in again once those in flight hold at most this
#: fraction of their budget.
IN_FLIGHT_RESUME = 0.5
#: A recovery that leaves RSS above everything accounted by this fraction of the limit is logged.
UNSEEN = 0.25
#: Requests are accepted again once the accounted memory is under this fraction of the limit.
RESUME_AT = 0.9
#: After a recovery with RSS above the limit, RSS growing by this fraction of the limit trips again.
REGROW = 0.1
#: Minimum seconds between two warnings about shedding (every shed is counted in the metrics).
SHED_LOG_INTERVAL = 60.0


def cgroup_limit_bytes() -> int | None:
    """The container memory limit, or None when there is none (or it is effectively unlimited)."""
    for path in _CGROUP_FILES:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < (1 << 60):
            return int(text)
    return None


def rss_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE
    except OSError:
        return 0


def _libc_function(name: str) -> Any:
    """A glibc function, or None elsewhere (musl, macOS)."""
    try:
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def _malloc_trim() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)``: give the free pages the allocator holds back to the system."""
    trim = _libc_function("malloc_trim")
    if trim is None:
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


release_free_memory = _malloc_trim()

#: glibc's ``mallopt`` parameter for the number of allocation arenas.
_M_ARENA_MAX = -8
#: Arenas :func:`limit_arenas` allows.
ARENAS = 2


def limit_arenas() -> None:
    """Let glibc's allocator use :data:`ARENAS` arenas instead of up to eight per core.

    Why: gRPC's threads each get an arena of their own by default, and a request's buffers freed in one
    arena are not reused by another, so resident memory under a burst of large requests peaked about 25 MiB
    higher than with two (measured with ``tests/robustness/test_memory_in_flight.py``). An operator's
    ``MALLOC_ARENA_MAX`` takes precedence. Call it before threads start.
    """
    mallopt = _libc_function("mallopt")
    if mallopt is not None and "MALLOC_ARENA_MAX" not in os.environ:
        mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        mallopt(_M_ARENA_MAX, ARENAS)


class InFlight:
    """Bytes held by requests in flight, against a budget.

    A receiver opens a :class:`Ticket` per request and charges it, stage by stage, what the request holds:
    its body as received, decompressed, then what decoding and enrichment copy. The ticket is closed once
    the request is in the export queue; from then its bytes are counted by ``queued`` (the in-memory
    export queue), until the upstream has them.

    Args:
        budget: bytes allowed, or None for no bound (the guard is off).
    """

    def __init__(self, budget: Callable[[], int | None] = lambda: None) -> None:
        self.budget = budget
        #: bytes held by the in-memory export queue (set by the service when there is one)
        self.queued: Callable[[], int] = lambda: 0
        #: bytes charged by open tickets
        self.requests = 0

    @property
    def nbytes(self) -> int:
        return self.requests + self.queued()

    def ticket(self) -> Ticket:
        return Ticket(self)


class Ticket:
    """The bytes one request holds while in flight; a context manager that gives them back on exit.

    A request that goes on being processed after its handler returned (its client went away) is
    :meth:`hold`-ed by that processing, which :meth:`close`-s it too: the bytes are given back at the last
    close.
    """

    __slots__ = ("_holders", "_owner", "nbytes")

    def __init__(self, owner: InFlight) -> None:
        self._owner = owner
        self._holders = 1
        self.nbytes = 0

    def add(self, nbytes: int) -> bool:
        """Charge ``nbytes`` more; False (and nothing charged) when that would take the requests in flight
        over their budget. A request alone in flight is always taken while the export queue is within the
        budget, so a request larger than the budget is not refused forever (requests answered on receipt
        and waiting for processing are in flight too: they are soon done)."""
        owner = self._owner
        budget = owner.budget()
        if budget is not None and nbytes > 0:
            others = owner.requests - self.nbytes
            queued = owner.queued()
            if others + queued + self.nbytes + nbytes > budget and (others > 0 or queued > budget):
                return False
        self.nbytes += nbytes
        owner.requests += nbytes
        return True

    def hold(self) -> None:
        self._holders += 1

    def close(self) -> None:
        self._holders -= 1
        if self._holders <= 0 and self.nbytes:
            self._owner.requests -= self.nbytes
            self.nbytes = 0

    def __enter__(self) -> Ticket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Accounting:
    """What the guard needs from the service: state's accounted bytes and how to shed it.

    Args:
        sessions: number of live sessions.
        session_bytes: estimated bytes of one live session.
        caches_bytes: bytes held by the process-wide caches.
        clear_caches: empty them.
        drop_sessions: evict this many of the least recently seen sessions; returns how many went.
        baseline: resident bytes of the idle process (measured at startup).
    """

    def __init__(self, sessions: Callable[[], int], session_bytes: Callable[[], int],
                 caches_bytes: Callable[[], int], clear_caches: Callable[[], int],
                 drop_sessions: Callable[[int], int], baseline: int) -> None:
        self.sessions = sessions
        self.session_bytes = session_bytes
        self.caches_bytes = caches_bytes
        self.clear_caches = clear_caches
        self.drop_sessions = drop_sessions
        self.baseline = baseline

    def accounted(self) -> int:
        """State's bytes: the idle process, the sessions and the caches (requests in flight excluded)."""
        return self.baseline + self.sessions() * self.session_bytes() + self.caches_bytes()


class MemoryGuard:
    """Tracks resident memory against a limit; :meth:`check` runs periodically, not per request.

    Args:
        limit_mib: ``limits.memory_mib`` (None: from the cgroup limit; 0: off).
        accounting: how to measure and shed state; None: only refuse while RSS is over the limit.
        on_shed: called with (sessions dropped, cache bytes freed) each time the guard drops either.
    """

    def __init__(self, limit_mib: float | None, accounting: Accounting | None = None,
                 on_shed: Callable[[int, int], None] | None = None) -> None:
        self.limit_mib = limit_mib
        self.accounting = accounting
        self.on_shed = on_shed
        self._cgroup: int | None = None
        #: requests in flight, against :meth:`in_flight_budget`
        self.in_flight = InFlight(self.in_flight_budget)
        self._over = False
        #: RSS at the last recovery when it was still above the limit (memory kept for reuse)
        self._floor = 0
        self._hopeless_logged = False
        self._last_log = self._last_unseen_log = -SHED_LOG_INTERVAL
        #: trips since the last warning, and whether this episode was warned about
        self._trips = 0
        self._warned = False

    @property
    def limit_bytes(self) -> int:
        if self.limit_mib is None:
            if self._cgroup is None:  # read once: requests in flight ask for their budget on every request
                self._cgroup = cgroup_limit_bytes() or 0
            return int(self._cgroup * 0.8)
        return int(self.limit_mib * (1 << 20))

    def in_flight_budget(self) -> int | None:
        """Bytes requests in flight may hold: :data:`IN_FLIGHT_SHARE` of the limit above the idle process
        (None without a limit)."""
        limit = self.limit_bytes
        if not limit:
            return None
        baseline = self.accounting.baseline if self.accounting is not None else 0
        return max(0, int(IN_FLIGHT_SHARE * (limit - baseline)))

    def state_share(self, limit: int) -> int:
        """Bytes state may hold, the idle process included: the limit less the requests' budget."""
        return limit - (self.in_flight_budget() or 0)

    def check(self) -> None:
        limit = self.limit_bytes
        if not limit:
            self._over, self._floor = False, 0
            return
        if not self._over:
            rss = rss_bytes()
            if rss <= limit:
                self._floor = 0
                return
            if rss <= self._floor + REGROW * limit and self._accounted() <= limit:
                return  # RSS stays up after a recovery: the live data otelloop accounts for decides
            release_free_memory()  # what finished requests freed may be all of the excess
            rss = rss_bytes()
            if rss <= limit:
                return
            self._over = True
            self._shed(limit, rss)
        elif not self._resumable(limit):
            release_free_memory()
            self._shed(limit, None)  # still over: shed again where state calls for it
        if self._resumable(limit):
            self._over = False
            rss = rss_bytes()
            self._floor = rss if rss > limit else 0
            if self._floor:
                self._report_unseen(limit, rss)
            if self._warned:
                self._warned = False
                log.info("memory back under the limit (resident %d MiB, accounted %d MiB): accepting requests "
                         "again", rss >> 20, self._accounted() >> 20)

    def _accounted(self) -> int:
        """State and requests in flight (RSS when there is no accounting)."""
        if self.accounting is None:
            return rss_bytes()
        return self.accounting.accounted() + self.in_flight.nbytes

    def _resumable(self, limit: int) -> bool:
        """RSS is under the limit; or the accounting is under :data:`RESUME_AT` of it and the requests in flight
        have let go of at least half their budget (RSS over the limit says memory costs more than accounted,
        so fewer requests are let in than the budget allows)."""
        if rss_bytes() <= limit:
            return True
        if self.accounting is None or self._accounted() > RESUME_AT * limit:
            return False
        return self.in_flight.nbytes <= (self.in_flight_budget() or 0) * IN_FLIGHT_RESUME

    def _report_unseen(self, limit: int, rss: int) -> None:
        """A recovery with RSS still above the limit and far above everything accounted: memory nothing
        accounts for (or kept by the allocator). It is said, not shed: sessions go only for their own bytes."""
        unseen = rss - self._accounted()
        now = time.monotonic()
        if unseen > UNSEEN * limit and now - self._last_unseen_log >= SHED_LOG_INTERVAL:
            self._last_unseen_log = now
            log.warning("resident memory %d MiB stays above limits.memory_mib (%d MiB) with %d MiB more than "
                        "otelloop accounts for (state and requests in flight): memory the allocator keeps for "
                        "reuse, or that the accounting does not see; if it keeps growing, lower "
                        "state.max_sessions or raise the limit", rss >> 20, limit >> 20, unseen >> 20)

    def _shed(self, limit: int, tripped_at: int | None) -> None:
        """Shed what state's own bytes call for; ``tripped_at``: the RSS that just tripped the guard (the
        one time this logs), None on a further check of the same episode."""
        acc = self.accounting
        dropped = freed = sessions = per = 0
        share = self.state_share(limit)
        in_flight = self.in_flight.nbytes
        state = acc.accounted() if acc is not None else 0
        if acc is not None:
            sessions = acc.sessions()
            per = acc.session_bytes()
            if state > share:  # state's own bytes call for shedding
                freed = acc.clear_caches()
                excess = acc.accounted() - (acc.baseline + SHED_TO * (share - acc.baseline))
                count = math.ceil(excess / per) if per and excess > 0 else 0
                dropped = acc.drop_sessions(count) if count else 0
            if dropped or freed:
                gc.collect(1)  # what is left of dropped sessions is freed by reference counting
                release_free_memory()
                if self.on_shed is not None:
                    self.on_shed(dropped, freed)
            if sessions == 0 and not self._hopeless_logged and acc.accounted() > RESUME_AT * limit:
                self._hopeless_logged = True
                log.error("limits.memory_mib (%d MiB) is below what otelloop needs with no session at all "
                          "(accounted %d MiB): raise it", limit >> 20, acc.accounted() >> 20)
        if tripped_at is None:
            return
        self._trips += 1
        now = time.monotonic()
        if now - self._last_log < SHED_LOG_INTERVAL:
            return
        earlier = f" ({self._trips - 1} more times since the last such message)" if self._trips > 1 else ""
        self._last_log, self._trips, self._warned = now, 0, True
        if state > share:
            what = (f"state held more than its share ({share >> 20} MiB): shed {dropped} of {sessions} sessions "
                    f"(the least recently seen, about {per} bytes each) and {freed >> 10} KiB of caches")
            advice = "Lower state.max_sessions or raise the limit"
        else:
            what = (f"state holds {state >> 20} MiB of its {share >> 20} MiB share, so no session was dropped; "
                    f"requests in flight hold {in_flight >> 20} MiB")
            advice = "If this persists, raise the limit or add replicas"
        log.warning("resident memory %d MiB above limits.memory_mib (%d MiB): %s%s; resident now %d MiB. New "
                    "requests are refused (retryably) while the accounted memory (state and requests in flight, "
                    "now %d MiB) is above %d MiB. %s", tripped_at >> 20, limit >> 20, what, earlier,
                    rss_bytes() >> 20, self._accounted() >> 20, int(RESUME_AT * limit) >> 20, advice)

    def overloaded(self) -> str | None:
        return "memory limit reached; retry later" if self._over else None
