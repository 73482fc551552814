"""The OpenTelemetry Collector configurations in collector-config/.

No Collector binary is installable here, so these are structural checks: the files parse, every
component a pipeline names is defined, current component names are used, the otelloop exporters
point at otelloop's ports, and the load-balancing tier resolves the headless Service the chart renders.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import extras
import pytest
import yaml

extras.require("deploy")

import helm_python as helm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "collector-config"
CHART = REPO / "helm" / "otelloop"
FILES = ["agent-side.yaml", "gateway-load-balancing.yaml", "local-dev.yaml"]
KINDS = ("receivers", "processors", "exporters", "connectors")
# Renamed in the Collector (deprecated aliases still accepted); the files use the new names.
DEPRECATED_TYPES = {"otlp": "otlp_grpc", "otlphttp": "otlp_http", "loadbalancing": "load_balancing"}
# The release name and namespace the files assume.
RELEASE, NAMESPACE = "otelloop", "observability"


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((CONFIGS / name).read_text())


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


def chart_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def rendered_services() -> dict[str, dict[str, Any]]:
    out = helm.Chart.load(str(CHART)).render({}, name=RELEASE, namespace=NAMESPACE)
    docs = [d for path, text in out.items() if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}


def host_port(endpoint: str) -> tuple[str, int]:
    m = re.fullmatch(r"(?:[a-z]+://)?([^:/]+):(\d+)(/.*)?", endpoint)
    assert m, endpoint
    return m.group(1), int(m.group(2))


@pytest.mark.parametrize("name", FILES)
def test_pipelines_reference_defined_components(name: str) -> None:
    cfg = load(name)
    pipelines = cfg["service"]["pipelines"]
    assert any(component_type(p) == "traces" for p in pipelines), "no traces pipeline"
    used: dict[str, set[str]] = {k: set() for k in KINDS}
    for pipeline_id, pipeline in pipelines.items():
        assert component_type(pipeline_id) in ("traces", "metrics", "logs"), pipeline_id
        assert pipeline.get("receivers") and pipeline.get("exporters"), pipeline_id
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind) or []:
                assert component in (cfg.get(kind) or {}), f"{pipeline_id}: {kind} {component} is not defined"
                used[kind].add(component)
    for kind in ("receivers", "processors", "exporters"):
        unused = set(cfg.get(kind) or {}) - used[kind]
        assert not unused, f"{kind} defined but in no pipeline: {unused}"
    for ext in cfg["service"].get("extensions", []):
        assert ext in (cfg.get("extensions") or {}), ext


@pytest.mark.parametrize("name", FILES)
def test_current_component_names(name: str) -> None:
    cfg = load(name)
    for kind in ("exporters", "processors", "connectors", "extensions"):
        for component in cfg.get(kind) or {}:
            t = component_type(component)
            assert t not in DEPRECATED_TYPES, f"{component}: use {DEPRECATED_TYPES[t]}"
    text = (CONFIGS / name).read_text()
    # the deprecated aliases are mentioned for readers of older Collectors
    assert "deprecated alias" in text or "older Collectors" in text


@pytest.mark.parametrize("name", FILES)
def test_compression_is_one_otelloop_decodes(name: str) -> None:
    """otelloop is Python grpcio: gzip or nothing; zstd and snappy would be refused."""
    cfg = load(name)
    for component, settings in (cfg.get("exporters") or {}).items():
        settings = settings or {}
        if component_type(component) == "load_balancing":
            settings = settings["protocol"]["otlp"]
        if "otelloop" in component or component_type(component) == "load_balancing":
            assert settings.get("compression") == "gzip", component


def test_agent_side_sends_traces_to_otelloop_service() -> None:
    cfg = load("agent-side.yaml")
    exporter = cfg["exporters"]["otlp_grpc/otelloop"]
    host, port = host_port(exporter["endpoint"])
    services = rendered_services()
    assert host in (f"{RELEASE}.{NAMESPACE}.svc.cluster.local", f"{RELEASE}.{NAMESPACE}.svc", f"{RELEASE}.{NAMESPACE}")
    svc_ports = {p["name"]: p["port"] for p in services[RELEASE]["spec"]["ports"]}
    assert port == svc_ports["otlp-grpc"] == chart_values()["ports"]["grpc"] == 4317
    traces = cfg["service"]["pipelines"]["traces"]
    assert traces["exporters"] == ["otlp_grpc/otelloop"]
    assert exporter["retry_on_failure"]["enabled"] and exporter["sending_queue"]["enabled"]
    # metrics and logs bypass otelloop
    for signal in ("metrics", "logs"):
        assert "otlp_grpc/otelloop" not in cfg["service"]["pipelines"][signal]["exporters"]


def test_gateway_load_balances_by_trace_over_the_headless_service() -> None:
    cfg = load("gateway-load-balancing.yaml")
    lb = cfg["exporters"]["load_balancing"]
    assert lb["routing_key"] == "traceID"
    resolver = lb["resolver"]
    assert list(resolver) == ["k8s"], "configure exactly one resolver"
    services = rendered_services()
    headless = services[f"{RELEASE}-headless"]
    assert headless["spec"]["clusterIP"] == "None"
    assert resolver["k8s"]["service"] == f"{headless['metadata']['name']}.{NAMESPACE}"
    headless_ports = {p["name"]: p["port"] for p in headless["spec"]["ports"]}
    assert resolver["k8s"]["ports"] == [headless_ports["otlp-grpc"]] == [4317]
    assert cfg["service"]["pipelines"]["traces"]["exporters"] == ["load_balancing"]


def test_gateway_documents_session_routing_and_dns_alternative() -> None:
    text = (CONFIGS / "gateway-load-balancing.yaml").read_text()
    commented = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    assert "routing_key: attributes" in commented
    assert "gen_ai.conversation.id" in commented and "session.id" in commented
    assert re.search(r"hostname: otelloop-headless\.observability\.svc\.cluster\.local", commented)


def test_local_dev_matches_the_documented_otelloop_command() -> None:
    text = (CONFIGS / "local-dev.yaml").read_text()
    cfg = load("local-dev.yaml")
    command = re.search(r"^#\s+(otelloop serve .+)$", text, re.M)
    assert command, "local-dev.yaml should show how to start otelloop"
    flags = dict(re.findall(r"--([a-z-]+) (\S+)", command.group(1)))
    assert set(flags) >= {"grpc-endpoint", "http-endpoint", "admin-endpoint", "upstream"}
    # the Collector sends to otelloop's gRPC receiver ...
    assert host_port(cfg["exporters"]["otlp_grpc/otelloop"]["endpoint"]) == host_port(flags["grpc-endpoint"])
    # ... and otelloop forwards back into the Collector's second receiver
    back = cfg["receivers"]["otlp/from_otelloop"]["protocols"]["grpc"]["endpoint"]
    assert host_port(flags["upstream"]) == host_port(back)
    # no port is bound twice
    ports = [host_port(flags[f])[1] for f in ("grpc-endpoint", "http-endpoint", "admin-endpoint")]
    for receiver in cfg["receivers"].values():
        ports += [host_port(p["endpoint"])[1] for p in receiver["protocols"].values()]
    assert len(ports) == len(set(ports)), ports
    pipelines = cfg["service"]["pipelines"]
    assert pipelines["traces/to_otelloop"]["exporters"] == ["otlp_grpc/otelloop"]
    assert "file" in pipelines["traces/from_otelloop"]["exporters"]


def test_readme_explains_each_file_and_statefulness() -> None:
    readme = (CONFIGS / "README.md").read_text()
    for name in FILES:
        assert name in readme
    assert "same replica" in readme
    for new, old in (("otlp_grpc", "otlp"), ("otlp_http", "otlphttp"), ("load_balancing", "loadbalancing")):
        assert new in readme and f"`{old}`" in readme
