"""The agent-side verdict check: one call between steps asks otelloop whether to go on (docs/detectors.md).

This module owns the client of ``GET /v1/sessions/{id}/verdict``. It uses only the standard library so
that an agent needs no extra dependency to obey otelloop, and it never raises: a guard that crashes or
hangs the agent when otelloop is down would be worse than no guard. Every failure (connection refused,
timeout, 404 for a session otelloop has not seen, a malformed body) yields ``continue``, with the cause
in ``reason`` for logs.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import quote

#: Verdicts an agent may be told (docs/detectors.md#verdicts).
VERDICTS = frozenset({"continue", "nudge", "stop", "paused"})
#: Largest response body read; a verdict is a few hundred bytes.
MAX_BODY_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    """What otelloop says about a session.

    Attributes:
        verdict: ``continue``, ``nudge``, ``stop`` or ``paused``.
        reason: why (for logs; on a failed check, what failed).
        message: for ``nudge``, an instruction the agent can be given verbatim.
    """

    verdict: str = "continue"
    reason: str = ""
    message: str = ""

    @property
    def should_stop(self) -> bool:
        return self.verdict == "stop"

    @property
    def should_nudge(self) -> bool:
        return self.verdict == "nudge"


def format_trace_id(trace_id: int | str) -> str:
    """A trace id as otelloop names trace sessions: 32 lowercase hex digits.

    Accepts the int an OTel SDK span context holds or a hex string (any case, optional ``0x``).

    Raises:
        ValueError: not a non-zero 128-bit id.
    """
    if isinstance(trace_id, str):
        text = trace_id.strip().lower().removeprefix("0x")
        value = int(text, 16) if text else 0
    else:
        value = int(trace_id)
    if not 0 < value < 1 << 128:
        raise ValueError(f"not a valid trace id: {trace_id!r}")
    return f"{value:032x}"


def current_trace_id() -> int | None:
    """The trace id of the current OpenTelemetry span, or None outside a (valid) span or without OTel."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    ctx = trace.get_current_span().get_span_context()
    return ctx.trace_id if ctx.is_valid else None


def flush_spans(flush: object, timeout: float) -> str:
    """Export the spans the SDK still holds before asking for the verdict; '' or what went wrong.

    With the SDK's default ``BatchSpanProcessor`` the last steps' spans wait in memory for up to 5 s
    (``OTEL_BSP_SCHEDULE_DELAY``) before they are exported, so otelloop has not seen them yet and the
    first checks of a session answer "unknown session". ``flush`` is True for the global tracer provider,
    or the provider (anything with ``force_flush(timeout_millis)``) to flush.
    """
    provider = flush
    if flush is True:
        try:
            from opentelemetry import trace
        except ImportError:
            return "no OpenTelemetry SDK to flush"
        provider = trace.get_tracer_provider()
    force_flush = getattr(provider, "force_flush", None)
    if force_flush is None:
        return "the tracer provider cannot be flushed (no SDK TracerProvider configured)"
    try:
        done = force_flush(timeout_millis=int(timeout * 1000))
    except Exception as e:  # a guard must never raise into the agent
        return f"flush failed: {e!r}"
    return "" if done is not False else f"flush did not finish within {timeout}s"


def check_verdict(base_url: str, *, session_id: str | None = None, trace_id: int | str | None = None,
                  timeout: float = 0.5, token: str | None = None, flush: object = False,
                  flush_timeout: float = 2.0) -> Verdict:
    """Ask otelloop for the verdict of a session; ``continue`` whenever it cannot tell.

    Args:
        base_url: otelloop's admin address, e.g. ``http://otelloop:9464``.
        session_id: the session id: the conversation id the agent's spans carry (``gen_ai.conversation.id``,
            ``session.id``, …). Takes precedence over trace_id.
        trace_id: a trace id, int or hex: otelloop answers with the session of that trace, or of the
            conversation the trace joined (docs/mapping.md#sessions). When neither is given, the current
            OpenTelemetry span's trace id is used.
        timeout: seconds allowed for connecting and for each read; keep it short, agents wait on it.
        token: otelloop's agent token (``admin.agent_token``) when it has one, or the bearer token a proxy
            in front of otelloop requires.
        flush: True to flush the global OpenTelemetry tracer provider first (or the provider to flush),
            so that otelloop has seen this session's latest spans when it answers; see
            :func:`flush_spans`. A flush that fails or times out still asks, and says so in ``reason``.
        flush_timeout: seconds the flush may take.
    """
    try:
        sid = _session(session_id, trace_id)
    except (TypeError, ValueError) as e:
        return Verdict(reason=f"otelloop verdict not checked: {e}")
    if sid is None:
        return Verdict(reason="otelloop verdict not checked: no session id and no current trace")
    flushed = flush_spans(flush, flush_timeout) if flush is not False else ""
    verdict = _ask(base_url, sid, timeout, token)
    if flushed:
        return Verdict(verdict.verdict, f"{verdict.reason} ({flushed})".lstrip(), verdict.message)
    return verdict


def _ask(base_url: str, sid: str, timeout: float, token: str | None) -> Verdict:
    url = f"{base_url.rstrip('/')}/v1/sessions/{quote(sid, safe='')}/verdict"
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as e:
        reason = "unknown session" if e.code == 404 else f"HTTP {e.code}"
        return Verdict(reason=f"otelloop verdict unavailable: {reason}")
    except (OSError, http.client.HTTPException, ValueError) as e:
        # OSError: refused, timed out, reset (URLError too); HTTPException: a garbled response;
        # ValueError: a malformed base_url.
        return Verdict(reason=f"otelloop unreachable: {e!r}")
    return _parse(body)


async def acheck_verdict(base_url: str, *, session_id: str | None = None, trace_id: int | str | None = None,
                         timeout: float = 0.5, token: str | None = None, flush: object = False,
                         flush_timeout: float = 2.0) -> Verdict:
    """:func:`check_verdict` for async agents: runs in a worker thread so the event loop never blocks.

    The current trace id is resolved here, in the caller's context, before the hop to the thread.
    """
    if session_id is None and trace_id is None:
        trace_id = current_trace_id()
        if trace_id is None:
            return Verdict(reason="otelloop verdict not checked: no session id and no current trace")
    return await asyncio.to_thread(check_verdict, base_url, session_id=session_id, trace_id=trace_id,
                                   timeout=timeout, token=token, flush=flush, flush_timeout=flush_timeout)


def _session(session_id: str | None, trace_id: int | str | None) -> str | None:
    if session_id:
        return session_id
    if trace_id is None:
        trace_id = current_trace_id()
    return None if trace_id is None else format_trace_id(trace_id)


def _parse(body: bytes) -> Verdict:
    if len(body) > MAX_BODY_BYTES:
        return Verdict(reason="otelloop verdict unreadable: response too large")
    try:
        data = json.loads(body)
    except ValueError:
        return Verdict(reason="otelloop verdict unreadable: not JSON")
    verdict = data.get("verdict") if isinstance(data, dict) else None
    if verdict not in VERDICTS:
        return Verdict(reason=f"otelloop verdict unreadable: unexpected verdict {verdict!r}")
    return Verdict(verdict, _text(data.get("reason")), _text(data.get("message")))


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
