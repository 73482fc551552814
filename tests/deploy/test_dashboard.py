"""The Grafana dashboard: Grafana's dashboard schema, valid PromQL, documented metric names only."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import extras
import pytest
import yaml
from promql import DOCUMENTED_METRICS, allowed, dashboard, metric_names, panels
from pydantic import TypeAdapter, ValidationError

extras.require("deploy")

from grafana_schema.models import Dashboard  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "helm" / "otelloop" / "files" / "dashboard.json"

GRAFANA_VARS = {"$__rate_interval": "5m", "$__range": "1h", "$__interval": "1m"}


def exprs(d: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(d) for t in p.get("targets", []) if "expr" in t]


def variable_queries(d: dict[str, Any]) -> list[str]:
    out = []
    for v in d["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]
            out.append(q["query"] if isinstance(q, dict) else q)
    return out


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found on PATH. Install it (Debian: `apt-get update && apt-get install -y "
                    "prometheus`); the dashboard's PromQL cannot be checked without it.")
    return path


# ------------------------------------------------------------------------------------------ tests
def test_dashboard_matches_grafana_schema() -> None:
    adapter = TypeAdapter(Dashboard)
    d = dashboard()
    adapter.validate_python(d)
    with pytest.raises(ValidationError):
        adapter.validate_python({**d, "graphTooltip": 7})


def test_layout_and_datasource_variable() -> None:
    d = dashboard()
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: set[tuple[int, int]] = set()
    for p in panels(d):
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine
        if p["type"] == "row":
            continue
        assert p["title"] and p.get("description"), p
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
    for v in variables.values():
        if v["type"] == "query":
            assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_required_views_are_present() -> None:
    """The views docs/deploy.md describes, identified by the metric they chart."""
    d = dashboard()
    joined = "\n".join(exprs(d))
    for needle in [
        "by (verdict) (otelloop_sessions{",                   # sessions by verdict
        "by (detector) (rate(otelloop_findings_total",        # findings by detector over time
        "topk(10, sum by (service) (increase(otelloop_findings_total",
        "topk(10, sum by (service) (increase(otelloop_cost_usd_total",
        "otelloop_tokens_total", "otelloop_cost_usd_total",   # token and cost burn
        "otelloop_spans_received_total", "otelloop_spans_exported_total", "otelloop_spans_refused_total",
        "otelloop_export_queue_spans", "otelloop_export_queue_capacity_spans",
        "histogram_quantile(0.99, sum by (le, transport) (rate(otelloop_request_duration_seconds_bucket",
        "histogram_quantile(0.99, sum by (le, outcome) (rate(otelloop_export_duration_seconds_bucket",
        "otelloop_sessions_active", "otelloop_sessions_evicted_total",
        "otelloop_entropy_score_bucket",
    ]:
        assert needle in joined, needle


def test_every_expr_parses_with_promtool(tmp_path: Path) -> None:
    all_exprs = exprs(dashboard())
    assert len(all_exprs) >= 20
    rules = []
    for i, e in enumerate(all_exprs):
        for var, value in GRAFANA_VARS.items():
            e = e.replace(var, value)
        assert "$__" not in e, f"unhandled Grafana variable in {e}"
        rules.append({"record": f"dashboard:expr_{i}", "expr": e})
    rule_file = tmp_path / "dashboard-rules.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool(), "check", "rules", str(rule_file)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


def test_promtool_check_catches_a_broken_expr(tmp_path: Path) -> None:
    rule_file = tmp_path / "broken.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [
        {"record": "x:y", "expr": "sum by (le (rate(otelloop_steps_total[5m]))"}]}]}))
    result = subprocess.run([promtool(), "check", "rules", str(rule_file)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0


def test_metric_parser() -> None:
    assert metric_names('sum by (le) (rate(a_bucket{x="y{z}"}[5m])) / on (job) b offset 5m > 0.8') == {
        "a_bucket", "b"}
    assert allowed("otelloop_entropy_score_bucket") and allowed("otelloop_findings_total")
    assert not allowed("otelloop_findings_total_bucket") and not allowed("otelloop_loops_detected_total")


def test_only_documented_metric_names() -> None:
    d = dashboard()
    used: set[str] = set()
    for e in exprs(d):
        names = metric_names(e)
        assert names, e
        unknown = {n for n in names if not allowed(n)}
        assert not unknown, f"{e!r} uses {unknown}, not documented metric names"
        used |= names
    for q in variable_queries(d):
        m = re.fullmatch(r"label_values\((\w+)(\{.*\})?,\s*\w+\)", q)
        assert m and allowed(m.group(1)), q
        used.add(m.group(1))
    bases = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in DOCUMENTED_METRICS else n for n in used}
    missing = DOCUMENTED_METRICS - bases
    assert not missing, f"documented metrics the dashboard never shows: {missing}"
