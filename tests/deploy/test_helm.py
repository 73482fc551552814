"""The Helm chart: lint, render, Kubernetes schema validation and the properties operators rely on.

Everything runs offline: helm-python-sdk (the Helm Go SDK through ctypes) lints and renders, and
kubernetes-validate checks each manifest against the Kubernetes 1.30 OpenAPI schemas.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import extras
import pytest
import yaml

extras.require("deploy")

import helm_python as helm  # noqa: E402
import kubernetes_validate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "otelloop"
K8S_VERSION = "1.30.0"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))
CRD_GROUPS = ("monitoring.coreos.com/",)

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "sidecar-defaults": {"mode": "sidecar"},
    **{f"ci/{p.name}": yaml.safe_load(p.read_text()) for p in CI_VALUES},
}


# --------------------------------------------------------------------------------------------- helpers
def lint(values: dict[str, Any]) -> dict[str, Any]:
    return helm.lint(str(CHART), strict=True, values=copy.deepcopy(values), kube_version=f"v{K8S_VERSION}")


def lint_problems(report: dict[str, Any]) -> list[Any]:
    return [m for m in report["messages"] if m["severity"] >= 2] + list(report.get("errors") or [])


def render_files(values: dict[str, Any], name: str = "rel", namespace: str = "obs") -> dict[str, str]:
    return helm.Chart.load(str(CHART)).render(copy.deepcopy(values), name=name, namespace=namespace)


def render(values: dict[str, Any], name: str = "rel", namespace: str = "obs") -> list[dict[str, Any]]:
    docs = []
    for path, text in sorted(render_files(values, name, namespace).items()):
        if not path.endswith((".yaml", ".yml")):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = of_kind(docs, "Deployment") + of_kind(docs, "StatefulSet")
    assert len(found) == 1, [d["kind"] for d in found]
    return found[0]


def otelloop_container(pod_spec: dict[str, Any]) -> dict[str, Any]:
    containers = pod_spec.get("containers", []) + pod_spec.get("initContainers", [])
    return next(c for c in containers if c["name"] == "otelloop")


def chart_defaults() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def rules_file() -> dict[str, Any]:
    return yaml.safe_load((CHART / "files" / "otelloop-rules.yaml").read_text())


def check_crd(doc: dict[str, Any]) -> None:
    """Structural checks for prometheus-operator resources (not in the Kubernetes schemas)."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    meta = doc["metadata"]
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]) and len(meta["name"]) <= 63
    assert all(isinstance(v, str) for v in meta.get("labels", {}).values())
    spec = doc["spec"]
    if doc["kind"] == "PrometheusRule":
        assert set(spec) == {"groups"}
        for group in spec["groups"]:
            assert group["name"] and group["rules"]
            for rule in group["rules"]:
                assert set(rule) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
                assert ("alert" in rule) != ("record" in rule) and isinstance(rule["expr"], str)
    elif doc["kind"] in ("ServiceMonitor", "PodMonitor"):
        key = "endpoints" if doc["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
        assert set(spec) <= {"selector", "namespaceSelector", "jobLabel", key}
        assert spec["selector"]["matchLabels"], "an empty selector would match every object"
        for ep in spec[key]:
            assert isinstance(ep["port"], str) and ep["path"] == "/metrics"
            for relabel in ep.get("relabelings", []):
                assert relabel.get("action", "replace") in ("replace", "keep", "drop", "labelmap", "labeldrop",
                                                            "labelkeep")
    else:
        raise AssertionError(f"unexpected custom resource {doc['kind']}")


# --------------------------------------------------------------------------------- lint and validation
@pytest.mark.parametrize("label", list(VALUE_SETS))
def test_lint_strict(label: str) -> None:
    report = lint(VALUE_SETS[label])
    problems = lint_problems(report)
    print(json.dumps(report, indent=1))
    assert report["total_charts_linted"] == 1
    assert not problems, problems


@pytest.mark.parametrize("label", list(VALUE_SETS))
def test_manifests_match_kubernetes_schemas(label: str) -> None:
    docs = render(VALUE_SETS[label])
    assert docs
    for doc in docs:
        if doc["apiVersion"].startswith(CRD_GROUPS):
            check_crd(doc)
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']}: {e}")
        assert doc["metadata"].get("namespace") == "obs", doc["metadata"]["name"]


@pytest.mark.parametrize("label", list(VALUE_SETS))
def test_security_context_probes_and_args(label: str) -> None:
    values = VALUE_SETS[label]
    docs = render(values)
    if values.get("mode") == "sidecar":
        snippet = one(docs, "ConfigMap", "rel-otelloop-sidecar")["data"]
        pod_spec = {"containers": yaml.safe_load(snippet["container.yaml"])}
        pod_sc: dict[str, Any] = {}
        admin_port = "otelloop-admin"
    else:
        pod_spec = workload(docs)["spec"]["template"]["spec"]
        pod_sc = pod_spec["securityContext"]
        admin_port = "admin"
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] == 10001
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod_spec["automountServiceAccountToken"] is False
    c = otelloop_container(pod_spec)
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True
    assert sc["runAsUser"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["args"][:3] == ["serve", "--config", "/etc/otelloop/config.yaml"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": admin_port}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": admin_port}
    assert admin_port in {p["name"] for p in c["ports"]}
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/etc/otelloop"]["readOnly"] is True
    assert "/tmp" in mounts


# ----------------------------------------------------------------------------------------- gateway
def test_gateway_default_objects() -> None:
    docs = render({})
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(
        ["ConfigMap", "ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "Service", "ServiceAccount"]
    ), kinds
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    assert volumes["otelloop-config"]["configMap"]["name"] == "rel-otelloop-config"
    assert "emptyDir" in volumes["otelloop-tmp"]


def test_service_ports() -> None:
    docs = render({})
    svc = one(docs, "Service", "rel-otelloop")
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert ports["otlp-grpc"]["port"] == 4317 and ports["otlp-grpc"]["appProtocol"] == "grpc"
    assert ports["otlp-http"]["port"] == 4318
    assert ports["admin"]["port"] == 9464
    container_ports = {p["name"]: p["containerPort"] for p in otelloop_container(
        one(docs, "Deployment")["spec"]["template"]["spec"])["ports"]}
    assert container_ports == {"otlp-grpc": 4317, "otlp-http": 4318, "admin": 9464}
    assert all(p["targetPort"] in container_ports for p in svc["spec"]["ports"])


def test_headless_service_for_load_balancing() -> None:
    docs = render({})
    headless = one(docs, "Service", "rel-otelloop-headless")
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is False
    assert {p["name"]: p["port"] for p in headless["spec"]["ports"]}["otlp-grpc"] == 4317
    assert "admin" not in {p["name"] for p in headless["spec"]["ports"]}
    dep = one(docs, "Deployment")
    assert headless["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert not [d for d in render({"headlessService": {"enabled": False}})
                if d["kind"] == "Service" and d["spec"].get("clusterIP") == "None"]


def test_config_file_from_values() -> None:
    values = {"config": {"exporter": {"endpoint": "tempo:4317"}, "state": {"group_by": "session"},
                         "detectors": {"entropy": {"window": 7}}},
              "ports": {"grpc": 5317, "http": 5318, "admin": 9999}}
    docs = render(values)
    cfg = yaml.safe_load(one(docs, "ConfigMap", "rel-otelloop-config")["data"]["config.yaml"])
    assert cfg["exporter"] == {"endpoint": "tempo:4317"}
    assert cfg["state"]["group_by"] == "session"
    assert cfg["state"]["max_sessions"] == 100000, "defaults of values.yaml are merged in"
    assert cfg["detectors"] == {"entropy": {"window": 7}}
    assert cfg["receiver"]["grpc"]["endpoint"] == "0.0.0.0:5317"
    assert cfg["receiver"]["http"]["endpoint"] == "0.0.0.0:5318"
    assert cfg["admin"]["endpoint"] == "0.0.0.0:9999"
    assert "persistent_dir" not in cfg["exporter"]


def test_checksum_annotation_follows_config() -> None:
    def checksum(values: dict[str, Any]) -> str:
        return one(render(values), "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    base = checksum({})
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert checksum({}) == base
    assert checksum({"replicaCount": 5}) == base
    assert checksum({"config": {"state": {"idle_timeout": "10m"}}}) != base
    annotations = one(render({"configChecksumAnnotation": False}), "Deployment")["spec"]["template"]["metadata"]
    assert "checksum/config" not in (annotations.get("annotations") or {})


def test_hpa_persistence_and_monitoring() -> None:
    values = VALUE_SETS["ci/gateway-hpa-pvc-monitoring-values.yaml"]
    docs = render(values)
    assert not of_kind(docs, "Deployment")
    sts = one(docs, "StatefulSet")
    assert "replicas" not in sts["spec"], "the HPA owns the replica count"
    assert sts["spec"]["serviceName"] == "rel-otelloop-headless"
    claim = sts["spec"]["volumeClaimTemplates"][0]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert claim["spec"]["storageClassName"] == "fast-ssd"
    c = otelloop_container(sts["spec"]["template"]["spec"])
    mount = next(m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"])
    cfg = yaml.safe_load(one(docs, "ConfigMap", "rel-otelloop-config")["data"]["config.yaml"])
    assert cfg["exporter"]["persistent_dir"] == mount["mountPath"] == "/var/lib/otelloop/queue"

    hpa = one(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "rel-otelloop"}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600

    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]

    sm = one(docs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    endpoint = sm["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("admin", "/metrics", "15s")
    assert {"action": "replace", "targetLabel": "job", "replacement": "otelloop"} in endpoint["relabelings"]
    selector = sm["spec"]["selector"]["matchLabels"]
    services = {s["metadata"]["name"]: s["metadata"]["labels"] for s in of_kind(docs, "Service")}
    matched = [n for n, labels in services.items() if selector.items() <= labels.items()]
    assert matched == ["rel-otelloop"], matched


def test_prometheus_rule_is_the_tested_rule_file() -> None:
    docs = render({"prometheusRule": {"enabled": True, "labels": {"release": "prom"}}})
    rule = one(docs, "PrometheusRule")
    assert rule["spec"]["groups"] == rules_file()["groups"]
    assert rule["metadata"]["labels"]["release"] == "prom"
    check_crd(rule)
    assert not of_kind(render({}), "PrometheusRule")


def test_dashboard_configmap() -> None:
    cm = one(render({}), "ConfigMap", "rel-otelloop-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["otelloop.json"]) == json.loads((CHART / "files" / "dashboard.json").read_text())

    custom = render({"dashboard": {"label": "grafana.com/dashboard", "labelValue": "otelloop",
                                   "annotations": {"grafana_folder": "AI agents"}, "namespace": "grafana"}})
    cm = one(custom, "ConfigMap", "rel-otelloop-dashboard")
    assert cm["metadata"]["labels"]["grafana.com/dashboard"] == "otelloop"
    assert "grafana_dashboard" not in cm["metadata"]["labels"]
    assert cm["metadata"]["annotations"] == {"grafana_folder": "AI agents"}
    assert cm["metadata"]["namespace"] == "grafana"
    assert not [d for d in render({"dashboard": {"enabled": False}}) if d["metadata"]["name"].endswith("-dashboard")]


def test_single_replica_has_no_disruption_budget() -> None:
    assert not of_kind(render({"replicaCount": 1}), "PodDisruptionBudget")
    assert of_kind(render({"replicaCount": 1, "autoscaling": {"enabled": True}}), "PodDisruptionBudget")


def test_names_follow_release() -> None:
    docs = render({}, name="otelloop", namespace="observability")
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Service", "otelloop") in names and ("Service", "otelloop-headless") in names
    assert ("Deployment", "otelloop") in names


# ----------------------------------------------------------------------------------------- sidecar
def test_sidecar_renders_no_workload_and_a_usable_snippet() -> None:
    values = VALUE_SETS["ci/sidecar-values.yaml"]
    files = render_files(values)
    docs = render(values)
    assert not {"Deployment", "StatefulSet", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                "ServiceAccount"} & {d["kind"] for d in docs}
    snippet = one(docs, "ConfigMap", "rel-otelloop-sidecar")["data"]
    containers = yaml.safe_load(snippet["container.yaml"])
    volumes = yaml.safe_load(snippet["volumes.yaml"])
    env = yaml.safe_load(snippet["agent-env.yaml"])
    assert [c["name"] for c in containers] == ["otelloop"]
    sidecar = containers[0]
    assert sidecar["restartPolicy"] == "Always", "native sidecar by default"
    assert {p["name"]: p["containerPort"] for p in sidecar["ports"]} == {
        "otelloop-grpc": 14317, "otelloop-http": 14318, "otelloop-admin": 19464}
    assert {v["name"] for v in volumes} == {m["name"] for m in sidecar["volumeMounts"]}

    # Pasted into an agent pod as the notes say, the result is a valid Pod.
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent", "namespace": "obs"},
        "spec": {"initContainers": containers,
                 "containers": [{"name": "agent", "image": "agent:1", "env": env}],
                 "volumes": volumes},
    }
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    assert any(v.get("configMap", {}).get("name") == "rel-otelloop-config" for v in volumes)

    cfg = yaml.safe_load(one(docs, "ConfigMap", "rel-otelloop-config")["data"]["config.yaml"])
    assert cfg["receiver"]["grpc"]["endpoint"] == "127.0.0.1:14317"
    assert cfg["admin"]["endpoint"] == "0.0.0.0:19464"
    assert {"name": "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "value": "http://localhost:14317"} in env

    collector = yaml.safe_load(snippet["collector-exporter.yaml"])
    exporter = collector["exporters"]["otlp_grpc/otelloop"]
    assert exporter["endpoint"] == "localhost:14317" and exporter["compression"] == "gzip"
    assert collector["service"]["pipelines"]["traces"]["exporters"] == ["otlp_grpc/otelloop"]

    notes = files["otelloop/templates/NOTES.txt"]
    assert "initContainers" in notes and "rel-otelloop-sidecar" in notes

    monitor = one(docs, "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "research-agent"}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "otelloop-admin"
    assert one(docs, "PrometheusRule")["spec"]["groups"] == rules_file()["groups"]


def test_sidecar_as_plain_container() -> None:
    docs = render({"mode": "sidecar", "sidecar": {"native": False}})
    containers = yaml.safe_load(one(docs, "ConfigMap", "rel-otelloop-sidecar")["data"]["container.yaml"])
    assert "restartPolicy" not in containers[0]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "agent"},
           "spec": {"containers": [{"name": "agent", "image": "agent:1"}, *containers],
                    "volumes": yaml.safe_load(
                        one(docs, "ConfigMap", "rel-otelloop-sidecar")["data"]["volumes.yaml"])}}
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


def test_pod_monitor_needs_a_pod_selector() -> None:
    with pytest.raises(helm.HelmError, match="podSelector"):
        render({"mode": "sidecar", "podMonitor": {"enabled": True}})


# ------------------------------------------------------------------------------------------ values
@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "bogus"},
        {"replicaCount": "three"},
        {"unknownKey": True},
        {"image": {"pullPolicy": "Sometimes"}},
        {"config": {"state": {"group_by": "user"}}},
        {"config": {"exporter": {"protocol": "thrift"}}},
        {"config": {"no_such_section": {}}},
        {"ports": {"grpc": 70000}},
        {"autoscaling": {"enabled": "yes"}},
    ],
    ids=lambda v: json.dumps(v),
)
def test_schema_rejects_bad_values(bad: dict[str, Any]) -> None:
    report = lint(bad)
    assert lint_problems(report), f"lint accepted {bad}: {report}"
    with pytest.raises(helm.HelmError):
        render_files(bad)


def _schema_node(schema: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in path:
        props = (node or {}).get("properties")
        if props is None or key not in props:
            return None
        node = props[key]
    return node


def test_schema_covers_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["additionalProperties"] is False
    assert schema["properties"]["mode"]["enum"] == ["deployment", "sidecar"]

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if isinstance(value, dict) and "properties" in node:
            for key, sub in value.items():
                assert key in node["properties"], f"{path}.{key} is not in values.schema.json"
                walk(sub, node["properties"][key], f"{path}.{key}")

    walk(chart_defaults(), schema, "")


def test_every_value_is_documented_with_its_default() -> None:
    """Each key the schema knows has a comment right above it; leaves name their default."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    lines = (CHART / "values.yaml").read_text().splitlines()
    key_re = re.compile(r"^(\s*)([A-Za-z_][\w.-]*):(\s|$)")
    stack: list[tuple[int, str]] = []
    problems = []
    for n, line in enumerate(lines):
        m = key_re.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [m.group(2)]
        stack.append((indent, m.group(2)))
        node = _schema_node(schema, path)
        if node is None:
            continue  # content of a free-form value (a securityContext, a config section ...)
        comment = []
        j = n - 1
        while j >= 0 and lines[j].strip().startswith("#"):
            comment.insert(0, lines[j])
            j -= 1
        if not comment:
            problems.append(f"line {n + 1}: {'.'.join(path)} has no comment")
        elif "properties" not in node and "Default" not in "".join(comment):
            problems.append(f"line {n + 1}: {'.'.join(path)} does not state its default")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------------------- image
def test_dockerfile_matches_chart() -> None:
    """The image's runtime stage runs as the chart's user, exposes its ports and starts ``otelloop serve``.

    How the image is built (the native reader compiled in a build stage) is tested in test_image.py.
    """
    dockerfile = (REPO / "Dockerfile").read_text()
    runtime = dockerfile[[m.start() for m in re.finditer(r"^FROM ", dockerfile, re.M)][-1]:]
    defaults = chart_defaults()
    assert re.search(r"^FROM python:3\.11-slim$", runtime, re.M)
    user = re.search(r"^USER (\d+)(?::(\d+))?$", runtime, re.M)
    assert user and int(user.group(1)) == defaults["securityContext"]["runAsUser"] == 10001
    assert re.search(r"useradd .*--uid 10001\b", runtime)
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", runtime, re.M).group(1).split()}
    assert exposed == set(defaults["ports"].values()) == {4317, 4318, 9464}
    assert re.search(r'^ENTRYPOINT \["otelloop"\]$', runtime, re.M)
    assert re.search(r'^CMD \["serve"\]$', runtime, re.M)
    assert re.search(r"^RUN --mount=type=bind,from=build,.*\n\s+pip install .* otelloop", runtime, re.M)
    ignored = (REPO / ".dockerignore").read_text().splitlines()
    assert {"*", "!otelloop/", "!pyproject.toml", "!setup.py"} <= set(ignored)
