"""Sessions as users mean them: a conversation joined across its traces (docs/mapping.md#sessions).

With ``state.group_by: auto`` a step's session is the conversation/session id its span carries
(``gen_ai.conversation.id``, ``session.id`` and each dialect's equivalent), else its trace id. Frameworks
do not put the id on every span: often the agent span has it and the tool and model spans beneath it
do not, or the other way round. So that such a conversation is not split in two, :class:`TraceJoins`
remembers, for a bounded number of recent traces, the conversation each was first seen with; a step of
that trace whose span carries no id joins that conversation. Within one request every span is looked
at before any is assigned, so the order of spans in a request does not matter. Steps that arrived in
an earlier request than the first span of their trace carrying the id are in a session named by the
trace: when the conversation is new, that session becomes the conversation's (it is renamed, state and
all); when the conversation already has a session, they stay apart (two sessions are never merged).

The table is least-recently-used, bounded in entries and in bytes, registered with the memory guard
(docs/deploy.md#memory). It is filled while a request is decoded, before the request may be refused:
what it holds are facts about traces, not detector state, and a refused request that is sent again
finds them still true. It also answers the admin API: a client that knows only its trace id
(``otelloop.client.check_verdict`` inside a span) finds the conversation's session through it.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from typing import Any

from otelloop.bounds import register

#: Traces whose conversation is remembered, and the bytes the table may account for.
MAX_TRACES = 65_536
MAX_BYTES = 16 << 20
#: Estimated bytes of one entry besides its strings: the ordered dict's slot and link.
_ENTRY_BYTES = 120


class TraceJoins:
    """Trace id → the conversation (session id) the trace was first seen with.

    Args:
        max_traces: traces remembered; the least recently seen is forgotten beyond it.
        max_bytes: estimated bytes kept; the least recently seen are forgotten beyond it.
    """

    __slots__ = ("__weakref__", "_joins", "max_traces", "max_bytes", "nbytes")

    def __init__(self, max_traces: int = MAX_TRACES, max_bytes: int = MAX_BYTES) -> None:
        self._joins: OrderedDict[str, str] = OrderedDict()
        self.max_traces = max_traces
        self.max_bytes = max_bytes
        self.nbytes = 0
        register(self)

    def __len__(self) -> int:
        return len(self._joins)

    def get(self, trace_id: str) -> str | None:
        """The conversation ``trace_id`` was seen with, or None."""
        return self._joins.get(trace_id)

    def join(self, steps: list[tuple[Any, Any, Any]]) -> list[tuple[str, str]]:
        """Give each step (``(position, step, span info)``, as the pipeline holds them) whose span carries
        no conversation id the conversation its trace was seen with, in this request or earlier; remember
        the traces seen with one. Returns the (trace, conversation) pairs first seen in these steps: steps of
        such a trace that came earlier are in a session named by the trace, which the pipeline may adopt."""
        joins = self._joins
        local: dict[str, str] | None = None
        new: list[tuple[str, str]] = []
        for item in steps:
            step = item[1]
            trace = step.trace_id
            if step.session != trace and trace:
                if local is None:
                    local = {}
                if trace not in local:
                    local[trace] = joins.get(trace) or step.session
        if local:
            for trace, session in local.items():
                if trace in joins:
                    joins.move_to_end(trace)
                else:
                    self._remember(trace, session)
                    new.append((trace, session))
        elif not joins:
            return new
        for item in steps:
            step = item[1]
            trace = step.trace_id
            if step.session == trace:
                joined = local.get(trace) if local is not None else None
                if joined is None:
                    joined = joins.get(trace)
                if joined is not None:
                    step.session = joined
        return new

    def _remember(self, trace: str, session: str) -> None:
        joins = self._joins
        joins[trace] = session
        self.nbytes += _ENTRY_BYTES + sys.getsizeof(trace) + sys.getsizeof(session)
        while joins and (len(joins) > self.max_traces or self.nbytes > self.max_bytes):
            old, was = joins.popitem(last=False)
            self.nbytes -= _ENTRY_BYTES + sys.getsizeof(old) + sys.getsizeof(was)

    def clear(self) -> None:
        """Forget every join (the memory guard sheds it; traces seen afterwards join again)."""
        self._joins.clear()
        self.nbytes = 0
