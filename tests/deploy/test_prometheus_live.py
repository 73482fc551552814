"""The alert rules and the dashboard against a real Prometheus server scraping a real ``otelloop serve``.

A looping agent sends its spans over otelloop's real gRPC receiver; otelloop forwards them to a gRPC sink.
A Prometheus server (subprocess, 127.0.0.1, 1 s scrape and evaluation) loads a temporary copy of
``helm/otelloop/files/otelloop-rules.yaml`` (``for:`` durations shortened to 1s in the copy only) and
scrapes otelloop's admin port under the job name the OtelloopDown rule expects. The test waits until
OtelloopAgentLoopDetected is active, then evaluates every expression of ``dashboard.json`` through
``/api/v1/query`` with the Grafana variables replaced.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import grpc
import pytest
import yaml
from promql import dashboard, panels
from served import Served, free_port, http_call, wait_for
from sinks import GrpcSink
from spans import request, span, tool_span

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "helm" / "otelloop" / "files"
RULES = FILES / "otelloop-rules.yaml"
DASHBOARD = FILES / "dashboard.json"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
SERVICE = "looping-agent"
LOOP_ALERT = "OtelloopAgentLoopDetected"

#: Grafana's built-in interval variables, as concrete durations that suit a 1 s scrape interval and a test
#: that has run for a few tens of seconds ($__rate_interval must span at least two scrapes).
GRAFANA_INTERVALS = {"$__rate_interval": "15s", "$__interval": "2s", "$__range": "5m"}


# ------------------------------------------------------------------------------------------ helpers
def prometheus_binary() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("the prometheus server binary is not on PATH. Install it (Debian: `apt-get update "
                    "&& apt-get install -y prometheus`); the live alert and dashboard checks need a real "
                    "server.")
    return path


def job_name() -> str:
    """The job label the rules expect of otelloop's own series (from the OtelloopDown rule)."""
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    down = next(r for r in rules if r.get("alert") == "OtelloopDown")
    m = re.search(r'job\s*=\s*"([^"]+)"', down["expr"])
    assert m, f"OtelloopDown does not match a job label: {down['expr']}"
    return m.group(1)


def shortened_rules(target: Path) -> Path:
    """A copy of the rule file with every ``for:`` set to 1s (the original is never touched)."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        group["interval"] = "1s"
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "1s"
    target.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target


class Prometheus:
    """A Prometheus server subprocess on 127.0.0.1, stopped by its pid."""

    def __init__(self, tmp: Path, scrape_target: str, job: str, rule_file: Path) -> None:
        self.port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "scrape_timeout": "1s"},
            "rule_files": [str(rule_file)],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [scrape_target]}]}],
        }
        self.config_path = tmp / "prometheus.yml"
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_path = tmp / "prometheus.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            [prometheus_binary(), f"--config.file={self.config_path}",
             f"--web.listen-address=127.0.0.1:{self.port}", f"--storage.tsdb.path={tmp / 'data'}",
             "--storage.tsdb.retention.time=1h", "--log.level=warn"],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            wait_for(self._ready, timeout=30, what="Prometheus /-/ready")
        except AssertionError:
            self.stop()
            raise AssertionError(f"Prometheus did not become ready:\n{self.log}") from None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"Prometheus exited with {self.proc.returncode}:\n{self.log}")
        try:
            return http_call("GET", f"{self.url}/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> dict[str, Any]:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        status, body = http_call("GET", f"{self.url}/api/v1/{path}{query}", timeout=10)
        doc = json.loads(body)
        assert isinstance(doc, dict), body
        doc["http_status"] = status
        return doc

    def query(self, expr: str) -> dict[str, Any]:
        return self.api("query", query=expr)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class LoopingAgent:
    """Sends, over the real gRPC receiver, one looping session after another until stopped.

    Each session is one trace: a chat step (tokens and cost), then the same ``search_web`` call again and
    again, in two requests; trajectory, divergence and entropy all report it.
    """

    def __init__(self, target: str) -> None:
        self.target = target
        self.sessions = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        try:
            with grpc.insecure_channel(self.target) as channel:
                export = channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)
                trace = 1 << 80
                while not self._stop.is_set():
                    trace += 1
                    chat = span("chat gpt-test", {
                        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-test",
                        "gen_ai.usage.input_tokens": 1200, "gen_ai.usage.output_tokens": 80,
                        "gen_ai.usage.cost": 0.02}, trace=trace, i=0)
                    first = [tool_span(trace=trace, i=k) for k in range(1, 4)]
                    export(request(chat, *first, service=SERVICE), timeout=10)
                    export(request(*(tool_span(trace=trace, i=k) for k in range(4, 9)), service=SERVICE),
                           timeout=10)
                    self.sessions += 1
                    self._stop.wait(0.5)
        except Exception as e:  # reported by the test
            self.errors.append(e)


def dashboard_targets(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title/refId, expr) of every query in the dashboard."""
    return [(f"{p['title']}/{t.get('refId', '?')}", t["expr"])
            for p in panels(d) for t in p.get("targets", []) if "expr" in t]


def template_values(d: dict[str, Any]) -> dict[str, str]:
    """Each template variable as its "All" value (a regex matching every value); the datasource variable
    never appears in PromQL."""
    values = {}
    for v in d["templating"]["list"]:
        if v["type"] == "datasource":
            continue
        values[v["name"]] = v.get("allValue") or ".*"
    return values


def concrete(expr: str, variables: dict[str, str]) -> str:
    for var, value in GRAFANA_INTERVALS.items():
        expr = expr.replace(var, value)
    assert "$__" not in expr, f"unhandled Grafana built-in variable in {expr}"

    def substitute(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in variables, f"dashboard uses ${name}, which is not a template variable: {expr}"
        return variables[name]

    expr = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", substitute, expr)
    assert "$" not in expr, expr
    return expr


def active_loop_alerts(prom: Prometheus) -> list[dict[str, Any]]:
    alerts = prom.api("alerts")["data"]["alerts"]
    return [a for a in alerts
            if a["labels"].get("alertname") == LOOP_ALERT and a["state"] in ("pending", "firing")]


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture
def otelloop(tmp_path: Path, grpc_sink: GrpcSink) -> Iterator[Served]:
    d = tmp_path / "otelloop"
    d.mkdir()
    served = Served(d, {"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}", "timeout": "2s"}})
    yield served
    served.stop()


@pytest.fixture
def prometheus(tmp_path: Path, otelloop: Served) -> Iterator[Prometheus]:
    d = tmp_path / "prometheus"
    d.mkdir()
    prom = Prometheus(d, otelloop.admin, job_name(), shortened_rules(d / "otelloop-rules.yaml"))
    yield prom
    prom.stop()


# ------------------------------------------------------------------------------------------ tests
def test_shortened_rule_copy_keeps_every_rule(tmp_path: Path) -> None:
    original = RULES.read_text()
    copy = yaml.safe_load(shortened_rules(tmp_path / "r.yaml").read_text())
    assert RULES.read_text() == original, "the rule file itself must never be edited"
    before = [r for g in yaml.safe_load(original)["groups"] for r in g["rules"]]
    after = [r for g in copy["groups"] for r in g["rules"]]
    assert [r["alert"] for r in after] == [r["alert"] for r in before]
    assert [r["expr"] for r in after] == [r["expr"] for r in before]
    assert all(r.get("for", "1s") == "1s" for r in after)
    assert job_name() == "otelloop"


def test_loop_alert_fires_and_every_dashboard_query_evaluates(otelloop: Served, prometheus: Prometheus,
                                                              grpc_sink: GrpcSink) -> None:
    job = job_name()
    with LoopingAgent(otelloop.grpc) as agent:
        # 1. the scrape target is up (the first service-discovery sync takes ~5 s)
        def target_up() -> bool:
            targets = prometheus.api("targets")["data"]["activeTargets"]
            return any(t["labels"].get("job") == job and t["health"] == "up" for t in targets)

        wait_for(target_up, timeout=40, what=f"Prometheus target job={job} up")
        targets = prometheus.api("targets")["data"]["activeTargets"]
        assert [t["scrapeUrl"] for t in targets] == [f"http://{otelloop.admin}/metrics"]

        # 2. the agent-loop alert becomes active for the looping service
        try:
            wait_for(lambda: bool(active_loop_alerts(prometheus)), timeout=40, what=f"{LOOP_ALERT} active")
        except AssertionError:
            raise AssertionError(f"{LOOP_ALERT} never became active; alerts: "
                                 f"{prometheus.api('alerts')['data']}; agent errors: {agent.errors}\n"
                                 f"prometheus log:\n{prometheus.log}") from None
        alerts = active_loop_alerts(prometheus)
        assert {a["labels"]["service"] for a in alerts} == {SERVICE}
        assert all(a["labels"]["job"] == job and a["labels"]["severity"] == "warning" for a in alerts)
        detectors = {a["labels"]["detector"] for a in alerts}
        assert detectors & {"trajectory", "entropy"}, alerts
        # otelloop itself is up: OtelloopDown stays quiet
        up = prometheus.query(f'up{{job="{job}"}}')["data"]["result"]
        assert [float(r["value"][1]) for r in up] == [1.0]
        down = [a for a in prometheus.api("alerts")["data"]["alerts"]
                if a["labels"]["alertname"] == "OtelloopDown"]
        assert down == []

        # 3. every rule of the file evaluated without error on the live data
        groups = prometheus.api("rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == 7
        bad = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
        assert not bad, f"rules that failed to evaluate: {bad}"

        # 4. every dashboard expression is valid PromQL against this server; the main views have data
        d = dashboard()
        variables = template_values(d)
        targets_ = dashboard_targets(d)
        assert len(targets_) >= 20
        failures = {}
        for where, expr in targets_:
            result = prometheus.query(concrete(expr, variables))
            if result["status"] != "success" or result["http_status"] != 200:
                failures[where] = (concrete(expr, variables), result.get("error"))
        assert not failures, f"dashboard queries that Prometheus rejected: {failures}"
        assert prometheus.query("sum by (le (otelloop_steps_total)")["status"] == "error"  # the check bites

        must_have_data = {
            "sessions by verdict": "by (verdict) (otelloop_sessions{",
            "findings by detector": "by (detector) (rate(otelloop_findings_total",
            "spans received": "otelloop_spans_received_total",
        }
        for view, needle in must_have_data.items():
            exprs = [concrete(e, variables) for _, e in targets_ if needle in e]
            assert exprs, f"the dashboard has no query for {view} ({needle})"

            def has_data(exprs: list[str] = exprs) -> bool:
                return all(prometheus.query(e)["data"]["result"] for e in exprs)

            wait_for(has_data, timeout=20, what=f"data for the {view} panel")

        verdicts = {r["metric"]["verdict"]: float(r["value"][1]) for e in
                    [concrete(e, variables) for _, e in targets_ if "by (verdict) (otelloop_sessions{" in e]
                    for r in prometheus.query(e)["data"]["result"]}
        assert verdicts.get("stop", 0) >= 1, verdicts
        by_detector = {r["metric"]["detector"] for _, e in targets_
                       if "by (detector) (rate(otelloop_findings" in e
                       for r in prometheus.query(concrete(e, variables))["data"]["result"]}
        assert {"trajectory", "divergence"} <= by_detector, by_detector

        # 5. the template variables' own queries (Grafana's label_values) find otelloop and the service
        jobs = prometheus.api("label/job/values", **{"match[]": "otelloop_build_info"})["data"]
        assert jobs == [job]
        services = prometheus.api("label/service/values",
                                  **{"match[]": f'otelloop_steps_total{{job=~"{job}"}}'})
        assert services["data"] == [SERVICE]
    assert not agent.errors, agent.errors
    assert agent.sessions >= 3
    assert grpc_sink.delivered, "otelloop forwarded nothing to its upstream"
