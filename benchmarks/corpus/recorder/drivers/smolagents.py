"""smolagents, traced by OpenInference (``smolagents``).

``ToolCallingAgent`` with ``smolagents.Tool`` subclasses; the LLM is smolagents' ``OpenAIServerModel``
talking to a scripted OpenAI-compatible endpoint on 127.0.0.1 (OpenInference instruments smolagents'
own model classes, so a model subclass of one's own would produce no LLM spans; the scripted endpoint
keeps the real model class, HTTP client and usage reporting). A smolagents agent ends by calling its
``final_answer`` tool. Multi-agent runs use managed agents: a manager calls the other agents as tools.
"""

from __future__ import annotations

import time
from http.server import ThreadingHTTPServer
from typing import Any

from ..endpoint import chat_completion, serve_json, tool_call
from ..script import Scenario
from .common import RunContext, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    return instrumented_capture(service, SmolagentsInstrumentor)


def prepare(sc: Scenario) -> Scenario:
    return sc.delegated("manager", "") if sc.multi_agent else sc


def _serve(ctx: RunContext) -> ThreadingHTTPServer:
    """The scripted endpoint: ``POST /<agent>/v1/chat/completions`` answers with that agent's next turn."""
    brain = ctx.brain

    def reply(n: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        plan = brain.take(path.split("/")[1])
        time.sleep(plan.delay_s)
        t = plan.turn
        calls = [tool_call(cid, c.tool, c.args) for c, cid in zip(t.calls, plan.call_ids, strict=True)]
        if not calls:  # a smolagents agent answers through its final_answer tool
            calls = [tool_call(f"call_{plan.index:03d}_f", "final_answer", {"answer": t.text})]
            ctx.note("final_answer", {"answer": t.text}, t.text)
        message = {"role": "assistant", "content": t.text or None, "tool_calls": calls}
        return 200, chat_completion(plan.index, MODEL, message, "tool_calls", plan.input_tokens,
                                    plan.output_tokens)

    return serve_json(reply)


def run(ctx: RunContext) -> str:
    from smolagents import OpenAIServerModel, Tool, ToolCallingAgent

    sc = ctx.scenario
    server = _serve(ctx)
    port = server.server_address[1]

    def model(agent: str) -> Any:
        return OpenAIServerModel(MODEL, api_base=f"http://127.0.0.1:{port}/{agent}/v1", api_key="sk-local",
                                 client_kwargs={"max_retries": 0})

    def make_tool(name: str) -> Tool:
        spec = sc.tools[name].spec
        run_tool = ctx.tool_function(name)

        def forward(self: Any, **kwargs: Any) -> str:
            return run_tool(**{k: v for k, v in kwargs.items() if v is not None})

        cls = type(f"{name.title().replace('_', '')}Tool", (Tool,), {
            "name": name, "description": spec.description, "output_type": "string",
            "inputs": {p: {"type": "string", "description": d, **({} if p in spec.required else {"nullable": True})}
                       for p, (_, d) in spec.params.items()},
            "forward": forward, "skip_forward_signature_validation": True})
        return cls()

    tools = [make_tool(n) for n in sc.tools]
    # a manager calls its managed agents like tools, but smolagents runs them as agents: an AGENT span,
    # no TOOL span, so they are not tool calls of the run
    ctx.extra_tools.update(n for n in sc.agents if n != "manager")
    workers = {name: ToolCallingAgent(tools=tools, model=model(name), name=name, description=instr,
                                      max_steps=500, verbosity_level=-1, instructions=instr)
               for name, instr in sc.agents.items() if name != "manager"}
    try:
        if "manager" in sc.agents:
            main = ToolCallingAgent(tools=[], model=model("manager"), managed_agents=list(workers.values()),
                                    max_steps=500, verbosity_level=-1, instructions=sc.agents["manager"])
        else:
            main = workers[sc.first_agent]
        return str(main.run(sc.task))
    finally:
        server.shutdown()
