"""Agno, traced by OpenInference (``agno``).

An ``agno.agent.Agent`` with ``agno.tools.Function`` tools; the LLM is Agno's own ``OpenAIChat`` model
talking to the scripted OpenAI-compatible endpoint on 127.0.0.1 (OpenInference's ``AgnoInstrumentor``
traces Agno's own model classes, found under ``agno.models`` when it is switched on, so a model class of
one's own would leave no LLM spans). A failing tool raises; Agno turns the exception into the tool's
result with ``tool_call_error`` set and hands it to the model.
"""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer
from typing import Any

from ..endpoint import chat_completion, serve_json, tool_call
from .common import RunContext, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from openinference.instrumentation.agno import AgnoInstrumentor

    return instrumented_capture(service, AgnoInstrumentor)


def _serve(ctx: RunContext) -> ThreadingHTTPServer:
    brain = ctx.brain

    def reply(n: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        plan = brain.take()
        time.sleep(plan.delay_s)
        t = plan.turn
        calls = [tool_call(cid, c.tool, c.args) for c, cid in zip(t.calls, plan.call_ids, strict=True)]
        message: dict[str, Any] = {"role": "assistant", "content": t.text or None}
        if calls:
            message["tool_calls"] = calls
        return 200, chat_completion(plan.index, MODEL, message, "tool_calls" if calls else "stop",
                                    plan.input_tokens, plan.output_tokens)

    return serve_json(reply)


def run(ctx: RunContext) -> str:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.tools.function import Function

    sc = ctx.scenario
    server = _serve(ctx)
    port = server.server_address[1]

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        return Function(name=name, description=spec.description, parameters=spec.schema(),
                        entrypoint=ctx.tool_function(name))

    try:
        agent = Agent(name=sc.first_agent, model=OpenAIChat(id=MODEL, base_url=f"http://127.0.0.1:{port}/v1",
                                                           api_key="sk-local", max_retries=0),
                      tools=[make_tool(n) for n in sc.tools], instructions=sc.agents[sc.first_agent],
                      tool_call_limit=None, telemetry=False)
        out = agent.run(sc.task)
        return str(out.content)
    finally:
        server.shutdown()
