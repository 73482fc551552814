"""Memory protection: refuse new requests (retryably) before the process can be killed, shed, recover.

The limit defaults to 80 % of the container's cgroup memory limit when there is one, leaving room for
requests in flight; ``limits.memory_mib: 0`` disables the guard.

Resident memory (RSS) is what the kernel kills on, so it is what trips the guard. But RSS does not
shrink by itself: memory freed inside the process stays with the allocator for reuse. So recovery is
judged on otelloop's *accounted* memory instead — the resident size at startup, plus the live sessions
times their estimated size, plus the byte budgets in use by the process-wide caches. When the guard
trips it sheds: the caches are emptied and the least recently seen sessions are dropped until the
accounted memory is at most :data:`SHED_TO` of the limit (and at least :data:`SHED_MIN` of the sessions,
for memory the accounting cannot see); freed memory is handed back to the system where the allocator
allows. Requests are accepted again as soon as RSS is under the limit or the accounted memory is under
:data:`RESUME_AT` of it. After a recovery with RSS still above the limit (memory kept for reuse), the
guard trips again when the accounted memory reaches the limit, or when RSS grows by a further
:data:`REGROW` of the limit (memory the accounting does not see).
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

log = logging.getLogger(__name__)

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")
#: Shedding drops sessions until the accounted memory is at most this fraction of the limit.
SHED_TO = 0.8
#: ... and drops at least this fraction of the live sessions.
SHED_MIN = 0.1
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


def _malloc_trim() -> Callable[[], object]:
    """glibc's ``malloc_trim(0)``: give the free pages the allocator holds back to the system."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


release_free_memory = _malloc_trim()


class Accounting:
    """What the guard needs from the service: accounted bytes and how to shed.

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
        return self.baseline + self.sessions() * self.session_bytes() + self.caches_bytes()


class MemoryGuard:
    """Tracks resident memory against a limit; :meth:`check` runs periodically, not per request.

    Args:
        limit_mib: ``limits.memory_mib`` (None: from the cgroup limit; 0: off).
        accounting: how to measure and shed; None: only refuse while RSS is over the limit.
        on_shed: called with (sessions dropped, cache bytes freed) each time the guard sheds.
    """

    def __init__(self, limit_mib: float | None, accounting: Accounting | None = None,
                 on_shed: Callable[[int, int], None] | None = None) -> None:
        self.limit_mib = limit_mib
        self.accounting = accounting
        self.on_shed = on_shed
        self._over = False
        #: RSS at the last recovery when it was still above the limit (memory kept for reuse)
        self._floor = 0
        self._hopeless_logged = False
        self._last_log = -SHED_LOG_INTERVAL
        #: trips since the last warning, and whether this episode was warned about
        self._trips = 0
        self._warned = False

    @property
    def limit_bytes(self) -> int:
        if self.limit_mib is None:
            cg = cgroup_limit_bytes()
            return int(cg * 0.8) if cg else 0
        return int(self.limit_mib * (1 << 20))

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
            self._over = True
            self._shed(limit, rss)
        elif not self._resumable(limit):
            self._shed(limit, None)  # still over: shed again, a little more each period
        if self._resumable(limit):
            self._over = False
            rss = rss_bytes()
            self._floor = rss if rss > limit else 0
            if self._warned:
                self._warned = False
                log.info("memory back under the limit (resident %d MiB, accounted %d MiB): accepting requests "
                         "again", rss >> 20, self._accounted() >> 20)

    def _accounted(self) -> int:
        return self.accounting.accounted() if self.accounting is not None else rss_bytes()

    def _resumable(self, limit: int) -> bool:
        if rss_bytes() <= limit:
            return True
        return self.accounting is not None and self._accounted() <= RESUME_AT * limit

    def _shed(self, limit: int, tripped_at: int | None) -> None:
        """Empty the caches and drop the oldest sessions; ``tripped_at``: the RSS that just tripped the
        guard (the one time this logs), None on a further shed of the same episode."""
        acc = self.accounting
        dropped = freed = sessions = per = 0
        if acc is not None:
            freed = acc.clear_caches()
            sessions = acc.sessions()
            per = acc.session_bytes()
            excess = acc.accounted() - SHED_TO * limit
            count = max(math.ceil(excess / per) if per and excess > 0 else 0, math.ceil(SHED_MIN * sessions))
            dropped = acc.drop_sessions(count) if count else 0
            if dropped or freed:
                gc.collect(1)  # what is left of dropped sessions is freed by reference counting
                release_free_memory()
            if self.on_shed is not None and (dropped or freed or tripped_at is not None):
                self.on_shed(dropped, freed)
            if sessions == 0 and not self._hopeless_logged and self._accounted() > RESUME_AT * limit:
                self._hopeless_logged = True
                log.error("limits.memory_mib (%d MiB) is below what otelloop needs with no session at all "
                          "(accounted %d MiB): raise it", limit >> 20, self._accounted() >> 20)
        if tripped_at is None:
            return
        self._trips += 1
        now = time.monotonic()
        if now - self._last_log < SHED_LOG_INTERVAL:
            return
        earlier = f" ({self._trips - 1} more times since the last such message)" if self._trips > 1 else ""
        self._last_log, self._trips, self._warned = now, 0, True
        log.warning("resident memory %d MiB above limits.memory_mib (%d MiB): shed %d of %d sessions (the "
                    "least recently seen, about %d bytes each) and %d KiB of caches%s; resident now %d MiB, "
                    "accounted %d MiB. New requests are refused (retryably) while the accounted memory is "
                    "above %d MiB. Lower state.max_sessions or raise the limit", tripped_at >> 20,
                    limit >> 20, dropped, sessions, per, freed >> 10, earlier, rss_bytes() >> 20,
                    self._accounted() >> 20, int(RESUME_AT * limit) >> 20)

    def overloaded(self) -> str | None:
        return "memory limit reached; retry later" if self._over else None
