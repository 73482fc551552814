"""strands-agents with its built-in OpenTelemetry tracer (``strands``).

Strands traces through the global ``TracerProvider``. The model is a custom ``strands.models.Model``
that streams the scripted turn as Bedrock-style events with usage metadata; tools are
``PythonAgentTool`` objects returning tool results (status ``error`` when the real tool failed).
Multi-agent runs use strands' ``Swarm``: agents hand over with its ``handoff_to_agent`` tool.
"""

from __future__ import annotations

import json
from typing import Any

from ..script import Scenario, Turn
from .common import RunContext, ToolFailed, instrumented_capture

MODEL = "us.anthropic.claude-sonnet-4-20250514-v1:0"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    return instrumented_capture(service, set_global=True)  # strands' tracer uses the global provider


def prepare(sc: Scenario) -> Scenario:
    """In a Swarm the agent that called ``handoff_to_agent`` gets the tool's result and answers once more
    before the next agent starts: that answer follows every handoff turn."""
    if not sc.multi_agent:
        return sc
    turns: list[Turn] = []
    for t in sc.turns:
        turns.append(t)
        if t.handoff:
            turns.append(Turn(t.agent, (), f"Handed over to the {t.handoff}."))
    from dataclasses import replace

    return replace(sc, turns=turns)


def run(ctx: RunContext) -> str:
    from strands import Agent
    from strands.models import Model
    from strands.tools.tools import PythonAgentTool

    sc = ctx.scenario
    brain = ctx.brain

    class ScriptedModel(Model):
        def __init__(self, agent: str) -> None:
            self.agent = agent
            self.config = {"model_id": MODEL}

        def update_config(self, **model_config: Any) -> None:
            self.config.update(model_config)

        def get_config(self) -> Any:
            return self.config

        def structured_output(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

        async def stream(self, messages: Any, tool_specs: Any = None, system_prompt: Any = None, **kwargs: Any) -> Any:
            import asyncio

            plan = brain.take(self.agent)
            await asyncio.sleep(plan.delay_s)
            t = plan.turn
            yield {"messageStart": {"role": "assistant"}}
            if t.text:
                yield {"contentBlockStart": {"start": {}}}
                yield {"contentBlockDelta": {"delta": {"text": t.text}}}
                yield {"contentBlockStop": {}}
            uses = [(c.tool, dict(c.args), cid) for c, cid in zip(t.calls, plan.call_ids, strict=True)]
            if t.handoff:
                args = {"agent_name": t.handoff, "message": t.text}
                uses.append(("handoff_to_agent", args, f"tooluse_{plan.index:03d}_h"))
                ctx.note("handoff_to_agent", args, t.handoff)
            for name, args, cid in uses:
                yield {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": cid}}}}
                yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
                yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use" if uses else "end_turn"}}
            yield {"metadata": {"usage": {"inputTokens": plan.input_tokens, "outputTokens": plan.output_tokens,
                                          "totalTokens": plan.input_tokens + plan.output_tokens},
                                "metrics": {"latencyMs": int(plan.delay_s * 1000)}}}

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec

        def fn(tool_use: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                text = ctx.execute(name, tool_use["input"])
                return {"toolUseId": tool_use["toolUseId"], "status": "success", "content": [{"text": text}]}
            except ToolFailed as e:
                return {"toolUseId": tool_use["toolUseId"], "status": "error", "content": [{"text": f"Error: {e}"}]}
        return PythonAgentTool(name, {"name": name, "description": spec.description,
                                      "inputSchema": {"json": spec.schema()}}, fn)

    agents = {name: Agent(name=name, model=ScriptedModel(name), system_prompt=instr,
                          tools=[make_tool(n) for n in sc.tools], callback_handler=None)
              for name, instr in sc.agents.items()}
    if not sc.multi_agent:
        result = agents[sc.first_agent](sc.task)
        return _text(result.message)
    from strands.multiagent import Swarm

    swarm = Swarm(list(agents.values()), entry_point=agents[sc.first_agent], max_handoffs=200, max_iterations=200,
                  execution_timeout=3600, node_timeout=3600)
    result = swarm(sc.task)
    last = result.node_history[-1].node_id
    return _text(result.results[last].result.message)


def _text(message: Any) -> str:
    return "".join(block.get("text", "") for block in message.get("content", []))
