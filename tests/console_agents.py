"""Agents instrumented with the real OpenTelemetry SDK, for the console tests: a looping one, a healthy one,
and one whose tool name is an HTML injection attempt. Each runs as one trace, so its session id is its trace id.
"""

from __future__ import annotations

from typing import Any

#: A tool name that would run script if a page inserted it as HTML.
HOSTILE_TOOL = "<img src=x onerror=alert(1)>"
#: A secret a looping command carries; it must never reach the console or the API.
SECRET = "sk-live-7Qx9Lm2Vb8Rt4Kp6Zw1Nc3Hd5"


def provider(grpc_endpoint: str, service: str, resource: dict[str, str] | None = None) -> Any:
    """An SDK tracer provider exporting to ``grpc_endpoint``, its resource naming ``service`` and carrying
    ``resource`` (``deployment.environment.name``, …) too."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    p = TracerProvider(resource=Resource.create({"service.name": service, **(resource or {})}))
    p.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=grpc_endpoint, insecure=True)))
    return p


def _tool(tracer: Any, name: str, args: str, result: str, error: bool = False) -> None:
    from opentelemetry.trace import Status, StatusCode

    with tracer.start_as_current_span(f"execute_tool {name}") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", name)
        span.set_attribute("gen_ai.tool.call.arguments", args)
        span.set_attribute("gen_ai.tool.call.result", result)
        if error:
            span.set_status(Status(StatusCode.ERROR, "exit status 1: connection refused"))


def _turn(tracer: Any, node: str, output: str) -> None:
    with tracer.start_as_current_span(f"invoke_agent {node}") as span:
        span.set_attribute("gen_ai.operation.name", "invoke_agent")
        span.set_attribute("gen_ai.agent.name", node)
        span.set_attribute("gen_ai.output.messages", output)


def looping_agent(grpc_endpoint: str, service: str = "research-agent", cycles: int = 3,
                  resource: dict[str, str] | None = None) -> str:
    """A planner/coder graph going round in circles, a failing command with a bearer token in it, and the
    same search six times; returns its session (trace) id."""
    p = provider(grpc_endpoint, service, resource)
    tracer = p.get_tracer("console-test")
    with tracer.start_as_current_span("session") as root:
        for k in range(cycles + 1):
            _turn(tracer, "planner", "the same plan again")  # same output three turns running: stalled
            _turn(tracer, "coder", f"patch {k}")
        command = f'{{"command": "curl -H \\"Authorization: Bearer {SECRET}\\" https://api.internal/v1/run"}}'
        for _ in range(4):
            _tool(tracer, "bash", command, "curl: (7) Failed to connect", error=True)
        for _ in range(6):
            _tool(tracer, "search_web", '{"query": "weather in Paris"}', "no results")
        trace_id = format(root.get_span_context().trace_id, "032x")
    p.shutdown()
    return trace_id


def healthy_agent(grpc_endpoint: str, service: str = "billing-agent", resource: dict[str, str] | None = None) -> str:
    p = provider(grpc_endpoint, service, resource)
    tracer = p.get_tracer("console-test")
    with tracer.start_as_current_span("session") as root:
        for i, tool in enumerate(["read_file", "search_web", "write_file", "run_tests"]):
            _tool(tracer, tool, f'{{"step": {i}}}', f"result {i}")
        trace_id = format(root.get_span_context().trace_id, "032x")
    p.shutdown()
    return trace_id


def hostile_agent(grpc_endpoint: str, service: str = "hostile-agent") -> str:
    """An agent whose tool is named like an HTML element with a script handler, called in a loop."""
    p = provider(grpc_endpoint, service)
    tracer = p.get_tracer("console-test")
    with tracer.start_as_current_span("session") as root:
        for _ in range(6):
            _tool(tracer, HOSTILE_TOOL, '{"q": "<script>alert(2)</script>"}', "<b>bold</b>")
        trace_id = format(root.get_span_context().trace_id, "032x")
    p.shutdown()
    return trace_id


def support_agent_without_content(grpc_endpoint: str, service: str = "support-agent", reservations: int = 9) -> str:
    """A support agent reading ``reservations`` different reservations, instrumented as OTel GenAI
    instrumentations do by default: operation, model, tool name and call id, tokens — no arguments, no
    results, no messages. Returns its session (trace) id."""
    p = provider(grpc_endpoint, service)
    tracer = p.get_tracer("console-test")
    with tracer.start_as_current_span("invoke_agent support") as root:
        root.set_attribute("gen_ai.operation.name", "invoke_agent")
        root.set_attribute("gen_ai.agent.name", "support")
        for i in range(reservations + 1):
            with tracer.start_as_current_span("chat gpt-4o") as chat:
                chat.set_attribute("gen_ai.operation.name", "chat")
                chat.set_attribute("gen_ai.request.model", "gpt-4o")
                chat.set_attribute("gen_ai.usage.input_tokens", 900 + 40 * i)
                chat.set_attribute("gen_ai.usage.output_tokens", 30)
            if i == reservations:
                break
            with tracer.start_as_current_span("execute_tool get_reservation_details") as call:
                call.set_attribute("gen_ai.operation.name", "execute_tool")
                call.set_attribute("gen_ai.tool.name", "get_reservation_details")
                call.set_attribute("gen_ai.tool.call.id", f"call_{i:04d}")
        trace_id = format(root.get_span_context().trace_id, "032x")
    p.shutdown()
    return trace_id
