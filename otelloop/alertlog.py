"""Findings in the log when otelloop forwards: each new alert once, rate-limited, redacted.

In detect-only mode every finding is printed on stderr (``service.print_finding``). When otelloop
forwards, the findings travel on the spans and in the metrics, but an operator tailing the pod's log
would see none of them. This sink logs each alert — a session's first finding of a kind (detector and
finding) — once, with a rate limit that counts the lines it holds back, so a fleet of looping agents
cannot flood the log. Agent-supplied text (session ids, agent names,
messages) goes through :func:`otelloop.redact.redact`, which masks secret-looking values and replaces
control characters, so a line cannot be forged or carry a key; the session id only has its control
characters replaced.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

from otelloop.logs import escape
from otelloop.model import Finding, Step
from otelloop.redact import redact
from otelloop.state import NAME_CHARS

#: Alerts remembered as already logged; the oldest are forgotten first (bounded memory).
MAX_REMEMBERED = 10_000


class AlertLog:
    """A finding sink (``Pipeline.finding_sinks``) that logs each new alert once.

    Lines are rate-limited by a token bucket: up to ``burst`` lines at once, then ``per_second``; the
    alerts held back are counted and the count is given in the next line (they are still on the spans,
    in ``otelloop_findings_total`` and in the console).

    Args:
        logger: where the lines go (WARNING level).
        per_second: sustained lines per second.
        burst: lines allowed at once.
        remember: how many logged alerts are remembered, to log each once.
    """

    def __init__(self, logger: logging.Logger, per_second: float = 5.0, burst: int = 20,
                 remember: int = MAX_REMEMBERED) -> None:
        self._log = logger
        self._rate = per_second
        self._burst = float(burst)
        self._tokens = float(burst)
        self._refilled = time.monotonic()
        self._held_back = 0
        self._seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._remember = remember

    def __call__(self, step: Step, finding: Finding) -> None:
        key = (step.session, finding.detector, finding.finding)
        if key in self._seen:
            return
        self._seen[key] = None
        if len(self._seen) > self._remember:
            self._seen.popitem(last=False)
        if not self._take():
            self._held_back += 1
            return
        more = f" ({self._held_back} more alerts not logged: rate limit)" if self._held_back else ""
        self._held_back = 0
        self._log.warning("%s%s", alert_line(step, finding), more)

    def _take(self) -> bool:
        now = time.monotonic()
        self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self._rate)
        self._refilled = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True


def alert_line(step: Step, finding: Finding) -> str:
    """One line naming the alert, its session, agent and span, and what the detector saw. Every value
    comes from spans, so each is escaped (``otelloop.logs.escape``); the session id is not run through
    :func:`redact` (a trace id looks random and would be masked, and the operator needs it)."""
    detail = escape(redact(finding.message) or finding.event)
    return (f"alert [{escape(finding.severity)}] {escape(finding.finding)} "
            f"session={escape(step.session, NAME_CHARS)} agent={escape(redact(step.agent, NAME_CHARS)) or '-'} "
            f"span={escape(step.span_id)}: {detail}")
