"""``otelloop demo``: a simulated agent loops against an in-process otelloop and the findings appear.

The agent is instrumented with the real OpenTelemetry SDK and exports over OTLP/gRPC on loopback, so
what the newcomer sees is exactly what ``otelloop serve`` does with a real agent.
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
import urllib.request
from typing import Any

from otelloop.config import build_config
from otelloop.model import Finding, Step
from otelloop.service import Service


class _Background:
    """An otelloop service on 127.0.0.1 with free ports, running on its own event loop thread."""

    def __init__(self) -> None:
        config = build_config({"receiver": {"grpc": {"endpoint": "127.0.0.1:0"},
                                            "http": {"endpoint": "127.0.0.1:0"}},
                               "admin": {"endpoint": "127.0.0.1:0"}}, env={})
        self.service = Service(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.service.start(), self.loop).result(30)
        return self.service

    def __exit__(self, *exc: Any) -> None:
        asyncio.run_coroutine_threadsafe(self.service.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _print_finding(step: Step, finding: Finding) -> None:
    print(f"  ⚑ otelloop [{finding.severity}] {finding.event}: {finding.message}", flush=True)


def _verdict(admin: str, session: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{admin}/v1/sessions/{session}/verdict", timeout=2) as r:
        verdict: dict[str, Any] = json.loads(r.read())
        return verdict


def run_demo(repeats: int = 8, out: Any = None) -> int:
    """Run the demo; returns the process exit code (0 when otelloop caught the loop)."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    out = out or sys.stdout
    print("Starting otelloop on 127.0.0.1 (OTLP/gRPC, OTLP/HTTP, admin API on free ports)…", file=out)
    with _Background() as service:
        service.pipeline.finding_sinks[:] = [_print_finding]
        grpc_addr, admin = service.addresses["grpc"], service.addresses["admin"]
        provider = TracerProvider(resource=Resource.create({"service.name": "demo-agent"}))
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=grpc_addr, insecure=True)))
        tracer = provider.get_tracer("otelloop.demo")
        print("A research agent (service demo-agent) asks for the weather, and its search tool keeps "
              "returning nothing…\n", file=out, flush=True)
        verdict: dict[str, Any] = {"verdict": "continue"}
        with tracer.start_as_current_span("invoke_agent researcher") as root:
            root.set_attribute("gen_ai.operation.name", "invoke_agent")
            root.set_attribute("gen_ai.agent.name", "researcher")
            session = format(root.get_span_context().trace_id, "032x")
            for i in range(1, repeats + 1):
                _llm_turn(tracer, i)
                _tool_call(tracer, i)
                time.sleep(0.05)
                verdict = _verdict(admin, session)
                print(f"step {i}: agent called search_web(query='weather in Paris') → no results; "
                      f"otelloop verdict: {verdict['verdict']}", file=out, flush=True)
                if verdict["verdict"] == "stop":
                    break
        provider.shutdown()
        print(f"\nFinal verdict for session {session}: {verdict['verdict']}"
              + (f" — {verdict['message']}" if verdict.get("message") else ""), file=out)
        print(f"Prometheus metrics were at http://{admin}/metrics and the verdict at "
              f"http://{admin}/v1/sessions/{session}/verdict.", file=out)
        print("Run it for real: otelloop serve --upstream <your OTLP backend>, and point your agents at "
              "port 4317 (gRPC) or 4318 (HTTP).", file=out)
        return 0 if verdict["verdict"] in ("nudge", "stop") else 1


def _llm_turn(tracer: Any, i: int) -> None:
    with tracer.start_as_current_span("chat gpt-4o-mini") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.request.model", "gpt-4o-mini")
        span.set_attribute("gen_ai.usage.input_tokens", 900 + 40 * i)
        span.set_attribute("gen_ai.usage.output_tokens", 30)
        span.set_attribute("gen_ai.output.messages", json.dumps(
            [{"role": "assistant", "parts": [{"type": "tool_call", "name": "search_web",
                                              "arguments": {"query": "weather in Paris"}}]}]))


def _tool_call(tracer: Any, i: int) -> None:
    with tracer.start_as_current_span("execute_tool search_web") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "search_web")
        span.set_attribute("gen_ai.tool.call.id", f"call_{i:04d}")
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps({"query": "weather in Paris"}))
        span.set_attribute("gen_ai.tool.call.result", "no results")
