"""The alert rule file: promtool checks and unit-tests it; it uses only documented metric names."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from promql import allowed, metric_names

REPO = Path(__file__).resolve().parents[2]
FILES = REPO / "helm" / "otelloop" / "files"
RULES = FILES / "otelloop-rules.yaml"
RULES_TEST = FILES / "otelloop-rules_test.yaml"
ALERTS_DOC = REPO / "docs" / "alerts.md"

# Metric names as exposed by Prometheus (counters end in _total; histograms also have _bucket/_sum/_count).
EXPECTED_ALERTS = {
    "OtelloopAgentLoopDetected", "OtelloopCostBurnRateHigh", "OtelloopExportFailing",
    "OtelloopExportQueueNearFull", "OtelloopSpansRefused", "OtelloopSessionsEvicted", "OtelloopDown",
}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool not found on PATH. Install it (Debian: `apt-get update && apt-get install -y prometheus`); "
            "the alert rules cannot be verified without it."
        )
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=FILES, capture_output=True, text=True, timeout=120)


def alerts() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(EXPECTED_ALERTS)} rules found" in result.stdout


def test_promtool_test_rules() -> None:
    result = run_promtool("test", "rules", RULES_TEST.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_test_rules_catches_a_broken_rule(tmp_path: Path) -> None:
    """The unit tests have teeth: a rule with a wrong threshold makes them fail."""
    broken = RULES.read_text().replace("> 0.8", "> 0.95")
    assert broken != RULES.read_text()
    (tmp_path / RULES.name).write_text(broken)
    (tmp_path / RULES_TEST.name).write_text(RULES_TEST.read_text())
    result = subprocess.run([promtool(), "test", "rules", RULES_TEST.name], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "OtelloopExportQueueNearFull" in result.stdout + result.stderr


def test_expected_alerts_with_annotations() -> None:
    rules = alerts()
    assert {r["alert"] for r in rules} == EXPECTED_ALERTS
    doc = ALERTS_DOC.read_text()
    headings = {m.lower() for m in re.findall(r"^## (\w+)$", doc, re.M)}
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        ann = rule["annotations"]
        assert ann["summary"] and ann["description"], rule["alert"]
        anchor = f"docs/alerts.md#{rule['alert'].lower()}"
        assert ann["runbook_url"] == anchor, rule["alert"]
        assert rule["alert"].lower() in headings, f"docs/alerts.md has no section for {rule['alert']}"


def test_every_alert_has_firing_and_quiet_cases() -> None:
    tests = yaml.safe_load(RULES_TEST.read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert firing == EXPECTED_ALERTS, EXPECTED_ALERTS - firing
    assert quiet == EXPECTED_ALERTS, EXPECTED_ALERTS - quiet




def test_metric_parser() -> None:
    assert metric_names('sum by (le, job) (rate(a_b_bucket{x="y{z}"}[5m])) / on (job) c offset 5m > 0.8') == {
        "a_b_bucket", "c"}


def test_rules_use_only_documented_metric_names() -> None:
    for rule in alerts():
        names = metric_names(rule["expr"])
        assert names, rule["alert"]
        unknown = {n for n in names if not allowed(n) and n != "up"}
        assert not unknown, f"{rule['alert']} uses {unknown}, not documented metric names"
