"""AutoGen AgentChat, traced by OpenInference (``autogen``).

An ``AssistantAgent`` with ``BaseTool`` tools (argument models built from the scenario's schema); the
LLM is a subclass of AutoGen's ``ReplayChatCompletionClient`` whose ``create`` answers from the script
(``FunctionCall`` lists, usage, a realistic delay). ``AutogenAgentChatInstrumentor``
(``openinference-instrumentation-autogen-agentchat``) traces the agent, its model calls and its tool
calls with their arguments and results. AutoGen's own tracing (``autogen-core``: ``execute_tool``,
``invoke_agent`` spans through the global ``TracerProvider``) records no tool arguments or results, so
it is left off here (no global provider is set): the OpenInference spans are the ones with content.
A failing tool raises; the agent turns it into a ``FunctionExecutionResult`` with ``is_error`` set.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from .common import RunContext, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor

    return instrumented_capture(service, AutogenAgentChatInstrumentor)


def run(ctx: RunContext) -> str:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_core import CancellationToken, FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_core.tools import BaseTool
    from autogen_ext.models.replay import ReplayChatCompletionClient
    from pydantic import BaseModel, Field, create_model

    sc = ctx.scenario
    brain = ctx.brain

    class ScriptedClient(ReplayChatCompletionClient):
        async def create(self, messages: Any, **kwargs: Any) -> CreateResult:
            plan = brain.take()
            await asyncio.sleep(plan.delay_s)
            t = plan.turn
            usage = RequestUsage(prompt_tokens=plan.input_tokens, completion_tokens=plan.output_tokens)
            self._cur_usage = usage
            if t.calls:
                calls = [FunctionCall(id=cid, name=c.tool, arguments=json.dumps(c.args))
                         for c, cid in zip(t.calls, plan.call_ids, strict=True)]
                return CreateResult(finish_reason="function_calls", content=calls, usage=usage, cached=False,
                                    thought=t.text or None)
            return CreateResult(finish_reason="stop", content=t.text, usage=usage, cached=False)

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        fields: dict[str, Any] = {p: (str, Field(..., description=d)) if p in spec.required
                                  else (str, Field("", description=d)) for p, (_, d) in spec.params.items()}
        args_model = create_model(f"{name}_args", **fields)
        execute = ctx.tool_function(name)

        class ScenarioTool(BaseTool[BaseModel, str]):
            def __init__(self) -> None:
                super().__init__(args_model, str, name, spec.description)

            async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> str:
                return execute(**args.model_dump())
        return ScenarioTool()

    info = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.GPT_4O,
                     structured_output=False)
    agent = AssistantAgent(sc.first_agent, model_client=ScriptedClient([], model_info=info),
                           tools=[make_tool(n) for n in sc.tools], system_message=sc.agents[sc.first_agent],
                           reflect_on_tool_use=False, max_tool_iterations=1000)

    async def go() -> str:
        result = await agent.run(task=sc.task)
        return str(result.messages[-1].content)
    return asyncio.run(go())
