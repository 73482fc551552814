"""LangGraph traced by OpenLLMetry's LangChain instrumentation (``langgraph_openllmetry``).

The graph and the scripted chat model are the ``langgraph`` driver's; only the instrumentation differs:
``opentelemetry-instrumentation-langchain``'s ``LangchainInstrumentor`` (Traceloop), which writes
``traceloop.span.kind`` and the callback records ``traceloop.entity.input`` / ``traceloop.entity.output``.
Content is on unless ``TRACELOOP_TRACE_CONTENT=false``.
"""

from __future__ import annotations

from typing import Any

from .common import instrumented_capture
from .langgraph import run  # noqa: F401  (the same graph)


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    return instrumented_capture(service, LangchainInstrumentor)
