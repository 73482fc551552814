"""openai-agents, traced by OpenInference (``openai_agents``).

Agents are ``agents.Agent`` objects with ``function_tool`` tools (the SDK's own error handling: a failing
tool returns an error message to the model and marks its span); multi-agent runs use the SDK's native
handoffs. The model is a custom ``agents.models.interface.Model`` that answers from the script and
records a ``generation`` span the way the SDK's Chat Completions model does (model name, messages,
usage).
"""

from __future__ import annotations

import asyncio
import inspect
import json
from typing import Any

from .common import RunContext, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    # Exclusive by default: replaces the SDK's exporter to the OpenAI backend, so nothing leaves the machine.
    return instrumented_capture(service, OpenAIAgentsInstrumentor)


def run(ctx: RunContext) -> str:
    from agents import Agent, RunConfig, Runner, function_tool
    from agents.items import ModelResponse
    from agents.models.chatcmpl_converter import Converter
    from agents.models.interface import Model
    from agents.tracing import generation_span
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    sc = ctx.scenario
    brain = ctx.brain

    class ScriptedModel(Model):
        def __init__(self, agent: str) -> None:
            self.agent = agent

        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                               output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                               conversation_id: Any = None, prompt: Any = None) -> ModelResponse:
            with generation_span(model=MODEL, model_config={"temperature": 0.2, "base_url": "https://api.openai.com/v1/"},
                                 disabled=tracing.is_disabled()) as span:
                plan = brain.take(self.agent)
                await asyncio.sleep(plan.delay_s)
                t = plan.turn
                items: list[Any] = []
                message: dict[str, Any] = {"role": "assistant", "content": t.text or None}
                if t.text:
                    items.append(ResponseOutputMessage(
                        id=f"msg_{plan.index:03d}", type="message", role="assistant", status="completed",
                        content=[ResponseOutputText(type="output_text", text=t.text, annotations=[])]))
                calls = [(c.tool, json.dumps(c.args), cid) for c, cid in zip(t.calls, plan.call_ids, strict=True)]
                if t.handoff:
                    handoff = next(h for h in handoffs if h.agent_name == t.handoff)
                    calls.append((handoff.tool_name, json.dumps({}), f"call_{plan.index:03d}_h"))
                    ctx.note(handoff.tool_name, {}, t.handoff)
                for name, args, cid in calls:
                    items.append(ResponseFunctionToolCall(type="function_call", id=f"fc_{cid}", call_id=cid,
                                                          name=name, arguments=args, status="completed"))
                if calls:
                    message["tool_calls"] = [{"id": cid, "type": "function",
                                              "function": {"name": n, "arguments": a}} for n, a, cid in calls]
                if tracing.include_data():
                    msgs = Converter.items_to_messages(input)
                    if system_instructions:
                        msgs = [{"role": "system", "content": system_instructions}, *msgs]
                    span.span_data.input = msgs
                    span.span_data.output = [message]
                span.span_data.usage = {"input_tokens": plan.input_tokens, "output_tokens": plan.output_tokens}
                usage = Usage(requests=1, input_tokens=plan.input_tokens, output_tokens=plan.output_tokens,
                              total_tokens=plan.input_tokens + plan.output_tokens)
                return ModelResponse(output=items, usage=usage, response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the corpus runs are not streamed")

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        fn = ctx.tool_function(name)
        params = [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, annotation=str,
                                    **({} if p in spec.required else {"default": ""}))
                  for p in spec.params]
        fn.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
        fn.__annotations__ = {**{p: str for p in spec.params}, "return": str}
        fn.__doc__ = spec.description + "\n\nArgs:\n" + "".join(
            f"    {p}: {d}\n" for p, (_, d) in spec.params.items())
        fn.__name__ = name
        return function_tool(fn, name_override=name, description_override=spec.description,
                             strict_mode=False)

    tools = [make_tool(n) for n in sc.tools]
    agents: dict[str, Any] = {}
    for name, instructions in sc.agents.items():
        agents[name] = Agent(name=name, instructions=instructions, tools=tools, model=ScriptedModel(name))
    if len(agents) > 1:
        for name, agent in agents.items():
            agent.handoffs = [a for n, a in agents.items() if n != name]
    result = asyncio.run(Runner.run(agents[sc.first_agent], sc.task, max_turns=500,
                                    run_config=RunConfig(workflow_name=f"{sc.cls} task")))
    return str(result.final_output)
