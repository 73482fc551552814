"""pydantic-ai with its native OpenTelemetry instrumentation (``pydantic_ai``).

``Agent.instrument_all(InstrumentationSettings(tracer_provider=...))``; the LLM is a ``FunctionModel``
answering from the script with usage. Tools are ``Tool.from_schema`` tools; a failing tool raises
``ModelRetry`` (pydantic-ai's way to send an error back to the model). Multi-agent runs use agent
delegation: a coordinator agent whose tools ``ask_<agent>`` run the other agents.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ..script import Scenario
from .common import RunContext, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    # the instrumentation is switched on in run(), with the capture's provider
    return instrumented_capture(service)


def prepare(sc: Scenario) -> Scenario:
    return sc.delegated("coordinator", "ask_") if sc.multi_agent else sc


def run(ctx: RunContext) -> str:
    from pydantic_ai import Agent, ModelRetry, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings
    from pydantic_ai.usage import RequestUsage

    sc = ctx.scenario
    brain = ctx.brain
    # pydantic-ai's switch for every agent (what `logfire.instrument_pydantic_ai()` sets too)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=ctx.capture.provider, include_content=True))

    def model_for(agent: str) -> FunctionModel:
        async def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
            plan = brain.take(agent)
            await asyncio.sleep(plan.delay_s)
            t = plan.turn
            parts: list[Any] = [ToolCallPart(c.tool, dict(c.args), tool_call_id=cid)
                                for c, cid in zip(t.calls, plan.call_ids, strict=True)]
            if not parts:
                parts = [TextPart(t.text)]
            return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=plan.input_tokens,
                                                                 output_tokens=plan.output_tokens),
                                 model_name=MODEL)
        return FunctionModel(respond, model_name=MODEL)

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        tool = Tool.from_schema(ctx.tool_function(name, ModelRetry), name=name, description=spec.description,
                                json_schema=spec.schema())
        tool.max_retries = 1000  # the scripted agent decides when to give up, as the script says
        return tool

    tools = [make_tool(n) for n in sc.tools]
    workers = {name: Agent(model_for(name), name=name, instructions=instr, tools=tools,
                           retries=1000)
               for name, instr in sc.agents.items() if name != "coordinator"}
    if "coordinator" in sc.agents:
        def delegate(agent: str) -> Any:
            tool_name = f"ask_{agent}"

            async def ask(task: str) -> str:
                turn, start = brain.current_turn, time.time_ns()
                result = await workers[agent].run(task)
                ctx.note(tool_name, {"task": task}, str(result.output), turn=turn, start=start)
                return str(result.output)
            return Tool.from_schema(ask, name=tool_name, description=f"Ask the {agent} to do a task and report back.",
                                    json_schema={"type": "object", "properties": {
                                        "task": {"type": "string", "description": "What to do."}},
                                        "required": ["task"]})
        main = Agent(model_for("coordinator"), name="coordinator", instructions=sc.agents["coordinator"],
                     tools=[delegate(a) for a in workers])
    else:
        main = workers[sc.first_agent]
    result = asyncio.run(main.run(sc.task, usage_limits=None))
    return str(result.output)
