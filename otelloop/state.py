"""Bounded per-session state (docs/deploy.md#memory): least-recently-seen eviction and an idle timeout.

The store is an ``OrderedDict`` kept in last-seen order, so touching a session, evicting the least
recently seen one and sweeping idle ones are all O(1) per session affected. Two small indexes serve the
sessions API and the console without scanning every session: the sessions whose verdict is not
``continue`` (most severe first is "these, sorted, then the rest in last-seen order") and the sessions
with an alerting finding, in the order of their latest one.

What a session remembers for people (finding messages and evidence, verdict messages, the calls its
findings were raised on) is redacted with :func:`otelloop.redact.redact` when it is remembered. The
argument and result excerpts of its recent steps are only cut when kept, and redacted when shown (see
:func:`push_recent`): redacting every step would cost more than detecting on it.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import struct
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from itertools import islice
from operator import attrgetter
from typing import Any, TypeVar

from otelloop.bounds import deep_size, truncate
from otelloop.delivery import SeenSpans
from otelloop.model import VERDICT_RANK, AttrValue, Finding, Step
from otelloop.redact import redact

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How many recent findings a session remembers for the sessions API (one entry per detector and event,
#: with how many times it was reported).
RECENT_FINDINGS = 5
#: How many verdict changes a session remembers.
VERDICT_HISTORY = 8
#: Longest remembered finding message, verdict message and verdict reason, in characters (redacted).
FINDING_MESSAGE_CHARS = 600
VERDICT_MESSAGE_CHARS = 600
REASON_CHARS = 200
#: Longest agent, service or environment name shown (redacted on the way out).
NAME_CHARS = 200
#: Evidence kept per remembered finding: at most this many attributes, each value cut to this length.
EVIDENCE_ITEMS = 10
EVIDENCE_CHARS = 160
#: How many recent steps a session remembers for the console, and the longest step name kept.
RECENT_STEPS = 20
RECENT_NAME_CHARS = 64
#: Longest argument or result excerpt kept per recent step and per remembered finding (redacted).
EXCERPT_CHARS = 200
EXCERPT_BYTES = 256
#: Severities that put a session in the alerts index (``info`` does not), and how many sessions it keeps.
ALERT_SEVERITIES = frozenset({"warn", "loop", "stop"})
ALERTS_KEPT = 1000
#: What the verdict endpoint tells the agent of a paused session.
PAUSED_MESSAGE = "An operator paused this session to inspect it. Do not start another step until it is resumed."
_NO_VOTES: dict[str, tuple[str, str, str]] = {}
#: Minimum seconds between two advising log lines about evictions.
EVICTION_LOG_INTERVAL = 300.0
#: Sessions measured to estimate the bytes of one (see :meth:`SessionStore.session_bytes`), and for
#: how many seconds an estimate is reused.
SIZE_SAMPLE = 64
SIZE_ESTIMATE_TTL = 5.0
#: Sessions looked at between two chances for the event loop to run, when a list is ranked in slices.
RANK_BATCH = 1024
#: detector name → its place in a session's list of detector states (see :func:`slot`)
_SLOTS: dict[str, int] = {}


def slot(detector: str) -> int:
    """The place of ``detector``'s state in every session's list of detector states, given on first ask.

    Why a list and not a dict per session: a list of a few states costs a third of a dict of them, and
    there is one per session. A name keeps its place for the life of the process (a reconfigured
    engine finds its detectors' states where they were). The store owns this layout; the detectors
    know nothing of it.
    """
    place = _SLOTS.get(detector)
    if place is None:
        place = _SLOTS[detector] = len(_SLOTS)
    return place


class Session:
    """Everything otelloop remembers about one session; its size does not grow with its length."""

    __slots__ = (
        "id", "agent", "service", "environment", "first_start_ns", "last_end_ns", "last_seen", "steps", "cost_usd",
        "input_tokens", "output_tokens", "states", "votes", "stop_hold", "paused", "verdict", "reason",
        "message", "findings", "loop_score", "entropy_score", "recent", "history", "progress", "unjudged",
        "seen", "acked_ms", "held",
    )

    def __init__(self, session_id: str, now: float) -> None:
        self.id = session_id
        self.agent = ""
        self.service = ""
        #: the deployment environment its spans' resource names (``deployment.environment.name``); a
        #: name the mapper bounded like the service's
        self.environment = ""
        self.first_start_ns = 0
        self.last_end_ns = 0
        self.last_seen = now
        self.steps = 0
        self.cost_usd = 0.0
        self.input_tokens = 0
        self.output_tokens = 0
        #: detector states, each at its detector's place (:func:`slot`); None
        #: for a detector that has not seen a step of the session
        self.states: list[Any] = []
        #: detector name -> (verdict, reason, message) for detectors currently raising the verdict
        #: (None while none does: most sessions never hold a vote)
        self.votes: dict[str, tuple[str, str, str]] | None = None
        #: (reason, message) of a ``stop`` that holds until an operator resumes
        self.stop_hold: tuple[str, str] | None = None
        self.paused = False
        self.verdict = "continue"
        self.reason = ""
        self.message = ""
        #: the last few distinct findings as (detector, event, severity, message, time_unix_ms, count,
        #: evidence, call): redacted and bounded, newest last
        self.findings: tuple[RememberedFinding, ...] = ()
        #: latest trajectory and entropy scores, for the sessions API
        self.loop_score: float | None = None
        self.entropy_score: float | None = None
        #: the last few steps, packed (see :func:`push_recent`); None before the first
        self.recent: tuple[Any, ...] | None = None
        #: the last verdict changes as (time_unix_ms, verdict, reason), oldest first
        self.history: tuple[tuple[int, str, str], ...] = ()
        #: what the session's steps brought that was new: the progress tracker's state
        #: (``otelloop.progress.tracker``: a ProgressState, or the native tracker's record); None until a step
        self.progress: Any = None
        #: tool steps whose spans carried nothing to judge them by (no result, no error message)
        self.unjudged = 0
        #: fingerprints of the session's last step spans, to recognise one delivered again
        #: (``otelloop.delivery``); None before the first
        self.seen: SeenSpans | None = None
        #: when an operator last acknowledged the session's alerts (unix ms; 0: never): the alerts
        #: list leaves it out until a newer alerting finding
        self.acked_ms = 0
        #: steps held since the session's stop held (``otelloop.detection``: repeats no detector judged;
        #: 0 after a resume)
        self.held = 0

    def state(self, detector: str) -> Any:
        """Detector ``detector``'s state for this session, or None before its first step."""
        place = _SLOTS.get(detector)
        return self.states[place] if place is not None and place < len(self.states) else None

    def remember(self, finding: Finding, step: Step | None = None) -> None:
        """Keep a redacted, bounded copy of a finding and of the call it was raised on (``step``); a repeat
        of the same detector and event replaces the older entry and counts it."""
        count = 1
        kept = []
        for entry in self.findings:
            if entry[0] == finding.detector and entry[1] == finding.event:
                count += entry[5]
            else:
                kept.append(entry)
        entry = (finding.detector, finding.event, finding.severity, redact(finding.message, FINDING_MESSAGE_CHARS),
                 int(time.time() * 1000), count, evidence(finding.attributes), step_call(step))
        kept.append(entry)
        self.findings = tuple(kept[-RECENT_FINDINGS:])

    def apply_votes(self, votes: Mapping[str, tuple[str, str, str]]) -> None:
        """Fold detector votes into the session verdict (the most severe wins, docs/detectors.md#verdicts).

        The verdict is worked out again only when a vote or the held stop changed: a loop, stopped or
        not, repeats the same votes step after step, and the verdict already follows from them."""
        changed = False
        for detector, vote in votes.items():
            if vote[0] == "continue":
                if self.votes and self.votes.pop(detector, None) is not None:
                    changed = True
                    if not self.votes:
                        self.votes = None
            else:
                if self.votes is None:
                    self.votes = {}
                old = self.votes.get(detector)
                if old != vote:
                    # A text equal to the one kept is already in its redacted form (redaction is
                    # idempotent): a loop repeats its reason on every step while its message counts up.
                    reason, message = vote[1], vote[2]
                    if old is None or old[1] != reason:
                        reason = redact(reason, REASON_CHARS)
                    if old is None or old[2] != message:
                        message = redact(message, VERDICT_MESSAGE_CHARS)
                    vote = self.votes[detector] = (vote[0], reason, message)
                    changed = True
                if vote[0] == "stop" and self.stop_hold is None:
                    self.stop_hold = (vote[1], vote[2])
                    changed = True
        if changed:
            self.recompute()

    def recompute(self) -> None:
        before = self.verdict
        if self.paused:
            self.verdict, self.reason, self.message = "paused", "paused by an operator", PAUSED_MESSAGE
        elif self.stop_hold is not None:
            self.verdict, (self.reason, self.message) = "stop", self.stop_hold
        else:
            best = ("continue", "", "")
            for vote in (self.votes or _NO_VOTES).values():
                if VERDICT_RANK[vote[0]] > VERDICT_RANK[best[0]]:
                    best = vote
            self.verdict, self.reason, self.message = best
        if self.verdict != before:
            change = (int(time.time() * 1000), self.verdict, self.reason)
            self.history = (*self.history, change)[-VERDICT_HISTORY:]

    def pause(self) -> None:
        self.paused = True
        self.recompute()

    def resume(self) -> None:
        """Lift an operator pause and any held ``stop``; detectors raise the verdict again if still looping."""
        self.paused = False
        self.stop_hold = None
        self.votes = None
        self.held = 0
        self.recompute()


#: One remembered finding: (detector, event, severity, message, time_unix_ms, count, evidence, call), the call
#: being (tool name, arguments excerpt, result excerpt) of the step it was raised on, or None.
RememberedFinding = tuple[str, str, str, str, int, int, tuple[Any, ...], tuple[str, str, str] | None]


def evidence(attributes: dict[str, AttrValue]) -> tuple[Any, ...]:
    """A finding's event attributes as a flat, bounded, redacted ``(key, value, key, value, …)`` tuple
    (flat: half the bytes of a tuple of pairs): numbers and booleans as they are, text redacted and cut,
    lists as one redacted comma-separated text."""
    out: list[Any] = []
    for key, value in islice(attributes.items(), EVIDENCE_ITEMS):
        if isinstance(value, str):
            value = redact(value, EVIDENCE_CHARS)
        elif isinstance(value, (list, tuple)):
            value = redact(", ".join(str(v) for v in value[:8]), EVIDENCE_CHARS)
        elif isinstance(value, float):
            value = round(value, 4)
        elif not isinstance(value, (bool, int)):
            value = redact(str(value), EVIDENCE_CHARS)
        out += (key, value)
    return tuple(out)


def evidence_dict(flat: tuple[Any, ...]) -> dict[str, Any]:
    """:func:`evidence` as a mapping, keys without the ``otelloop.`` prefix."""
    return {flat[i].removeprefix("otelloop."): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def alert_summary(session: Session) -> tuple[int, int]:
    """(alerting findings counted, time_unix_ms of the latest) over the findings the session remembers."""
    count = latest = 0
    for f in session.findings:
        if f[2] in ALERT_SEVERITIES:
            count += f[5]
            latest = max(latest, f[4])
    return count, latest


_KINDS = ("tool", "llm", "system")
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}
_OUTCOMES = ("success", "error", "empty")
_OUTCOME_CODE = {o: i for i, o in enumerate(_OUTCOMES)}
_PACKED = struct.Struct("<q")


def push_recent(session: Session, steps: list[Step]) -> None:
    """Append the last of ``steps`` to the session's ring of recent steps.

    The ring is one flat tuple ``(names…, arguments…, results…, packed)``: up to :data:`RECENT_STEPS`
    names (cut and interned, so sessions running the same tools share them), as many argument and result
    excerpts (cut to :data:`EXCERPT_BYTES`; "" when the span carried none), and one bytes
    object of 8 bytes per step holding the end time in milliseconds, the kind and the outcome. A step costs
    three pointers and its excerpts, not a tuple and its header (docs/deploy.md#memory gives the bound).

    The excerpts are redacted when they are shown (:func:`recent_steps`), not here: redacting two texts
    of every step costs tens of microseconds when they do not repeat, more than the rest of the
    pipeline spends on the step. They are cut 56 characters past what is shown, so that a secret
    straddling the shown end is still recognised.
    """
    tail = steps[-RECENT_STEPS:]
    names = tuple(sys.intern(s.name if len(s.name) <= RECENT_NAME_CHARS else s.name[:RECENT_NAME_CHARS])
                  for s in tail)
    args = tuple(truncate(s.args_text[:EXCERPT_BYTES], EXCERPT_BYTES) if s.args_text else "" for s in tail)
    results = tuple(truncate(s.output_text[:EXCERPT_BYTES], EXCERPT_BYTES) if s.output_text else "" for s in tail)
    packed = b"".join(_PACKED.pack(((s.end_ns or s.start_ns) // 1_000_000) << 4
                                   | _KIND_CODE.get(s.kind, 0) << 2 | _OUTCOME_CODE.get(s.outcome, 0))
                      for s in tail)
    old = session.recent
    if old is not None and len(tail) < RECENT_STEPS:
        n = len(old[-1]) // _PACKED.size
        names = (*old[:n], *names)[-RECENT_STEPS:]
        args = (*old[n:2 * n], *args)[-RECENT_STEPS:]
        results = (*old[2 * n:3 * n], *results)[-RECENT_STEPS:]
        packed = (old[-1] + packed)[-_PACKED.size * RECENT_STEPS:]
    session.recent = (*names, *args, *results, packed)


def recent_steps(session: Session) -> list[dict[str, Any]]:
    """The session's recent steps, oldest first, as the sessions API shows them (texts redacted)."""
    ring = session.recent
    if ring is None:
        return []
    n = len(ring[-1]) // _PACKED.size
    out = []
    for i, (value,) in enumerate(_PACKED.iter_unpack(ring[-1])):
        out.append({"kind": _KINDS[(value >> 2) & 3], "name": redact(ring[i], RECENT_NAME_CHARS),
                    "outcome": _OUTCOMES[value & 3], "time_unix_ms": value >> 4,
                    "args": redact(ring[n + i], EXCERPT_CHARS), "result": redact(ring[2 * n + i], EXCERPT_CHARS)})
    return out


_last_seen = attrgetter("last_seen")


def _batches(items: list[T]) -> Iterator[list[T]]:
    for start in range(0, len(items), RANK_BATCH):
        yield items[start:start + RANK_BATCH]


def _newest(sessions: list[Session], want: int) -> Generator[None, None, list[Session]]:
    """The ``want`` most recently seen of ``sessions``, newest first: each batch sorted, then the batches
    merged (no single step sorts them all); keyed by a float, which is no object for the collector."""
    if want <= 0:
        return []
    runs = []
    for batch in _batches(sessions):
        batch.sort(key=_last_seen, reverse=True)
        runs.append(batch[:want])
        yield
    out: list[Session] = []
    for session in heapq.merge(*runs, key=_last_seen, reverse=True):
        out.append(session)
        if len(out) >= want:
            break
        if len(out) % RANK_BATCH == 0:
            yield
    return out
def step_call(step: Step | None) -> tuple[str, str, str] | None:
    """(tool name, arguments excerpt, result excerpt) of the step a finding was raised on, redacted and
    cut, or None: what a person needs to see what repeated."""
    if step is None:
        return None
    return (truncate(redact(step.name, RECENT_NAME_CHARS), EXCERPT_BYTES), excerpt(step.args_text),
            excerpt(step.output_text))


def excerpt(text: str | None) -> str:
    """``text`` redacted, cut to :data:`EXCERPT_CHARS` characters and :data:`EXCERPT_BYTES` bytes (in UTF-8
    and in memory: a wide character does not quadruple it); "" for none."""
    return truncate(redact(text, EXCERPT_CHARS), EXCERPT_BYTES) if text else ""


def _severity_key(session: Session) -> tuple[int, float]:
    return -VERDICT_RANK[session.verdict], -session.last_seen


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
        #: sessions whose verdict is not ``continue``
        self.flagged: dict[str, Session] = {}
        #: session id -> trace id of its latest alerting finding ("" when it is the session id), in the order
        #: of those findings (newest last), for the last :data:`ALERTS_KEPT` sessions that alerted
        self.alerts: OrderedDict[str, str] = OrderedDict()
        #: called with ``(session, previous verdict)`` after a verdict changed (the event stream listens)
        self.verdict_listeners: list[Callable[[Session, str], None]] = []
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

    def rename(self, old_id: str, new_id: str) -> Session | None:
        """Give the session ``old_id`` the id ``new_id`` (a trace session whose trace turned out to belong to a
        conversation otelloop had not seen yet, ``otelloop.joins``); its state stays, and it becomes the most
        recently seen (a step of it is arriving). Nothing changes when there is no ``old_id`` or ``new_id`` is
        taken; returns the renamed session."""
        sessions = self._sessions
        session = sessions.get(old_id)
        if session is None or new_id in sessions:
            return None
        del sessions[old_id]
        sessions[new_id] = session
        session.id = new_id
        session.last_seen = self._clock()
        if self.flagged.pop(old_id, None) is not None:
            self.flagged[new_id] = session
        trace = self.alerts.pop(old_id, None)
        if trace is not None:
            self.alerts[new_id] = trace or old_id
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
        self.flagged.pop(session.id, None)
        self.alerts.pop(session.id, None)
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

    # -- indexes for the sessions API and the console -----------------------------------------------

    def verdict_changed(self, session: Session, previous: str) -> None:
        """Record that ``session``'s verdict changed from ``previous`` (O(1); called only on a change)."""
        if session.id not in self._sessions:
            return
        if session.verdict == "continue":
            self.flagged.pop(session.id, None)
        else:
            self.flagged[session.id] = session
        for listener in self.verdict_listeners:
            listener(session, previous)

    def findings_seen(self, session: Session, trace_id: str, findings: Iterable[Finding]) -> None:
        """Move ``session`` to the front of the alerts index when one of ``findings`` alerts (O(1); the
        index keeps the :data:`ALERTS_KEPT` sessions that alerted last)."""
        if not any(f.severity in ALERT_SEVERITIES for f in findings):
            return
        alerts = self.alerts
        alerts[session.id] = "" if trace_id == session.id else trace_id
        alerts.move_to_end(session.id)
        if len(alerts) > ALERTS_KEPT:
            alerts.popitem(last=False)

    def latest_alerts(self, limit: int) -> list[tuple[Session, str]]:
        """Up to ``limit`` sessions with alerting findings not yet acknowledged, newest first, with the
        trace id of the latest alerting finding ("" when it is the session id)."""
        out: list[tuple[Session, str]] = []
        for sid in reversed(self.alerts):
            if len(out) >= limit:
                break
            session, trace_id = self._sessions.get(sid), self.alerts.get(sid)
            if session is not None and trace_id is not None and (
                    not session.acked_ms or alert_summary(session)[1] > session.acked_ms):
                out.append((session, trace_id))
        return out

    def idle_seconds(self, session: Session) -> float:
        """Seconds since ``session`` was last seen, on the store's clock."""
        return max(0.0, self._clock() - session.last_seen)

    def verdict_counts(self) -> dict[str, int]:
        """Live sessions per verdict, in O(sessions not at ``continue``)."""
        counts = dict.fromkeys(VERDICT_RANK, 0)
        for session in list(self.flagged.values()):
            counts[session.verdict] += 1
        counts["continue"] = len(self._sessions) - sum(n for v, n in counts.items() if v != "continue")
        return counts

    def ranked(self, verdict: str | None = None, query: str = "", offset: int = 0,
               limit: int = 100) -> tuple[list[Session], int]:
        """:meth:`ranking` run to its end at once."""
        steps = self.ranking(verdict, query, offset, limit)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def ranking(self, verdict: str | None = None, query: str = "", offset: int = 0,
                limit: int = 100) -> Generator[None, None, tuple[list[Session], int]]:
        """Sessions most severe first (then most recently seen first), filtered by verdict and by a
        case-insensitive substring of the session id or agent; returns (page, total matching).

        A generator that yields after every :data:`RANK_BATCH` sessions, so that a caller on the event
        loop can let the receivers and probes run between batches (``otelloop.listing``). It ranks copies
        of the indexes taken when it starts (so sessions created, touched or evicted meanwhile cannot break
        it); a session's verdict is read once, when its batch is reached. It makes no object per session
        (a burst of lists would otherwise feed the cyclic garbage collector, whose full passes over every
        session hold the loop).

        Without a query the cost is O(flagged + offset + limit) while those are few, whatever the number
        of live sessions; a query, or a page deep into the list, looks at every session once.
        """
        query = query.lower()
        want = offset + limit

        def matches(s: Session) -> bool:
            return not query or query in s.id.lower() or query in s.agent.lower()

        groups: dict[str, list[Session]] = {v: [] for v in VERDICT_RANK if v != "continue"}
        if verdict != "continue":
            for batch in _batches(list(self.flagged.values())):
                for s in batch:
                    v = s.verdict
                    if v != "continue" and (verdict is None or v == verdict) and matches(s):
                        groups[v].append(s)
                yield
        total_flagged = sum(len(g) for g in groups.values())
        top: list[Session] = []
        for v in sorted(groups, key=VERDICT_RANK.__getitem__, reverse=True):
            if len(top) < want:
                top += yield from _newest(groups[v], want - len(top))
        page = top[offset:offset + limit]
        if verdict not in (None, "continue"):
            return page, total_flagged
        skip = max(0, offset - total_flagged)
        need = skip + limit - len(page)
        total = total_flagged + len(self._sessions) - len(self.flagged)
        if not query and need <= 0:
            return page, total
        if not query and need + len(self.flagged) <= RANK_BATCH:  # the console's case: a few recent ones
            recent = islice(reversed(self._sessions.values()), need + len(self.flagged))
            page += [s for s in recent if s.verdict == "continue"][skip:need]
            return page, total
        # Walking the last-seen order of every session (a linked list) costs 20 times more than copying the
        # sessions in creation order: copy, filter a batch at a time, and order by when each was last seen.
        everyone = list(dict.values(self._sessions))
        yield
        rest: list[Session] = []
        for batch in _batches(everyone):
            rest += [s for s in batch if s.verdict == "continue" and matches(s)]
            yield
        if query:
            total = total_flagged + len(rest)
        page += (yield from _newest(rest, need))[skip:need]
        return page, total
