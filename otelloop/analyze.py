"""``otelloop analyze``: the same pipeline as ``serve``, run offline over recorded OTLP (SPEC §1).

Accepted inputs: JSON lines as written by the Collector's ``file`` exporter (one OTLP/JSON request per
line), a single OTLP/JSON document, or one binary protobuf ``ExportTraceServiceRequest``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from otelloop.config import Config
from otelloop.model import VERDICT_RANK
from otelloop.otlp.json_codec import JSONDecodeError, json_to_protobuf, request_to_json
from otelloop.pipeline import InvalidRequest, Pipeline


class InputError(ValueError):
    """A file could not be read as OTLP; the message names the file (and line)."""


def read_requests(path: str | Path) -> Iterator[bytes]:
    """Serialised requests from one recorded file, in file order."""
    data = Path(path).read_bytes()
    head = data.lstrip()[:1]
    if head not in (b"{", b"["):
        yield data
        return
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        yield _json(doc, f"{path}")
        return
    for n, line in enumerate(data.splitlines(), 1):
        if line.strip():
            yield _json(line, f"{path}:{n}")


def _json(doc: Any, where: str) -> bytes:
    try:
        return json_to_protobuf(doc if isinstance(doc, (bytes, str)) else json.dumps(doc))
    except JSONDecodeError as e:
        raise InputError(f"{where}: {e}") from None


@dataclass
class SessionReport:
    session_id: str
    agent: str
    service: str
    steps: int
    verdict: str
    reason: str
    cost_usd: float
    findings: list[dict[str, Any]] = field(default_factory=list)


def analyze(paths: list[str], config: Config | None = None, output: TextIO | None = None) -> list[SessionReport]:
    """Run every request of every file through one pipeline; return a report per session with steps."""
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")  # offline: nothing goes idle
    by_session: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        for data in read_requests(path):
            try:
                processed = pipeline.process(pipeline.decode(data))
            except InvalidRequest as e:
                raise InputError(f"{path}: {e}") from None
            for step, finding in processed.findings:
                by_session.setdefault(step.session, []).append({
                    "detector": finding.detector, "event": finding.event, "severity": finding.severity,
                    "span_id": step.span_id, "step": step.name, "message": finding.message,
                    "attributes": finding.attributes})
            if output is not None:
                output.write(json.dumps(request_to_json(processed.data)) + "\n")
    reports = [SessionReport(s.id, s.agent, s.service, s.steps, s.verdict, s.reason, s.cost_usd,
                             by_session.get(s.id, [])) for s in pipeline.store]
    reports.sort(key=lambda r: (-VERDICT_RANK[r.verdict], -len(r.findings), r.session_id))
    return reports


def render_table(reports: list[SessionReport]) -> str:
    """A readable table: one block per session, one line per distinct finding."""
    if not reports:
        return "no agent steps found\n"
    lines = [f"{'SESSION':34} {'AGENT':20} {'STEPS':>5} {'VERDICT':8} FINDINGS"]
    for r in reports:
        counts = Counter((f["detector"], f["event"], f["severity"]) for f in r.findings)
        summary = ", ".join(f"{e.removeprefix('otelloop.')} x{n}" for (_, e, _), n in counts.items()) or "-"
        lines.append(f"{r.session_id[:34]:34} {r.agent[:20]:20} {r.steps:>5} {r.verdict:8} {summary}")
        seen = set()
        for f in r.findings:
            key = (f["event"], f["message"])
            if key not in seen:
                seen.add(key)
                lines.append(f"    [{f['severity']}] {f['detector']}: {f['message'] or f['event']} (span {f['span_id']})")
    return "\n".join(lines) + "\n"


def worst_verdict(reports: list[SessionReport]) -> str:
    return max((r.verdict for r in reports), key=VERDICT_RANK.__getitem__, default="continue")
