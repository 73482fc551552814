"""Bounded per-session state (SPEC §8): least-recently-seen eviction and an idle timeout.

The store is an ``OrderedDict`` kept in last-seen order, so touching a session, evicting the least
recently seen one and sweeping idle ones are all O(1) per session affected.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any

from otelloop.bounds import MAX_TEXT_BYTES, cut, deep_size
from otelloop.model import VERDICT_RANK, Finding

log = logging.getLogger(__name__)

#: How many recent findings a session remembers for the sessions API.
RECENT_FINDINGS = 5
_NO_VOTES: dict[str, tuple[str, str, str]] = {}
#: Minimum seconds between two advising log lines about evictions.
EVICTION_LOG_INTERVAL = 300.0
#: Sessions measured to estimate the bytes of one (see :meth:`SessionStore.session_bytes`), and for
#: how many seconds an estimate is reused.
SIZE_SAMPLE = 64
SIZE_ESTIMATE_TTL = 5.0


class Session:
    """Everything otelloop remembers about one session; its size does not grow with its length."""

    __slots__ = (
        "id", "agent", "service", "first_start_ns", "last_end_ns", "last_seen", "steps", "cost_usd",
        "input_tokens", "output_tokens", "states", "votes", "stop_hold", "paused", "verdict", "reason",
        "message", "findings", "loop_score", "entropy_score",
    )

    def __init__(self, session_id: str, now: float) -> None:
        self.id = session_id
        self.agent = ""
        self.service = ""
        self.first_start_ns = 0
        self.last_end_ns = 0
        self.last_seen = now
        self.steps = 0
        self.cost_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        #: detector name -> that detector's state object
        self.states: dict[str, Any] = {}
        #: detector name -> (verdict, reason, message) for detectors currently raising the verdict
        #: (None while none does: most sessions never hold a vote)
        self.votes: dict[str, tuple[str, str, str]] | None = None
        #: (reason, message) of a ``stop`` that holds until an operator resumes
        self.stop_hold: tuple[str, str] | None = None
        self.paused = False
        self.verdict = "continue"
        self.reason = ""
        self.message = ""
        #: the last few findings as (detector, event, severity, message): compact, no attribute dicts
        self.findings: tuple[tuple[str, str, str, str], ...] = ()
        #: latest trajectory and entropy scores, for the sessions API
        self.loop_score: float | None = None
        self.entropy_score: float | None = None

    def remember(self, finding: Finding) -> None:
        """Keep the finding for the sessions API, its message cut to ``bounds.MAX_TEXT_BYTES``."""
        entry = (finding.detector, finding.event, finding.severity, cut(finding.message, MAX_TEXT_BYTES))
        self.findings = (*self.findings, entry)[-RECENT_FINDINGS:]

    def apply_votes(self, votes: dict[str, tuple[str, str, str]]) -> None:
        """Fold detector votes into the session verdict (SPEC §5: the most severe wins)."""
        for detector, vote in votes.items():
            if vote[0] == "continue":
                if self.votes:
                    self.votes.pop(detector, None)
                    if not self.votes:
                        self.votes = None
            else:
                if self.votes is None:
                    self.votes = {}
                vote = (vote[0], cut(vote[1], MAX_TEXT_BYTES), cut(vote[2], MAX_TEXT_BYTES))
                self.votes[detector] = vote
                if vote[0] == "stop" and self.stop_hold is None:
                    self.stop_hold = (vote[1], vote[2])
        self.recompute()

    def recompute(self) -> None:
        if self.paused:
            self.verdict, self.reason, self.message = "paused", "paused by an operator", ""
            return
        if self.stop_hold is not None:
            self.verdict, (self.reason, self.message) = "stop", self.stop_hold
            return
        best = ("continue", "", "")
        for vote in (self.votes or _NO_VOTES).values():
            if VERDICT_RANK[vote[0]] > VERDICT_RANK[best[0]]:
                best = vote
        self.verdict, self.reason, self.message = best

    def pause(self) -> None:
        self.paused = True
        self.recompute()

    def resume(self) -> None:
        """Lift an operator pause and any held ``stop``; detectors raise the verdict again if still looping."""
        self.paused = False
        self.stop_hold = None
        self.votes = None
        self.recompute()


class SessionStore:
    """Sessions by id, bounded by ``max_sessions`` and ``idle_timeout``.

    Args:
        max_sessions: live sessions kept; the least recently seen is evicted beyond it.
        idle_timeout: seconds after which an unseen session is dropped by :meth:`sweep`.
        on_evict: called with ``(session, reason)`` for every eviction (``capacity`` or ``idle``).
        clock: monotonic clock, injectable for tests.
    """

    def __init__(self, max_sessions: int, idle_timeout: float,
                 on_evict: Callable[[Session, str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._on_evict = on_evict
        self._clock = clock
        self._last_capacity_log = -EVICTION_LOG_INTERVAL
        self.evicted = {"capacity": 0, "idle": 0, "memory": 0}
        self._size_estimate = 0
        self._size_checked = -SIZE_ESTIMATE_TTL

    def __len__(self) -> int:
        return len(self._sessions)

    def __iter__(self) -> Iterator[Session]:
        return iter(list(self._sessions.values()))

    def get(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def touch(self, session_id: str) -> Session:
        """The session with this id, created if new, marked as the most recently seen."""
        now = self._clock()
        sessions = self._sessions
        session = sessions.get(session_id)
        if session is None:
            session = Session(session_id, now)
            sessions[session_id] = session
            if len(sessions) > self.max_sessions:
                self._evict_capacity(now)
        else:
            session.last_seen = now
            sessions.move_to_end(session_id)
        return session

    def _evict_capacity(self, now: float) -> None:
        while len(self._sessions) > self.max_sessions:
            _, old = self._sessions.popitem(last=False)
            self._evicted(old, "capacity")
        if now - self._last_capacity_log >= EVICTION_LOG_INTERVAL:
            self._last_capacity_log = now
            log.warning(
                "session state is full (state.max_sessions=%d): evicting the least recently seen sessions; "
                "their loops restart from zero. Raise state.max_sessions, lower state.idle_timeout, or add "
                "replicas behind a trace-ID load balancer", self.max_sessions)

    def _evicted(self, session: Session, reason: str) -> None:
        self.evicted[reason] += 1
        if self._on_evict is not None:
            self._on_evict(session, reason)

    def sweep(self) -> int:
        """Drop sessions idle longer than ``idle_timeout``; returns how many were dropped."""
        deadline = self._clock() - self.idle_timeout
        sessions = self._sessions
        dropped = 0
        while sessions:
            oldest = next(iter(sessions.values()))
            if oldest.last_seen > deadline:
                break
            sessions.popitem(last=False)
            self._evicted(oldest, "idle")
            dropped += 1
        return dropped

    def shed(self, count: int) -> int:
        """Evict the ``count`` least recently seen sessions (reason ``memory``); returns how many went."""
        sessions = self._sessions
        dropped = 0
        while sessions and dropped < count:
            _, old = sessions.popitem(last=False)
            self._evicted(old, "memory")
            dropped += 1
        return dropped

    def session_bytes(self, sample: int = SIZE_SAMPLE) -> int:
        """Estimated bytes per live session: the mean deep size of up to ``sample`` of them, taken at
        even intervals from least to most recently seen (0 when there are none).

        An upper estimate (names shared between sessions count in each); O(number of sessions) to pick
        the sample, so it is meant for the memory guard and scrapes, not the hot path, and it is reused
        for :data:`SIZE_ESTIMATE_TTL` seconds.
        """
        n = len(self._sessions)
        if not n:
            return 0
        now = self._clock()
        if now - self._size_checked < SIZE_ESTIMATE_TTL and self._size_estimate:
            return self._size_estimate
        picked = list(itertools.islice(self._sessions.values(), 0, None, max(1, n // sample)))[:sample]
        self._size_estimate = sum(deep_size(s) for s in picked) // len(picked)
        self._size_checked = now
        return self._size_estimate

    def resize(self, max_sessions: int, idle_timeout: float) -> None:
        """Apply new bounds (config reload); shrinking evicts immediately."""
        self.max_sessions = max_sessions
        self.idle_timeout = idle_timeout
        if len(self._sessions) > max_sessions:
            self._evict_capacity(self._clock())
