"""Helpers shared by the rule and dashboard tests: the dashboard's panels and the metric names a PromQL
expression uses."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from otelloop.telemetry import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "helm" / "otelloop" / "files" / "dashboard.json"

#: Every name otelloop exposes (counters with ``_total``), from the table the metrics are built from.
DOCUMENTED_METRICS = {spec.exposed for spec in METRICS}
HISTOGRAMS = {spec.name for spec in METRICS if spec.type == "histogram"}
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
    if name in DOCUMENTED_METRICS:
        return True
    base, n = re.subn(r"_(bucket|sum|count)$", "", name)
    return bool(n) and base in HISTOGRAMS


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def panels(d: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])
