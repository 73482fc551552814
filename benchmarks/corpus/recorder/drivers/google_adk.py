"""Google ADK with its native OpenTelemetry tracing (``google_adk``).

An ``LlmAgent`` run by an ``InMemoryRunner``; tools are ``BaseTool`` subclasses declaring the scenario's
JSON schema; the LLM is a ``BaseLlm`` subclass answering from the script (``function_call`` parts, usage
metadata, a realistic delay). ADK traces through the global ``TracerProvider`` (``invoke_agent``,
``generate_content``/``call_llm`` and ``execute_tool`` spans). Since ADK 2 the spans follow the GenAI
conventions and carry content only when ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` routes it
to spans (``SPAN_ONLY`` or ``SPAN_AND_EVENT``); the recording sets ``SPAN_ONLY``, so tool spans carry
``gen_ai.tool.call.arguments`` and ``gen_ai.tool.call.result``. A failing tool answers
``{"error": message}``, the way ADK's tools report failures to the model.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from .common import RunContext, ToolFailed, instrumented_capture

MODEL = "gemini-2.5-flash"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "SPAN_ONLY"
    return instrumented_capture(service, set_global=True)


def run(ctx: RunContext) -> str:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.adk.tools.base_tool import BaseTool
    from google.genai import types

    sc = ctx.scenario
    brain = ctx.brain

    class ScriptedLlm(BaseLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            plan = brain.take()
            await asyncio.sleep(plan.delay_s)
            t = plan.turn
            parts = [types.Part(text=t.text)] if t.text else []
            parts += [types.Part(function_call=types.FunctionCall(id=cid, name=c.tool, args=dict(c.args)))
                      for c, cid in zip(t.calls, plan.call_ids, strict=True)]
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=plan.input_tokens, candidates_token_count=plan.output_tokens,
                total_token_count=plan.input_tokens + plan.output_tokens)
            yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage,
                              model_version=MODEL)

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec

        class ScenarioTool(BaseTool):
            def _get_declaration(self) -> Any:
                return types.FunctionDeclaration(name=name, description=spec.description,
                                                 parameters_json_schema=spec.schema())

            async def run_async(self, *, args: dict[str, Any], tool_context: Any) -> Any:
                try:
                    return ctx.execute(name, dict(args))
                except ToolFailed as e:
                    return {"error": str(e)}
        return ScenarioTool(name=name, description=spec.description)

    agent = LlmAgent(name=sc.first_agent, model=ScriptedLlm(model=MODEL), instruction=sc.agents[sc.first_agent],
                     tools=[make_tool(n) for n in sc.tools])
    runner = InMemoryRunner(agent=agent, app_name="shop-ops")

    async def go() -> str:
        session = await runner.session_service.create_session(app_name="shop-ops", user_id="u1")
        text = ""
        msg = types.Content(role="user", parts=[types.Part(text=sc.task)])
        async for event in runner.run_async(user_id="u1", session_id=session.id, new_message=msg):
            if event.content and event.content.parts:
                text = "".join(p.text or "" for p in event.content.parts) or text
        return text
    return asyncio.run(go())
