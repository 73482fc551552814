"""LangGraph, traced by OpenInference (``langgraph_openinference``) or LangSmith's OTel mode
(``langgraph_langsmith``).

The graph is what a LangGraph user writes: per agent an LLM node and a ``ToolNode``, conditional edges
that route on the LLM's tool calls, and (multi-agent runs) handoff tools ``transfer_to_<agent>`` whose
result routes the graph to that agent's node. The LLM is a ``BaseChatModel`` subclass that answers from
the script, with usage metadata and a realistic delay.
"""



import os
import time
from typing import Annotated, Any, TypedDict

from .common import RunContext, handoff_tool_name, instrumented_capture

MODEL = "gpt-4o-mini"


def setup(dialect: str, service: str) -> tuple[Any, Any]:
    """Instrument before the framework is imported; returns (capture, finish hook)."""
    if dialect == "langgraph_langsmith":
        os.environ.update(
            LANGSMITH_TRACING="true", LANGSMITH_TRACING_MODE="otel",
            LANGSMITH_API_KEY="dummy",
            # OTel mode sends nothing to LangSmith; a closed local port makes sure of it.
            LANGSMITH_ENDPOINT="http://127.0.0.1:9",
            # LangSmith copies LANGSMITH_* variables into span metadata and, unless told, the git revision.
            LANGSMITH_REVISION_ID="otelloop-corpus",
        )

        def finish() -> None:
            from langchain_core.tracers.langchain import wait_for_all_tracers

            wait_for_all_tracers()
        return instrumented_capture(service, set_global=True, finish=finish)
    from openinference.instrumentation.langchain import LangChainInstrumentor

    return instrumented_capture(service, LangChainInstrumentor)


def run(ctx: RunContext) -> str:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import StructuredTool
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode

    sc = ctx.scenario
    brain = ctx.brain
    agents = list(sc.agents) if sc.multi_agent else [sc.first_agent]

    class ScriptedChatModel(BaseChatModel):
        agent: str
        model_name: str = MODEL

        @property
        def _llm_type(self) -> str:
            return "openai-chat"

        @property
        def _identifying_params(self) -> dict[str, Any]:
            return {"model_name": self.model_name}

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list[Any], stop: Any = None, run_manager: Any = None, **kw: Any) -> ChatResult:
            plan = brain.take(self.agent)
            time.sleep(plan.delay_s)
            t = plan.turn
            calls = [{"name": c.tool, "args": dict(c.args), "id": cid, "type": "tool_call"}
                     for c, cid in zip(t.calls, plan.call_ids, strict=True)]
            if t.handoff:
                calls.append({"name": handoff_tool_name(t.handoff), "args": {"reason": t.text},
                              "id": f"call_{plan.index:03d}_h", "type": "tool_call"})
            usage = {"input_tokens": plan.input_tokens, "output_tokens": plan.output_tokens,
                     "total_tokens": plan.input_tokens + plan.output_tokens}
            msg = AIMessage(content=t.text, tool_calls=calls,
                            usage_metadata=usage,
                            response_metadata={"model_name": self.model_name,
                                               "finish_reason": "tool_calls" if calls else "stop"})
            return ChatResult(generations=[ChatGeneration(message=msg)],
                              llm_output={"model_name": self.model_name,
                                          "token_usage": {"prompt_tokens": plan.input_tokens,
                                                          "completion_tokens": plan.output_tokens,
                                                          "total_tokens": plan.input_tokens + plan.output_tokens}})

    def make_tool(name: str) -> Any:
        spec = sc.tools[name].spec
        return StructuredTool.from_function(func=ctx.tool_function(name), name=name,
                                            description=spec.description, args_schema=spec.schema())

    def make_handoff(target: str) -> Any:
        name = handoff_tool_name(target)

        def fn(reason: str = "") -> str:
            text = f"Transferred to {target}."
            ctx.note(name, {"reason": reason}, text)
            return text
        return StructuredTool.from_function(
            func=fn, name=name, description=f"Hand the conversation over to the {target}.",
            args_schema={"type": "object", "properties": {"reason": {"type": "string",
                                                                     "description": "What the next agent should do."}},
                         "required": []})

    tools = [make_tool(n) for n in sc.tools]

    class State(TypedDict):
        messages: Annotated[list[Any], add_messages]

    graph = StateGraph(State)
    for agent in agents:
        model = ScriptedChatModel(agent=agent)
        handoffs = [make_handoff(a) for a in agents if a != agent] if len(agents) > 1 else []
        system = SystemMessage(sc.agents.get(agent, ""))
        node = agent if len(agents) > 1 else "agent"
        tools_node = f"{agent}_tools" if len(agents) > 1 else "tools"

        def call_model(state: State, model: Any = model, system: Any = system,
                       handoffs: list[Any] = handoffs) -> dict[str, Any]:
            return {"messages": [model.bind_tools(tools + handoffs).invoke([system, *state["messages"]])]}

        def route(state: State, tools_node: str = tools_node) -> str:
            return tools_node if state["messages"][-1].tool_calls else END

        def after_tools(state: State, node: str = node) -> str:
            last = [m for m in state["messages"] if isinstance(m, ToolMessage)][-1]
            if last.name and last.name.startswith("transfer_to_"):
                return last.name.removeprefix("transfer_to_")
            return node

        graph.add_node(node, call_model)
        graph.add_node(tools_node, ToolNode(tools + handoffs, handle_tool_errors=True))
        graph.add_conditional_edges(node, route, [tools_node, END])
        graph.add_conditional_edges(tools_node, after_tools, agents if len(agents) > 1 else [node])
    graph.add_edge(START, sc.first_agent if len(agents) > 1 else "agent")
    app = graph.compile()
    result = app.invoke({"messages": [HumanMessage(sc.task)]}, {"recursion_limit": 1000})
    answer: str = result["messages"][-1].content
    return answer
