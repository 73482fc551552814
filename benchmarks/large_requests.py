"""Large OTLP requests for the robustness benchmarks, and a running ``otelloop serve`` to send them to.

``identical_tool_spans(n)`` is the worst case for enrichment: ``n`` identical ``read_file`` tool calls in one
trace, each finding nothing (105 bytes each on the wire), every one of which gets findings and attributes, so
a request grows about sevenfold on its way through. ``tool_spans(n)`` is a plainer agent workload: ``n`` tool calls of
five tools over ``n // 100`` traces (about 100 bytes each).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
T0 = 1_700_000_000_000_000_000
TOOLS = ("read_file", "search_web", "write_file", "run_shell", "list_directory")


def identical_tool_spans(n: int) -> bytes:
    """``n`` identical ``read_file`` tool spans of one trace (distinct span ids, no end time), each with the
    result ``[]``: 105 B/span. (Without a result they would be unjudged and get no finding.)"""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    attributes = [KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value="read_file")),
                  KeyValue(key="output.value", value=AnyValue(string_value="[]"))]
    for i in range(n):
        span = ss.spans.add(trace_id=(7).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                            name="read_file", start_time_unix_nano=T0)
        span.attributes.extend(attributes)
    data: bytes = request.SerializeToString()
    return data


def tool_spans(n: int) -> bytes:
    """``n`` tool spans of five tools spread over ``n // 100`` traces (about 100 B/span)."""
    request = ExportTraceServiceRequest()
    ss = request.resource_spans.add().scope_spans.add()
    traces = max(n // 100, 1)
    for i in range(n):
        tool = TOOLS[i % len(TOOLS)]
        span = ss.spans.add(trace_id=(1 + i % traces).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"),
                            name=tool, start_time_unix_nano=T0 + i * 1000,
                            end_time_unix_nano=T0 + i * 1000 + 500)
        span.attributes.append(KeyValue(key="gen_ai.tool.name", value=AnyValue(string_value=tool)))
    data: bytes = request.SerializeToString()
    return data


def as_otlp_json(data: bytes) -> bytes:
    """The same request as an OTLP/JSON body (hex ids)."""
    from otelloop.otlp.json_codec import request_to_json

    return json.dumps(request_to_json(data), separators=(",", ":")).encode()


class Otelloop:
    """``otelloop serve`` on 127.0.0.1 with free ports; stopped by its pid."""

    def __init__(self, tmp: Path, config: dict[str, Any], log_level: str = "WARNING",
                 time_callbacks: bool = False) -> None:
        """``time_callbacks``: run it under ``loop_timing.py``; :meth:`callback_report` reads the result."""
        import yaml

        cfg = tmp / "otelloop.yaml"
        cfg.write_text(yaml.safe_dump(config))
        ready = tmp / "ready.json"
        ready.unlink(missing_ok=True)
        self.stderr_path = tmp / "otelloop.stderr"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115  (the process writes it until stop() closes it)
        self.report_path = tmp / "callbacks.json"
        program = ([sys.executable, str(Path(__file__).parent / "loop_timing.py"), str(self.report_path)]
                   if time_callbacks else [sys.executable, "-m", "otelloop"])
        self.proc = subprocess.Popen(
            [*program, "serve", "--config", str(cfg), "--grpc-endpoint", "127.0.0.1:0",
             "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(ready)],
            stderr=self._stderr, env={**os.environ, "OTELLOOP_LOG_LEVEL": log_level})
        deadline = time.monotonic() + 60
        while not ready.exists():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"otelloop did not start:\n{self.stderr}")
            time.sleep(0.05)
        self.addresses = json.loads(ready.read_text())

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics`` as ``name{labels}`` → value."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://{self.addresses['admin']}/metrics", timeout=30) as r:
            text = r.read().decode()
        out = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out

    def wait_drained(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.metrics().get("otelloop_export_queue_spans", 0) > 0:
            if time.monotonic() > deadline:
                raise RuntimeError("export queue did not drain")
            time.sleep(0.2)

    def callback_report(self) -> dict[str, Any]:
        """After :meth:`stop`: the longest event-loop callbacks (``time_callbacks`` only)."""
        return json.loads(self.report_path.read_text()) if self.report_path.exists() else {}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
