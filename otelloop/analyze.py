"""``otelloop analyze``: the same pipeline as ``serve``, run offline over recorded OTLP.

Accepted inputs, told apart by their first bytes:

- the OpenTelemetry Collector ``file`` exporter's ``proto`` format: each ``ExportTraceServiceRequest``
  preceded by its length as a 4-byte big-endian integer (a length under 16 MiB begins with ``0x00``);
- the ``file`` exporter's JSON lines (one OTLP/JSON request per line) or a single OTLP/JSON document
  (``{`` or ``[``);
- one binary ``ExportTraceServiceRequest`` (or several concatenated, which protobuf reads as one): it
  begins with ``0x0A``, the tag of its first field.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from otelloop.config import Config
from otelloop.logs import escape
from otelloop.model import VERDICT_RANK
from otelloop.otlp.json_codec import JSONDecodeError, json_to_protobuf, request_to_json
from otelloop.pipeline import InvalidRequest, Pipeline

#: Finding severities, least to most severe: findings are listed most severe first.
SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "loop": 2, "stop": 3}


class InputError(ValueError):
    """A file could not be read as OTLP; the message names the file (and line)."""


#: First byte of a binary ExportTraceServiceRequest: field 1 (resource_spans), wire type 2.
_REQUEST_TAG = 0x0A
#: Largest request a length prefix may announce (the file exporter writes one request per export).
MAX_FRAMED_REQUEST = 1 << 30


def read_requests(path: str | Path) -> Iterator[bytes]:
    """Serialised requests from one recorded file, in file order."""
    for _, data in iter_requests(path):
        yield data


def iter_requests(path: str | Path) -> Iterator[tuple[str, bytes]]:
    """``(where, request bytes)`` for every request of one recorded file, in file order; ``where`` names
    the file and the request's line or byte offset, for error messages.

    Raises:
        InputError: the file is in none of the accepted formats, or is truncated or garbled.
    """
    for where, data, _ in iter_requests_at(path):
        yield where, data


def iter_requests_at(path: str | Path) -> Iterator[tuple[str, bytes, int]]:
    """As :func:`iter_requests`, each with the file offset where the request ends (for progress)."""
    data = Path(path).read_bytes()
    if not data.strip():
        return
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        yield from _json_requests(data, str(path))
    elif data[0] == 0x00:
        yield from _framed_requests(data, str(path))
    elif data[0] == _REQUEST_TAG:
        yield f"{path}", data, len(data)
    else:
        raise InputError(f"{path}: not OTLP: offset 0 holds 0x{data[0]:02x}, but a recording begins with "
                         "0x00 (the Collector file exporter's length-prefixed proto format), 0x0a (a binary "
                         "ExportTraceServiceRequest) or '{' (OTLP/JSON)")


def _framed_requests(data: bytes, path: str) -> Iterator[tuple[str, bytes, int]]:
    """The file exporter's ``proto`` format: a 4-byte big-endian length, then that many bytes, repeated."""
    pos, n, size = 0, 0, len(data)
    while pos < size:
        n += 1
        if pos + 4 > size:
            raise InputError(f"{path}: truncated at offset {pos}: request {n} has {size - pos} byte(s) of its "
                             "4-byte length prefix")
        (length,) = struct.unpack_from(">I", data, pos)
        if length > MAX_FRAMED_REQUEST:
            raise InputError(f"{path}: garbled at offset {pos}: request {n} announces {length} bytes; not a "
                             "length-prefixed OTLP file")
        if pos + 4 + length > size:
            raise InputError(f"{path}: truncated at offset {pos}: request {n} announces {length} bytes, "
                             f"{size - pos - 4} follow")
        if length and data[pos + 4] != _REQUEST_TAG:
            raise InputError(f"{path}: garbled at offset {pos + 4}: request {n} begins with "
                             f"0x{data[pos + 4]:02x}, not an ExportTraceServiceRequest")
        yield f"{path}: request {n} at offset {pos}", data[pos + 4:pos + 4 + length], pos + 4 + length
        pos += 4 + length


def _json_requests(data: bytes, path: str) -> Iterator[tuple[str, bytes, int]]:
    try:
        doc = json.loads(data)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        yield path, _json(doc, path), len(data)
        return
    end = 0
    for n, line in enumerate(data.splitlines(keepends=True), 1):
        end += len(line)
        if line.strip():
            yield f"{path}:{n}", _json(line, f"{path}:{n}"), end


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


def analyze(paths: list[str], config: Config | None = None, output: TextIO | None = None,
            progress: Callable[[int], None] | None = None) -> list[SessionReport]:
    """Run every request of every file through one pipeline; return a report per session with steps.
    ``progress`` is told the input bytes read so far (over all files) after each request."""
    pipeline = Pipeline(config)
    pipeline.store.idle_timeout = float("inf")  # offline: nothing goes idle
    pipeline.seen_all = set()  # overlapping recordings: a span read twice counts once, however far apart
    by_session: dict[str, list[dict[str, Any]]] = {}
    done = 0
    for path in paths:
        for where, data, end in iter_requests_at(path):
            if progress is not None:
                progress(done + end)
            try:
                processed = pipeline.process(pipeline.decode(data))
            except InvalidRequest as e:
                raise InputError(f"{where}: {e}") from None
            for step, finding in processed.findings:
                by_session.setdefault(step.session, []).append({
                    "detector": finding.detector, "event": finding.event, "severity": finding.severity,
                    "span_id": step.span_id, "step": step.name, "message": finding.message,
                    "attributes": finding.attributes})
            if output is not None:
                for part, _ in processed.parts:
                    output.write(json.dumps(request_to_json(part)) + "\n")
        done += Path(path).stat().st_size
    reports = [SessionReport(s.id, s.agent, s.service, s.steps, s.verdict, s.reason, s.cost_usd,
                             by_session.get(s.id, [])) for s in pipeline.store]
    reports.sort(key=lambda r: (-VERDICT_RANK[r.verdict], -worst_severity(r), -len(r.findings), r.session_id))
    return reports


def worst_severity(report: SessionReport) -> int:
    """Rank of the session's most severe finding (-1 without findings), to order equal verdicts."""
    return max((SEVERITY_RANK.get(f["severity"], 0) for f in report.findings), default=-1)


def summary_line(reports: list[SessionReport]) -> str:
    """``3 sessions: 1 stop, 1 nudge, 1 continue``: the verdict counts, worst first, for a CI log."""
    counts = Counter(r.verdict for r in reports)
    parts = [f"{counts[v]} {v}" for v in sorted(counts, key=VERDICT_RANK.__getitem__, reverse=True)]
    noun = "session" if len(reports) == 1 else "sessions"
    return f"{len(reports)} {noun}: {', '.join(parts) or 'none'}"


def summary(reports: list[SessionReport]) -> dict[str, Any]:
    """The summary as data (``--json``): session count and sessions per verdict, worst first."""
    counts = Counter(r.verdict for r in reports)
    return {"sessions": len(reports),
            "verdicts": {v: counts[v] for v in sorted(counts, key=VERDICT_RANK.__getitem__, reverse=True)}}


def render_table(reports: list[SessionReport]) -> str:
    """A readable table: one block per session, one line per distinct finding. Session ids, agent names
    and messages come from the recorded spans, so each is escaped (``otelloop.logs.escape``): a recording
    cannot add lines to the table or send escape sequences to the terminal."""
    if not reports:
        return f"no agent steps found\n{summary_line(reports)}\n"
    lines = [f"{'SESSION':34} {'AGENT':20} {'STEPS':>5} {'VERDICT':8} FINDINGS"]
    for r in reports:
        counts = Counter((f["detector"], f["event"], f["severity"]) for f in r.findings)
        summary = escape(", ".join(f"{e.removeprefix('otelloop.')} x{n}" for (_, e, _), n in counts.items())
                         or "-", None)
        lines.append(f"{escape(r.session_id, 34):34} {escape(r.agent, 20):20} {r.steps:>5} {r.verdict:8} "
                     f"{summary}")
        seen = set()
        for f in sorted(r.findings, key=lambda f: -SEVERITY_RANK.get(f["severity"], 0)):
            key = (f["event"], f["message"])
            if key not in seen:
                seen.add(key)
                lines.append(f"    [{escape(f['severity'])}] {escape(f['detector'])}: "
                             f"{escape(f['message'] or f['event'], None)} (span {escape(f['span_id'])})")
    lines.append(summary_line(reports))
    return "\n".join(lines) + "\n"


def worst_verdict(reports: list[SessionReport]) -> str:
    return max((r.verdict for r in reports), key=VERDICT_RANK.__getitem__, default="continue")
