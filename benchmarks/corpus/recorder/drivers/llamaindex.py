"""LlamaIndex, traced by OpenInference (``llamaindex``).

A ``FunctionAgent`` (LlamaIndex's agent workflow) with ``FunctionTool`` tools; the LLM is LlamaIndex's
own ``MockFunctionCallingLLM`` with a response generator that answers from the script (tool calls as
``ToolCallBlock`` blocks). ``LlamaIndexInstrumentor`` traces through LlamaIndex's instrumentation
dispatcher, so every LLM class is traced. A failing tool raises; the agent turns the exception into a
``ToolOutput`` with ``is_error`` set and hands it to the model.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .common import RunContext, instrumented_capture


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    return instrumented_capture(service, LlamaIndexInstrumentor)


def run(ctx: RunContext) -> str:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.tools import FunctionTool
    from pydantic import Field, create_model

    sc = ctx.scenario
    brain = ctx.brain

    def respond(messages: Any, **kwargs: Any) -> Any:
        plan = brain.take()
        time.sleep(plan.delay_s)
        t = plan.turn
        blocks: list[Any] = [TextBlock(text=t.text)] if t.text else []
        blocks += [ToolCallBlock(tool_call_id=cid, tool_name=c.tool, tool_kwargs=dict(c.args))
                   for c, cid in zip(t.calls, plan.call_ids, strict=True)]
        return ChatMessage(role="assistant", blocks=blocks)

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        fields: dict[str, Any] = {p: (str, Field(..., description=d)) if p in spec.required
                                  else (str, Field("", description=d)) for p, (_, d) in spec.params.items()}
        schema = create_model(f"{name}_args", **fields)
        return FunctionTool.from_defaults(fn=ctx.tool_function(name), name=name, description=spec.description,
                                          fn_schema=schema)

    llm = MockFunctionCallingLLM(response_generator=respond, is_chat_model=True)
    agent = FunctionAgent(name=sc.first_agent, llm=llm, tools=[make_tool(n) for n in sc.tools],
                          system_prompt=sc.agents[sc.first_agent], streaming=False)

    async def go() -> str:
        handler = agent.run(user_msg=sc.task, max_iterations=1000)
        result = await handler
        return str(result.response.content)
    return asyncio.run(go())
