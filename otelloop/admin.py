"""Admin HTTP API: ``/metrics``, ``/healthz``, ``/readyz`` and the sessions API (SPEC §5, §7).

Write endpoints (pause/resume) require the admin token when one is configured; it is compared in
constant time and never logged. The read API can be restricted to loopback clients.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from otelloop.model import VERDICT_RANK
from otelloop.pipeline import Pipeline
from otelloop.state import Session

_ORDER = {v: -r for v, r in VERDICT_RANK.items()}


class AdminAPI:
    """The admin application.

    Args:
        pipeline: gives access to sessions and detector summaries.
        ready: returns (ready, reason) for ``/readyz``.
        token: the admin token for write endpoints, or None (open).
        read_localhost_only: refuse the sessions read API to non-loopback clients.
    """

    def __init__(self, pipeline: Pipeline, ready: Callable[[], tuple[bool, str]], token: str | None = None,
                 read_localhost_only: bool = False) -> None:
        self.pipeline = pipeline
        self.ready = ready
        self.token = token.encode() if token else None
        self.read_localhost_only = read_localhost_only
        app = self.app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/v1/sessions", self._sessions)
        app.router.add_get("/v1/sessions/{id}", self._session)
        app.router.add_get("/v1/sessions/{id}/verdict", self._verdict)
        app.router.add_post("/v1/sessions/{id}/pause", self._pause)
        app.router.add_post("/v1/sessions/{id}/resume", self._resume)

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

    # -- sessions ----------------------------------------------------------------------------------

    def _check_read(self, request: web.Request) -> None:
        if not self.read_localhost_only:
            return
        peer = request.remote or ""
        try:
            loopback = ipaddress.ip_address(peer).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise web.HTTPForbidden(text="the sessions API is served to loopback clients only")

    def _find(self, request: web.Request) -> Session:
        self._check_read(request)
        session = self.pipeline.store.get(request.match_info["id"])
        if session is None:
            raise web.HTTPNotFound(text='{"error": "unknown session"}', content_type="application/json")
        return session

    async def _sessions(self, request: web.Request) -> web.Response:
        self._check_read(request)
        wanted = request.query.get("verdict")
        if wanted is not None and wanted not in VERDICT_RANK:
            raise web.HTTPBadRequest(text=f"verdict must be one of {', '.join(VERDICT_RANK)}")
        try:
            limit = max(1, min(int(request.query.get("limit", "100")), 10_000))
        except ValueError:
            raise web.HTTPBadRequest(text="limit must be an integer") from None
        sessions = [s for s in self.pipeline.store if wanted is None or s.verdict == wanted]
        sessions.sort(key=lambda s: (_ORDER[s.verdict], -s.last_seen))
        return web.json_response({"sessions": [_brief(s) for s in sessions[:limit]], "total": len(sessions)})

    async def _session(self, request: web.Request) -> web.Response:
        session = self._find(request)
        body = _brief(session)
        body["evidence"] = self.pipeline.engine.summaries(session)
        body["votes"] = {d: {"verdict": v, "reason": r, "message": m} for d, (v, r, m) in (session.votes or {}).items()}
        return web.json_response(body, dumps=_dumps)

    async def _verdict(self, request: web.Request) -> web.Response:
        session = self._find(request)
        return web.json_response({"verdict": session.verdict, "reason": session.reason,
                                  "message": session.message})

    def _check_write(self, request: web.Request) -> None:
        if self.token is None:
            return
        header = request.headers.get("Authorization", "")
        if not header:
            raise web.HTTPUnauthorized(text="admin token required", headers={"WWW-Authenticate": "Bearer"})
        given = header[7:].strip().encode() if header[:7].lower() == "bearer " else b""
        if not hmac.compare_digest(given, self.token):
            raise web.HTTPForbidden(text="invalid admin token")

    async def _pause(self, request: web.Request) -> web.Response:
        self._check_write(request)
        session = self._find(request)
        session.pause()
        return web.json_response({"verdict": session.verdict})

    async def _resume(self, request: web.Request) -> web.Response:
        self._check_write(request)
        session = self._find(request)
        session.resume()
        return web.json_response({"verdict": session.verdict})


def _brief(s: Session) -> dict[str, Any]:
    return {
        "session_id": s.id, "agent": s.agent, "service": s.service, "verdict": s.verdict, "reason": s.reason,
        "loop_score": s.loop_score, "entropy_score": s.entropy_score,
        "steps": s.steps, "cost_usd": round(s.cost_usd, 6), "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens, "last_seen_unix_nano": s.last_end_ns,
        "findings": [{"detector": d, "event": e, "severity": sev, "message": m} for d, e, sev, m in s.findings],
    }


def _dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, default=str)
