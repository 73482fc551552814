"""Helpers shared by the rule and dashboard tests: the dashboard's panels and the metric names a PromQL
expression uses."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "otelloop" / "files" / "dashboard.json"

#: Metric names of SPEC §7 as Prometheus exposes them (counters with ``_total``).
SPEC_METRICS = {
    "otelloop_spans_received_total", "otelloop_spans_refused_total", "otelloop_spans_exported_total",
    "otelloop_spans_export_failed_total", "otelloop_export_queue_spans", "otelloop_export_queue_capacity_spans",
    "otelloop_export_duration_seconds", "otelloop_request_duration_seconds", "otelloop_steps_total",
    "otelloop_findings_total", "otelloop_sessions_active", "otelloop_sessions", "otelloop_sessions_evicted_total",
    "otelloop_entropy_score", "otelloop_tokens_total", "otelloop_cost_usd_total", "otelloop_detector_errors_total",
    "otelloop_mapping_errors_total", "otelloop_config_reloads_total", "otelloop_build_info",
}
HISTOGRAMS = {"otelloop_export_duration_seconds", "otelloop_request_duration_seconds", "otelloop_entropy_score"}
PROMQL_WORDS = {"and", "or", "unless", "offset", "bool", "by", "without", "on", "ignoring", "group_left",
                "group_right", "inf", "nan", "Inf", "NaN"}


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (selectors not followed by "(", outside strings and label lists)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", expr):
        if expr[m.end():].lstrip().startswith("(") or m.group(0) in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def allowed(name: str) -> bool:
    if name in SPEC_METRICS:
        return True
    base, n = re.subn(r"_(bucket|sum|count)$", "", name)
    return bool(n) and base in HISTOGRAMS


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])
