"""Looping agent → otelloop → Arize Phoenix, read back through Phoenix's REST API; prints a JSON summary.

Run by tests/deploy/test_phoenix.py inside a private network namespace that has only loopback
(``unshare -n``): Phoenix's OTLP/gRPC server binds every interface, so it must never run on the host's
network. The script refuses to start Phoenix when it sees any interface but ``lo``.

    unshare -n -- python tests/deploy/phoenix_scenario.py \
        --phoenix-venv /tmp/otelloop-phoenix-venv --workdir DIR

It starts ``phoenix serve`` (from its own venv) and two ``otelloop serve`` processes, one forwarding to
Phoenix over OTLP/HTTP (``--upstream http://…``), one over OTLP/gRPC (``--upstream grpc://…``), each to
its own Phoenix project. Each receives the same scenario over its gRPC receiver:

* a looping trace: an ``invoke_agent`` root, then six identical ``search_web`` calls (two requests);
* a healthy trace: an ``invoke_agent`` root and three different tool calls;
* a span that is no agent step (``GET /health``).

Once Phoenix has ingested every span, the spans are read back from ``/v1/projects/{project}/spans`` and
the last line of stdout is the JSON summary: for each project the sent span ids by role, and each span as
Phoenix shows it (``otelloop.*`` attributes and every event). Every process started here is stopped by its
pid before the script exits, also on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/: served.py, spans.py

import grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from served import Served, http_call
from spans import kvs, request

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
LOOP_STEPS = 6
SERVICE = "research-agent"


class Failed(Exception):
    """A step of the scenario did not complete; the message says which."""


def log(msg: str) -> None:
    print(f"[phoenix_scenario +{time.monotonic() - START:5.1f}s] {msg}", file=sys.stderr, flush=True)


START = time.monotonic()


# ------------------------------------------------------------------------------------------ network
def interfaces() -> list[str]:
    """Interfaces of this process's network namespace (/proc/self/net/dev is per namespace)."""
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    return sorted(line.split(":", 1)[0].strip() for line in lines)


def loopback_only() -> None:
    names = interfaces()
    if names != ["lo"]:
        raise Failed(f"refusing to start Phoenix: this network namespace has interfaces {names}, not only lo "
                     "(run this script under `unshare -n`)")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True, timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------ phoenix
class Phoenix:
    def __init__(self, venv: Path, workdir: Path) -> None:
        exe = venv / "bin" / "phoenix"
        if not exe.exists():
            raise Failed(f"no phoenix executable at {exe}; run tests/deploy/phoenix_env.sh")
        self.http_port = free_port()
        self.grpc_port = free_port()
        workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PHOENIX_"))}
        env.update(PHOENIX_HOST="127.0.0.1", PHOENIX_PORT=str(self.http_port),
                   PHOENIX_GRPC_PORT=str(self.grpc_port), PHOENIX_WORKING_DIR=str(workdir),
                   PHOENIX_TELEMETRY_ENABLED="false")
        self.log_path = workdir / "phoenix.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen([str(exe), "serve"], stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     cwd=workdir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise Failed(f"phoenix exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if http_call("GET", f"{self.url}/healthz", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.25)
        raise Failed(f"phoenix not healthy in time:\n{self.log_tail()}")

    def spans(self, project: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            params = {"limit": "1000", **({"cursor": cursor} if cursor else {})}
            status, body = http_call("GET", f"{self.url}/v1/projects/{urllib.parse.quote(project)}/spans?"
                                     f"{urllib.parse.urlencode(params)}", timeout=10)
            if status == 404:  # the project appears with its first span
                return []
            if status != 200:
                raise Failed(f"GET spans of {project}: HTTP {status}: {body[:500]!r}")
            doc = json.loads(body)
            out += doc["data"]
            cursor = doc.get("next_cursor")
            if not cursor:
                return out

    def stop(self) -> None:
        stop_pid(self.proc, 20)
        self._log.close()


def stop_pid(proc: subprocess.Popen[bytes], grace: float) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


# ------------------------------------------------------------------------------------------ the agent
def new_span(name: str, attrs: dict[str, Any], trace_id: bytes, parent: bytes, t0: int, step: int) -> Span:
    start = t0 + step * 200_000_000
    return Span(name=name, trace_id=trace_id, span_id=secrets.token_bytes(8), parent_span_id=parent,
                kind=Span.SPAN_KIND_INTERNAL, start_time_unix_nano=start,
                end_time_unix_nano=start + 150_000_000, attributes=kvs(attrs))


def tool(name: str, args: dict[str, Any], result: str, trace_id: bytes, parent: bytes, t0: int,
         step: int) -> Span:
    return new_span(f"execute_tool {name}", {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": result,
    }, trace_id, parent, t0, step)


def scenario() -> tuple[list[bytes], dict[str, list[str]]]:
    """The requests to send, and the span ids (hex) by role."""
    t0 = time.time_ns()
    roles: dict[str, list[str]] = {}
    requests = []

    loop_trace = secrets.token_bytes(16)
    root = new_span("invoke_agent researcher", {"gen_ai.operation.name": "invoke_agent",
                                                "gen_ai.agent.name": "researcher"}, loop_trace, b"", t0, 0)
    calls = [tool("search_web", {"query": "weather in Paris"}, "no results", loop_trace, root.span_id, t0, k)
             for k in range(1, LOOP_STEPS + 1)]
    roles["loop_root"] = [root.span_id.hex()]
    roles["loop_calls"] = [s.span_id.hex() for s in calls]
    # two batches, as an SDK's batch processor would send them; otelloop orders a request by start time
    requests.append(request(root, *calls[:3], service=SERVICE))
    requests.append(request(*calls[3:], service=SERVICE))

    ok_trace = secrets.token_bytes(16)
    ok_root = new_span("invoke_agent writer", {"gen_ai.operation.name": "invoke_agent",
                                               "gen_ai.agent.name": "writer"}, ok_trace, b"", t0, 0)
    ok_calls = [tool("search_web", {"query": "otelloop"}, "3 hits", ok_trace, ok_root.span_id, t0, 1),
                tool("read_file", {"path": "notes.md"}, "# notes", ok_trace, ok_root.span_id, t0, 2),
                tool("write_file", {"path": "summary.md", "content": "done"}, "ok", ok_trace, ok_root.span_id,
                     t0, 3)]
    other = new_span("GET /health", {"http.request.method": "GET", "http.route": "/health"}, ok_trace,
                     ok_root.span_id, t0, 4)
    roles["ok_root"] = [ok_root.span_id.hex()]
    roles["ok_calls"] = [s.span_id.hex() for s in ok_calls]
    roles["not_a_step"] = [other.span_id.hex()]
    requests.append(request(ok_root, *ok_calls, other, service=SERVICE))
    return requests, roles


def with_project(data: bytes, project: str) -> bytes:
    """The request with the resource attribute that picks the Phoenix project."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    req = ExportTraceServiceRequest.FromString(data)
    for rs in req.resource_spans:
        rs.resource.attributes.extend(kvs({"openinference.project.name": project}))
    return req.SerializeToString()


# ------------------------------------------------------------------------------------------ main
def summarize(span: dict[str, Any]) -> dict[str, Any]:
    attrs = span.get("attributes") or {}
    return {
        "span_id": span["context"]["span_id"],
        "trace_id": span["context"]["trace_id"],
        "name": span["name"],
        "parent_id": span.get("parent_id"),
        "otelloop_attributes": {k: v for k, v in attrs.items() if k.startswith("otelloop.")},
        "events": [{"name": e["name"], "attributes": e.get("attributes") or {}}
                   for e in span.get("events") or []],
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    deadline = START + args.timeout
    loopback_only()
    workdir = Path(args.workdir)
    phoenix = Phoenix(Path(args.phoenix_venv), workdir / "phoenix")
    served: list[Served] = []
    try:
        log(f"phoenix pid {phoenix.proc.pid}: http {phoenix.http_port}, grpc {phoenix.grpc_port}")
        phoenix.wait_healthy(min(deadline, time.monotonic() + 60))
        log("phoenix healthy")
        upstreams = {"otelloop-via-http": f"http://127.0.0.1:{phoenix.http_port}",
                     "otelloop-via-grpc": f"grpc://127.0.0.1:{phoenix.grpc_port}"}
        projects: dict[str, Any] = {}
        for project, upstream in upstreams.items():
            d = workdir / project
            d.mkdir()
            # the seed profile: the expected events follow its strict rules (3rd call, 4th …)
            o = Served(d, {"exporter": {"timeout": "5s"}, "detectors": {"profile": "seed"}},
                       args=["--upstream", upstream])
            served.append(o)
            requests, roles = scenario()
            with grpc.insecure_channel(o.grpc) as channel:
                export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
                for data in requests:
                    export(with_project(data, project), timeout=10)
            sent = sum(len(v) for v in roles.values())
            projects[project] = {"upstream": upstream, "roles": roles, "sent": sent, "otelloop": o}
            log(f"{project}: sent {sent} spans to otelloop pid {o.proc.pid} → {upstream}")

        for project, p in projects.items():
            o = p.pop("otelloop")
            while o.metric("otelloop_spans_exported_total") < p["sent"]:
                if time.monotonic() > deadline:
                    exported = o.metric("otelloop_spans_exported_total")
                    failed = o.metric("otelloop_spans_export_failed_total")
                    raise Failed(f"{project}: otelloop exported {exported} of {p['sent']} spans; "
                                 f"failed: {failed}\n{o.stderr[-2000:]}")
                time.sleep(0.1)
            p["exported"] = o.metric("otelloop_spans_exported_total")
            log(f"{project}: otelloop exported {p['exported']:.0f} spans")

        for project, p in projects.items():
            got: list[dict[str, Any]] = []
            while len(got) < p["sent"]:
                if time.monotonic() > deadline:
                    raise Failed(f"{project}: Phoenix shows {len(got)} of {p['sent']} spans\n"
                                 f"{phoenix.log_tail()}")
                time.sleep(0.5)
                got = phoenix.spans(project)
            p["spans"] = [summarize(s) for s in got]
            log(f"{project}: Phoenix shows {len(got)} spans")
        version = subprocess.run([str(Path(args.phoenix_venv) / "bin" / "python"), "-c",
                                  "import importlib.metadata as m; print(m.version('arize-phoenix'))"],
                                 check=False, capture_output=True, text=True, timeout=30).stdout.strip()
        return {"ok": True, "phoenix_version": version, "interfaces": interfaces(), "projects": projects,
                "seconds": round(time.monotonic() - START, 1)}
    finally:
        for o in served:
            o.stop()
        phoenix.stop()
        log("stopped otelloop and phoenix")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix-venv", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--timeout", type=float, default=100.0, help="seconds for the whole scenario")
    args = parser.parse_args()

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(f"terminated by signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    try:
        summary = run(args)
    except Failed as e:
        summary = {"ok": False, "error": str(e)}
    print(json.dumps(summary))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
