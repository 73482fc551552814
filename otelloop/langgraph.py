"""LangGraph adapter: a guard node that makes a graph obey otelloop's verdict (docs/detectors.md#verdicts).

This module owns closing the loop for LangGraph agents. Placed after the tools node, the guard asks
otelloop for the session's verdict and routes:

- ``continue``: on to the next node (usually the agent);
- ``nudge``: on to the next node, with otelloop's nudge message appended as a human turn, so the model
  reads it before it plans its next call;
- ``stop``: to ``END``;
- ``paused`` (an operator's "Pause and Inspect"): waits, polling, until the operator resumes or stops.

LangGraph and langchain-core are imported only when a guard is built, so otelloop itself does not need
them. The verdict check never raises (see :mod:`otelloop.client`): if otelloop is unreachable the graph
simply continues.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from otelloop.client import Verdict, check_verdict, current_trace_id

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.graph import StateGraph
    from langgraph.types import Command

#: ``(state, config) -> session key``: a str is a session id, an int a trace id, None skips the check.
SessionKeyFn = Callable[[Any, "Mapping[str, Any] | None"], "str | int | None"]
#: ``session key -> Verdict``; the default asks otelloop's admin API.
VerdictSource = Callable[["str | int"], Verdict]

#: Said to the model on ``nudge`` when otelloop gave no message of its own.
DEFAULT_NUDGE = ("You seem to be repeating yourself without making progress. Change your approach: "
                 "try a different tool or different arguments, or ask for help.")
#: ``name`` of the injected note, so it can be told apart from real user turns.
NOTE_NAME = "otelloop"
_INSTALL_HINT = ("the otelloop LangGraph adapter needs langgraph and langchain-core: "
                 "pip install langgraph langchain-core")


def trace_session_key(state: Any, config: Mapping[str, Any] | None) -> int | None:
    """Default session key: the current OpenTelemetry trace id (otelloop answers a trace id with the session
    its trace joined, see docs/mapping.md#sessions)."""
    return current_trace_id()


class VerdictGuard:
    """A LangGraph node that routes on otelloop's verdict; returns a ``Command``.

    Args:
        next_node: where ``continue`` and ``nudge`` go (e.g. ``"agent"``).
        base_url: otelloop's admin address, e.g. ``http://localhost:9464``.
        session_key: how to find the session from ``(state, config)``; a str is used as the session id
            (a conversation id the spans carry, e.g. ``config["configurable"]["thread_id"]``), an int as a
            trace id.
            Default: the current OpenTelemetry trace id.
        verdict_source: replaces the HTTP check (tests, or an in-process otelloop).
        timeout: seconds allowed for the check.
        token: otelloop's agent token (``admin.agent_token``), or a proxy's bearer token.
        messages_key: the state key holding the message list; it needs an appending reducer
            (``add_messages`` as in ``MessagesState``, or ``operator.add``).
        pause_poll_interval: seconds between checks while an operator has the session paused.
    """

    def __init__(self, *, next_node: str, base_url: str | None = None,
                 session_key: SessionKeyFn | None = None, verdict_source: VerdictSource | None = None,
                 timeout: float = 0.5, token: str | None = None, messages_key: str = "messages",
                 pause_poll_interval: float = 2.0) -> None:
        if verdict_source is None:
            if base_url is None:
                raise ValueError("VerdictGuard needs base_url (otelloop's admin address) or verdict_source")
            verdict_source = partial(_ask_otelloop, base_url, timeout, token)
        self._langgraph = _import_langgraph()
        self.next_node = next_node
        self._session_key = session_key or trace_session_key
        self._verdict_source = verdict_source
        self._messages_key = messages_key
        self._pause_poll_interval = pause_poll_interval

    @property
    def destinations(self) -> tuple[str, str]:
        """Where the guard may route (for ``add_node(..., destinations=...)`` and graph drawings)."""
        return self.next_node, self._langgraph.END

    def __call__(self, state: Any, config: RunnableConfig) -> Command[Any]:
        command = self._langgraph.Command
        verdict = self.check(state, config)
        if verdict.verdict == "stop":
            return command(goto=self._langgraph.END)
        if verdict.verdict == "nudge":
            note = self._nudge_note(state, verdict)
            if note is not None:
                return command(goto=self.next_node, update={self._messages_key: [note]})
        return command(goto=self.next_node)

    def check(self, state: Any, config: Mapping[str, Any] | None) -> Verdict:
        """The session's verdict, waiting while it is ``paused``; ``continue`` when there is no session."""
        key = self._session_key(state, config)
        if key is None:
            return Verdict(reason="no session key")
        verdict = self._verdict_source(key)
        while verdict.verdict == "paused":
            time.sleep(self._pause_poll_interval)
            verdict = self._verdict_source(key)
        return verdict

    def _nudge_note(self, state: Any, verdict: Verdict) -> Any:
        """The note to append, or None while a tool call is unanswered.

        Chat APIs require an assistant turn with tool calls to be followed by all its tool results before
        anything else; a note in between would make the next model call fail. The verdict is checked again
        after the tools ran, so the nudge is delivered then.
        """
        messages = _field(state, self._messages_key) or []
        if has_pending_tool_calls(messages):
            return None
        return self._langgraph.HumanMessage(content=verdict.message or DEFAULT_NUDGE, name=NOTE_NAME)


def add_verdict_guard(builder: StateGraph[Any, Any, Any, Any], *, after: str, next_node: str,
                      name: str = "otelloop_guard", **options: Any) -> VerdictGuard:
    """Insert a :class:`VerdictGuard` between ``after`` and ``next_node`` of a ``StateGraph`` builder.

    Typical ReAct wiring: ``agent → tools → guard → agent``, with ``after="tools"`` and
    ``next_node="agent"``; do not also add an edge from ``after`` to ``next_node``. ``options`` are
    :class:`VerdictGuard`'s (``base_url``, ``session_key``, ``timeout``, …).
    """
    guard = VerdictGuard(next_node=next_node, **options)
    # The guard is otelloop's own machinery, not an agent turn: its spans opt out of step mapping
    # (OpenInference copies node metadata into the span's ``metadata`` attribute).
    builder.add_node(name, guard, destinations=guard.destinations, metadata={"otelloop.step.kind": "ignore"})
    builder.add_edge(after, name)
    return guard


def has_pending_tool_calls(messages: Sequence[Any]) -> bool:
    """Whether the last assistant turn with tool calls still lacks some of its tool results."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if _field(message, "type") != "ai":
            continue
        wanted = {call.get("id") for call in _field(message, "tool_calls") or []}
        answered = {_field(m, "tool_call_id") for m in messages[i + 1:] if _field(m, "type") == "tool"}
        return bool(wanted - answered)
    return False


def _field(obj: Any, key: str) -> Any:
    """``obj[key]`` for dict states and messages, ``obj.key`` for objects (pydantic states, messages)."""
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _ask_otelloop(base_url: str, timeout: float, token: str | None, key: str | int) -> Verdict:
    if isinstance(key, int):
        return check_verdict(base_url, trace_id=key, timeout=timeout, token=token)
    return check_verdict(base_url, session_id=key, timeout=timeout, token=token)


class _LangGraph:
    """The few LangGraph and langchain-core names the guard uses, imported on first use."""

    def __init__(self) -> None:
        from langchain_core.messages import HumanMessage
        from langgraph.graph import END
        from langgraph.types import Command

        self.END = END
        self.Command = Command
        self.HumanMessage = HumanMessage


def _import_langgraph() -> _LangGraph:
    try:
        return _LangGraph()
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e
