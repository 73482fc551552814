"""Admin HTTP API: ``/metrics``, ``/healthz``, ``/readyz``, the sessions API, the event stream and the
operator console (docs/console.md, docs/metrics.md).

Who may do what (docs/console.md says the same for operators):

- ``/healthz``, ``/readyz`` and ``/metrics`` are open: probes and Prometheus need them, and they carry
  no agent content.
- **Session data** — ``/v1/sessions``, ``/v1/sessions/{id}``, ``/v1/alerts``, ``/v1/events`` — and
  pause/resume: with an admin token configured, only requests that carry it (``Authorization: Bearer``);
  with none, only loopback clients that name the host by an IP address or ``localhost`` (no DNS
  rebinding), unless ``admin.allow_remote_without_token`` opens them. ``admin.read_localhost_only``
  restricts them to loopback clients in every case.
- **The verdict** an agent polls, ``/v1/sessions/{id}/verdict``: with ``admin.agent_token`` set, it
  needs that token (or the admin token). Without one it answers every client, but only a client allowed
  to read session data gets the session-specific message; any other gets a fixed message for the verdict,
  so that the answer carries no agent content.
- **The console page** (``/`` and its assets under ``/console/``) holds no session data; it is served
  to whoever may read session data, and, with a token configured, to anyone (the page then asks for the
  token and sends it with every call).

Tokens are compared in constant time and never logged. Every text that came from spans has been
redacted before it is stored (``otelloop.state``), and summaries are redacted again on the way out.
Writes refuse cross-site browser requests. Every response carries a strict Content-Security-Policy,
``nosniff`` and frame denial.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from otelloop import __version__
from otelloop.events import HEARTBEAT, EventHub
from otelloop.listing import ListGate, page_limit, render_page
from otelloop.model import VERDICT_RANK
from otelloop.pipeline import Pipeline
from otelloop.redact import redact
from otelloop.state import (
    ALERT_SEVERITIES,
    NAME_CHARS,
    RememberedFinding,
    Session,
    alert_summary,
    evidence_dict,
    recent_steps,
)

#: A trace id as otelloop names trace sessions.
_HEX = re.compile(r"[0-9a-f]{32}")
#: What an agent is told when it may not see the session-specific message (no agent content).
GENERIC_MESSAGES = {
    "continue": "",
    "nudge": "otelloop sees this session repeating itself without progress. Change your approach: try a "
             "different tool or different arguments, or report what is blocking you.",
    "stop": "otelloop stopped this session: it is looping without progress. Do not start another step; "
            "report what you have done and what is blocking you.",
    "paused": "An operator paused this session to inspect it. Do not start another step until it is resumed.",
}
#: Largest ``max_age`` a list request may give, in seconds, and how many distinct list answers are kept.
MAX_AGE = 5.0
CACHE_ENTRIES = 64
MAX_QUERY_CHARS = 200
#: Longest text of a detector summary shown in one session's evidence.
SUMMARY_CHARS = 200

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_NO_STORE = {"Cache-Control": "no-store"}
_ASSETS = {"index.html": "text/html", "console.js": "text/javascript", "console.css": "text/css"}


class AdminAPI:
    """The admin application.

    Args:
        pipeline: gives access to sessions, detector summaries and the configuration in force.
        ready: returns (ready, reason) for ``/readyz``.
        token: the admin token, or None.
        read_localhost_only: serve session data to loopback clients only, even with the token.
        agent_token: the token of ``/v1/sessions/{id}/verdict``, or None.
        allow_remote_without_token: with no admin token, serve session data to non-loopback clients too.
        events: the event stream hub (None: a private one with default bounds).
        max_concurrent_lists: session lists computed at once (``otelloop.listing``).
        settled: awaited before sessions or alerts are read or a session commanded: returns once the
            requests received before are processed (``receiver.acknowledge: received``); None: state is
            always current.
    """

    def __init__(self, pipeline: Pipeline, ready: Callable[[], tuple[bool, str]], token: str | None = None,
                 read_localhost_only: bool = False, *, agent_token: str | None = None,
                 allow_remote_without_token: bool = False, events: EventHub | None = None,
                 max_concurrent_lists: int = 2, settled: Callable[[], Awaitable[None]] | None = None) -> None:
        self.pipeline = pipeline
        self.settled = settled
        self.ready = ready
        self.token = token.encode() if token else None
        self.agent_token = agent_token.encode() if agent_token else None
        self.read_localhost_only = read_localhost_only
        self.allow_remote = allow_remote_without_token
        self.events = events or EventHub(pipeline, pipeline.metrics)
        self.lists = ListGate(max_concurrent_lists, pipeline.metrics.admin_lists_refused.inc)
        self._cache: OrderedDict[str, tuple[int, float, bytes]] = OrderedDict()
        self._writes = 0
        self.assets = {name: (resources.files("otelloop").joinpath("console", name).read_bytes(), kind)
                       for name, kind in _ASSETS.items()}
        app = self.app = web.Application()
        app.on_response_prepare.append(_security_headers)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/", self._index)
        app.router.add_get("/console/{name}", self._asset)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_get("/v1/sessions", self._sessions)
        app.router.add_get("/v1/sessions/{id}", self._session)
        app.router.add_get("/v1/sessions/{id}/verdict", self._verdict)
        app.router.add_post("/v1/sessions/{id}/pause", self._pause)
        app.router.add_post("/v1/sessions/{id}/resume", self._resume)
        app.router.add_post("/v1/sessions/{id}/acknowledge", self._acknowledge)
        app.router.add_get("/v1/alerts", self._alerts)
        app.router.add_get("/v1/events", self._events)

    # -- health and metrics ------------------------------------------------------------------------

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.pipeline.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        ok, reason = self.ready()
        return web.json_response({"status": "ready" if ok else "not ready", "reason": reason},
                                 status=200 if ok else 503)

    # -- access ------------------------------------------------------------------------------------

    def may_read(self, request: web.Request) -> bool:
        """Whether ``request`` may see session data (see the module docstring); never raises."""
        try:
            self.check_session_access(request)
        except web.HTTPException:
            return False
        return True

    def check_session_access(self, request: web.Request) -> None:
        """Raise 401/403 unless ``request`` may read session data and pause or resume sessions."""
        loopback = _is_loopback(request)
        if self.read_localhost_only and not loopback:
            raise _forbidden("session data is served to loopback clients only (admin.read_localhost_only)")
        if self.token is not None:
            self._require_token(request, (self.token,))
            return
        if self.allow_remote:
            return
        if not loopback:
            raise _forbidden("session data is served to loopback clients only: set admin.token and send it "
                             "as a bearer token, or set admin.allow_remote_without_token")
        if not _host_is_literal(request.host):
            raise _forbidden("without admin.token, session data is served only to requests that name this "
                             "host by IP address or as localhost")

    def _check_page(self, request: web.Request) -> None:
        """The console holds no session data: with a token it is served to all (the token guards the
        data); without one, to the clients that may read the data."""
        if self.token is not None and not self.read_localhost_only:
            return
        if self.token is not None:
            if not _is_loopback(request):
                raise _forbidden("the console is served to loopback clients only (admin.read_localhost_only)")
            return
        self.check_session_access(request)

    def _require_token(self, request: web.Request, accepted: tuple[bytes, ...]) -> None:
        header = request.headers.get("Authorization", "")
        if not header:
            raise web.HTTPUnauthorized(text="admin token required", headers={"WWW-Authenticate": "Bearer"})
        given = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
        ok = False
        for token in accepted:  # every token is compared, in constant time each
            ok |= hmac.compare_digest(given, token)
        if not ok:
            raise _forbidden("invalid token")

    def _check_write(self, request: web.Request) -> None:
        self.check_session_access(request)
        # A browser page of another site must not pause sessions through an operator's browser.
        if request.headers.get("Sec-Fetch-Site", "same-origin") not in ("same-origin", "none"):
            raise _forbidden("cross-site requests are refused")
        origin = request.headers.get("Origin")
        if origin is not None and origin.split("://", 1)[-1] != request.host:
            raise _forbidden("cross-origin requests are refused")

    # -- the console -------------------------------------------------------------------------------

    async def _index(self, request: web.Request) -> web.Response:
        return self._serve_asset(request, "index.html")

    async def _favicon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)  # no icon; answered so browsers do not log a 404

    async def _asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name == "config.json":
            if not self.pipeline.config.console.enabled:
                raise web.HTTPNotFound()
            self._check_page(request)
            return web.json_response(self._console_config(), headers=_NO_STORE)
        if name not in _ASSETS or name == "index.html":
            raise web.HTTPNotFound()
        return self._serve_asset(request, name)

    def _serve_asset(self, request: web.Request, name: str) -> web.Response:
        if not self.pipeline.config.console.enabled:
            raise web.HTTPNotFound(text="the console is disabled (console.enabled: false)")
        self._check_page(request)
        body, kind = self.assets[name]
        return web.Response(body=body, content_type=kind, charset="utf-8", headers=_NO_STORE)

    def _console_config(self) -> dict[str, Any]:
        cfg = self.pipeline.config
        return {"version": __version__, "auth": "token" if self.token is not None else "none",
                "trace_url": cfg.console.trace_url, "group_by": cfg.state.group_by,
                "max_cycle_iterations": self._cycle_budget(), "verdicts": list(VERDICT_RANK),
                **self._console_hints()}

    def _console_hints(self) -> dict[str, Any]:
        """What the console needs to explain missing settings and to show the *ended* state."""
        cfg = self.pipeline.config
        return {"dashboard_url": cfg.console.dashboard_url, "ended_after_seconds": cfg.console.ended_after,
                "pricing": bool(cfg.pricing), "idle_timeout_seconds": cfg.state.idle_timeout}

    def _cycle_budget(self) -> int | None:
        stall = self.pipeline.config.detectors.get("stall")
        return getattr(stall, "max_cycle_iterations", None)

    # -- sessions ----------------------------------------------------------------------------------

    async def _settle(self) -> None:
        """Return once the requests received before this one are processed (when requests are answered on
        receipt), so a client reads state that includes the steps it sent."""
        if self.settled is not None:
            await self.settled()

    async def _find(self, request: web.Request) -> Session:
        """The session the request names, once :meth:`_settle` returned; 404 when there is none."""
        await self._settle()
        session = self.pipeline.session_for(request.match_info["id"])
        if session is None:
            raise web.HTTPNotFound(text='{"error": "unknown session"}', content_type="application/json")
        return session

    async def _sessions(self, request: web.Request) -> web.Response:
        self.check_session_access(request)
        wanted = request.query.get("verdict") or None
        if wanted is not None and wanted not in VERDICT_RANK:
            raise web.HTTPBadRequest(text=f"verdict must be one of {', '.join(VERDICT_RANK)}")
        limit = page_limit(request.query)
        offset = _int_param(request, "offset", 0, 0, 10_000_000)
        query = request.query.get("q", "")[:MAX_QUERY_CHARS]
        with_findings = _bool_param(request, "findings", True)
        await self._settle()

        async def render() -> bytes:  # in slices, a few lists at a time (otelloop.listing)
            views = self._views()
            return await render_page(self.lists, self.pipeline.store, wanted, query, offset, limit,
                                     lambda s: self._brief(s, views, findings=with_findings), _dumps)

        return await self._cached_sliced(request, render)

    async def _cached_sliced(self, request: web.Request, render: Callable[[], Awaitable[bytes]]) -> web.Response:
        """:meth:`_cached` for an answer computed in slices: a fresh enough cached answer is served at once;
        otherwise the request waits for a turn of :attr:`lists` (503 when too many wait) and looks at the
        cache again before computing, so that pages polling together share one computation."""
        max_age = _float_param(request, "max_age", 0.0, 0.0, MAX_AGE)
        hit = self._cache_hit(request, max_age)
        if hit is not None:
            return hit
        async with self.lists.turn():
            hit = self._cache_hit(request, max_age)
            if hit is not None:
                return hit
            generation, now = self.events.generation + self._writes, time.monotonic()
            body = await render()
        self._cache_put(request, max_age, generation, now, body)
        return web.Response(body=body, content_type="application/json", headers=_NO_STORE)

    def _cache_hit(self, request: web.Request, max_age: float) -> web.Response | None:
        if max_age <= 0:
            return None
        hit = self._cache.get(request.rel_url.path_qs)
        if hit is None or hit[0] != self.events.generation + self._writes or time.monotonic() - hit[1] > max_age:
            return None
        return web.Response(body=hit[2], content_type="application/json", headers=_NO_STORE)

    def _cache_put(self, request: web.Request, max_age: float, generation: int, now: float, body: bytes) -> None:
        if max_age <= 0:
            return
        key = request.rel_url.path_qs
        self._cache[key] = (generation, now, body)
        self._cache.move_to_end(key)
        while len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

    def _cached(self, request: web.Request, render: Callable[[], dict[str, Any]]) -> web.Response:
        """The JSON of ``render()``, shared between requests that accept an answer up to ``max_age``
        seconds old (the console sends 1) and computed after the last events the stream delivered, so
        that any number of open pages costs one computation per flush of the stream."""
        max_age = _float_param(request, "max_age", 0.0, 0.0, MAX_AGE)
        key = request.rel_url.path_qs
        generation = self.events.generation + self._writes
        now = time.monotonic()
        if max_age > 0:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == generation and now - hit[1] <= max_age:
                return web.Response(body=hit[2], content_type="application/json", headers=_NO_STORE)
        body = _dumps(render()).encode()
        if max_age > 0:
            self._cache[key] = (generation, now, body)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return web.Response(body=body, content_type="application/json", headers=_NO_STORE)

    async def _session(self, request: web.Request) -> web.Response:
        self.check_session_access(request)
        session = await self._find(request)
        body = self._brief(session, self._views(), evidence=True)
        body["evidence"] = _redact_tree(self.pipeline.engine.summaries(session))
        body["votes"] = {d: {"verdict": v, "reason": r, "message": m}
                         for d, (v, r, m) in (session.votes or {}).items()}
        body["recent_steps"] = recent_steps(session)
        body["verdict_history"] = [{"time_unix_ms": t, "verdict": v, "reason": r} for t, v, r in session.history]
        body["message"] = session.message
        body["first_seen_unix_nano"] = session.first_start_ns
        return web.json_response(body, headers=_NO_STORE, dumps=_dumps)

    async def _alerts(self, request: web.Request) -> web.Response:
        """Sessions with a ``warn``, ``loop`` or ``stop`` finding, each once, newest alert first."""
        self.check_session_access(request)
        limit = _int_param(request, "limit", 50, 1, 1000)
        await self._settle()

        def render() -> dict[str, Any]:
            views = self._views()
            out = []
            for session, trace_id in self.pipeline.store.latest_alerts(limit):
                latest = next((f for f in reversed(session.findings) if f[2] in ALERT_SEVERITIES), None)
                brief = self._brief(session, views, findings=False)
                brief.update(alert_time_unix_ms=alert_summary(session)[1],
                             trace_id=trace_id or (session.id if views["by_trace"] else brief["trace_id"]),
                             finding=_finding(latest) if latest else None)
                out.append(brief)
            return {"alerts": out}

        return self._cached(request, render)

    async def _verdict(self, request: web.Request) -> web.Response:
        if self.read_localhost_only and not _is_loopback(request):
            raise _forbidden("session data is served to loopback clients only (admin.read_localhost_only)")
        if self.agent_token is not None:
            self._require_token(request, (self.agent_token, self.token) if self.token else (self.agent_token,))
            full = True
        else:
            full = self.may_read(request)
        session = await self._find(request)
        message = session.message if full else GENERIC_MESSAGES.get(session.verdict, "")
        return web.json_response({"verdict": session.verdict, "reason": session.reason, "message": message},
                                 headers=_NO_STORE)

    async def _pause(self, request: web.Request) -> web.Response:
        self._check_write(request)
        session = await self._find(request)
        before = session.verdict
        session.pause()
        self._changed(session, before)
        return web.json_response({"verdict": session.verdict}, headers=_NO_STORE)

    async def _resume(self, request: web.Request) -> web.Response:
        self._check_write(request)
        session = await self._find(request)
        before = session.verdict
        session.resume()
        self._changed(session, before)
        return web.json_response({"verdict": session.verdict}, headers=_NO_STORE)

    async def _acknowledge(self, request: web.Request) -> web.Response:
        """Take a session off the alerts list until its next alerting finding (a write, guarded as
        pause and resume are)."""
        self._check_write(request)
        session = await self._find(request)
        session.acked_ms = max(int(time.time() * 1000), alert_summary(session)[1])
        self._writes += 1
        return web.json_response({"acknowledged_unix_ms": session.acked_ms}, headers=_NO_STORE)

    def _changed(self, session: Session, before: str) -> None:
        self._writes += 1  # cached lists are stale from now
        if session.verdict != before:
            self.pipeline.store.verdict_changed(session, before)

    # -- the event stream --------------------------------------------------------------------------

    async def _events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events of findings and verdict changes (see ``otelloop.events``)."""
        self.check_session_access(request)
        transport = request.transport
        client = self.events.subscribe(transport.abort if transport is not None else lambda: None)
        if client is None:
            raise web.HTTPServiceUnavailable(text="too many event stream clients (admin.max_event_clients)",
                                             headers={"Retry-After": "5"})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                               "X-Accel-Buffering": "no"})
        try:
            await response.prepare(request)
            await response.write(b"retry: 2000\n: otelloop event stream\n\n")
            while True:
                chunk = await client.next(HEARTBEAT)
                if chunk is None:
                    break
                await response.write(chunk)
        except ConnectionError:  # the client went away while we wrote
            pass
        finally:  # also on cancellation: the listener cancels handlers whose client disconnected
            self.events.unsubscribe(client)
        return response

    # -- views -------------------------------------------------------------------------------------

    def _views(self) -> dict[str, Any]:
        """What the briefs of one request need from the detectors in force (looked up once)."""
        detectors = {d.name: d for d in self.pipeline.engine.detectors}
        return {"stall": detectors.get("stall"), "trajectory": detectors.get("trajectory"),
                "entropy": detectors.get("entropy"), "budget": self._cycle_budget(),
                "by_trace": self.pipeline.config.state.group_by == "trace"}

    def _brief(self, s: Session, views: dict[str, Any], evidence: bool = False,
               findings: bool = True) -> dict[str, Any]:
        alert_trace = self.pipeline.store.alerts.get(s.id)
        brief = {
            "session_id": s.id, "agent": redact(s.agent, NAME_CHARS), "service": redact(s.service, NAME_CHARS),
            "environment": redact(s.environment, NAME_CHARS),
            "verdict": s.verdict, "reason": s.reason,
            "loop_score": s.loop_score, "entropy_score": s.entropy_score,
            "entropy_severity": _entropy_severity(s, views["entropy"]),
            "loop": _loop_badge(s, views["stall"], views["budget"]),
            "intervention": _summary_field(s, views["trajectory"], "intervention"),
            "steps": s.steps, "unjudged_steps": s.unjudged, "held_steps": s.held, "cost_usd": round(s.cost_usd, 6),
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens, "last_seen_unix_nano": s.last_end_ns,
            "trace_id": s.id if views["by_trace"] or _is_trace_id(s.id) else (alert_trace or ""),
            "alerts": alert_summary(s)[0],
            **self._when(s),
        }
        if findings:
            brief["findings"] = [_finding(f, evidence) for f in s.findings]
        return brief


    def _when(self, s: Session) -> dict[str, Any]:
        """When the session started, how long it has been idle, and whether it has *ended* (unseen for
        ``console.ended_after``)."""
        idle = self.pipeline.store.idle_seconds(s)
        return {"first_seen_unix_nano": s.first_start_ns, "idle_seconds": round(idle, 1),
                "ended": idle >= self.pipeline.config.console.ended_after,
                "acknowledged_unix_ms": s.acked_ms}


def _finding(f: RememberedFinding, evidence: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"detector": f[0], "event": f[1], "severity": f[2], "message": f[3],
                           "time_unix_ms": f[4], "count": f[5]}
    if f[7] is not None:
        out["call"] = {"name": f[7][0], "args": f[7][1], "result": f[7][2]}
    if evidence:
        attrs = evidence_dict(f[6])
        actions = attrs.pop("suggested_actions", None)
        out["evidence"] = attrs
        out["suggested_actions"] = [a for a in str(actions).split(", ") if a] if actions else []
    return out


def _summary_field(s: Session, detector: Any, field: str) -> Any:
    state = s.state(detector.name) if detector is not None else None
    if state is None:
        return None
    try:
        return detector.summary(state).get(field)
    except Exception:
        return None


def _loop_badge(s: Session, stall: Any, budget: int | None) -> dict[str, Any] | None:
    """The tracked cycle with the most iterations (the console's "Loop i/N" badge), or None."""
    cycles = _summary_field(s, stall, "cycles")
    if not cycles:
        return None
    best = max(cycles, key=lambda c: c.get("iteration", 0))
    if best.get("iteration", 0) < 1:
        return None
    return {"cycle_id": redact(str(best.get("cycle_id", "")), SUMMARY_CHARS), "iteration": best["iteration"],
            "budget": budget}


def _entropy_severity(s: Session, entropy: Any) -> str | None:
    if s.entropy_score is None or entropy is None:
        return None
    try:
        severity: str | None = entropy.classify(s.entropy_score)
        return severity
    except Exception:
        return None


def _redact_tree(value: Any, depth: int = 0) -> Any:
    """A detector summary with every text redacted and every collection bounded."""
    if depth > 6:
        return None
    if isinstance(value, str):
        return redact(value, SUMMARY_CHARS)
    if isinstance(value, dict):
        return {redact(str(k), SUMMARY_CHARS): _redact_tree(v, depth + 1) for k, v in list(value.items())[:100]}
    if isinstance(value, (list, tuple)):
        return [_redact_tree(v, depth + 1) for v in list(value)[:100]]
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    return redact(str(value), SUMMARY_CHARS)


def _is_trace_id(session_id: str) -> bool:
    """Whether a session id is a trace id (``group_by: auto`` names a session without a conversation id
    by its trace)."""
    return len(session_id) == 32 and _HEX.fullmatch(session_id) is not None


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(int(request.query.get(name, str(default))), high))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None


def _float_param(request: web.Request, name: str, default: float, low: float, high: float) -> float:
    try:
        value = float(request.query.get(name, str(default)))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be a number") from None
    if value != value:  # NaN
        raise web.HTTPBadRequest(text=f"{name} must be a number")
    return max(low, min(value, high))


def _bool_param(request: web.Request, name: str, default: bool) -> bool:
    value = request.query.get(name)
    if value is None:
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise web.HTTPBadRequest(text=f"{name} must be true or false")


def _is_loopback(request: web.Request) -> bool:
    return is_loopback_address(request.remote or "")


def is_loopback_address(remote: str) -> bool:
    """Whether a peer address is this machine's loopback: ``127.0.0.0/8``, ``::1``, and an IPv4 loopback
    address as a dual-stack IPv6 socket reports it (``::ffff:127.0.0.1``), which ``is_loopback`` alone
    does not count (a local IPv4 client of an ``[::]`` listener would be refused as remote)."""
    try:
        address = ipaddress.ip_address(remote.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def _host_is_literal(host: str) -> bool:
    """Whether a Host header names this machine by IP address or as localhost (a page that rebinds its own
    DNS name to 127.0.0.1 sends its own name, and is refused)."""
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    name = name.strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _forbidden(text: str) -> web.HTTPForbidden:
    return web.HTTPForbidden(text=text)


async def _security_headers(request: web.Request, response: web.StreamResponse) -> None:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)
