"""Probe: values from spans cannot forge log lines or terminal escapes on otelloop's stderr.

An agent (or anyone who can send spans) chooses session ids, agent, service and tool names, arguments and
results; an upstream's error message may echo them. Each hostile value below carries a line feed, a
carriage return, ANSI/OSC escape sequences (7-bit ESC and the 8-bit CSI), NEL, the Unicode line and
paragraph separators and a right-to-left override, followed by text made to look like an otelloop line.

Figures held, on a real ``otelloop serve`` in detect-only mode fed a looping session: every stderr line is
one of otelloop's own (a timestamped log line, or one ``otelloop: [severity]`` line per finding counted
in ``otelloop_findings_total``), 0 forged lines and 0 ESC bytes (before: 10 forged lines, 5 of them
passing for otelloop ERROR lines, and 15 ESC bytes for the 5 findings of this session); and with an
upstream that answers 400 quoting them, 0 ESC bytes and 0 other unsafe characters (before: 4 and 7);
and ``otelloop analyze`` of a recording of that session prints its 6-line table with 0 forged lines
(before: 11 lines, 5 of them forged).
"""

from __future__ import annotations

import ast
import io
import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from probes import export
from prometheus_client.parser import text_string_to_metric_families
from served import http_call, wait_for
from sinks import HttpSink, Reply
from spans import request, tool_span

import otelloop
from otelloop.logs import EscapingFormatter, escape

FORGE = ("\n2026-01-01 00:00:00,000 ERROR otelloop: FORGED line\r\n\x1b[2K\x1b[1A\x1b]0;FORGED title\x07"
         "\x9b31m\x85FORGED nel\u2028FORGED ls\u2029FORGED ps\u202eFORGED rlo\x1b[0m")
SESSION = "sess-1" + FORGE
AGENT = "planner" + FORGE
TOOL = "read_file" + FORGE
SERVICE = "svc" + FORGE

#: What a line of otelloop's stderr may be: a log line, a finding of detect-only mode, or a line of an
#: indented traceback.
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")
FINDING_LINE = re.compile(r"otelloop: \[(info|warn|loop|stop)\] [a-z_]+ session=")
UNSAFE = ("\x1b", "\x9b", "\x85", "\u2028", "\u2029", "\u202e", "\r", "\x07")


def hostile_loop(n: int = 6) -> bytes:
    attrs = {"session.id": SESSION, "gen_ai.agent.name": AGENT}
    return request(*[tool_span(TOOL, args='{"path": "a' + FORGE + '"}', result="error" + FORGE, trace=9, i=i,
                               attrs=attrs) for i in range(n)], service=SERVICE)


def findings_counted(admin: str) -> float:
    _, body = http_call("GET", f"http://{admin}/metrics")
    return sum(s.value for family in text_string_to_metric_families(body.decode()) for s in family.samples
               if s.name == "otelloop_findings_total")


def foreign_lines(stderr: str) -> list[str]:
    """Lines of ``stderr`` that are not otelloop's own (the forged log line looks like one, but carries
    the forger's timestamp)."""
    return [line for line in stderr.split("\n")[:-1]
            if not (LOG_LINE.match(line) or FINDING_LINE.match(line) or line.startswith("    "))
            or line.startswith("2026-01-01 00:00:00,000")]


def test_detect_only_findings_cannot_forge_lines(serve: Any) -> None:
    o = serve({"state": {"group_by": "session"}})
    export(o.grpc, hostile_loop())
    wait_for(lambda: findings_counted(o.admin) > 0, what="findings counted")
    findings = findings_counted(o.admin)
    assert o.stop() == 0
    raw = o.stderr_path.read_bytes()
    stderr = raw.decode("utf-8")
    assert foreign_lines(stderr) == []
    assert [c for c in UNSAFE if c in stderr] == [] and b"\x1b" not in raw
    printed = [line for line in stderr.split("\n") if FINDING_LINE.match(line)]
    assert len(printed) == findings >= 1  # exactly one line per finding
    assert all("session=sess-1\\n2026-01-01" in line for line in printed)  # the id, escaped visibly


def test_an_upstream_echoing_span_content_cannot_forge_lines(serve: Any, loop: Any) -> None:
    sink = loop.run(HttpSink().start())
    try:
        sink.default = Reply(status=400, message="bad span name " + TOOL)
        o = serve({"exporter": {"endpoint": sink.url}})
        export(o.grpc, hostile_loop(2))
        wait_for(lambda: o.metric("otelloop_spans_export_failed_total") >= 2, what="the refused spans counted")
        assert o.stop() == 0
    finally:
        loop.run(sink.stop())
    stderr = o.stderr
    assert foreign_lines(stderr) == []
    assert [c for c in UNSAFE if c in stderr] == []
    dropped = [line for line in stderr.splitlines() if "dropped 2 spans (reason rejected)" in line]
    assert len(dropped) == 1 and "FORGED line \\x1b[2K" in dropped[0]  # whitespace collapsed, ESC visible


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x08", "\t", "\n", "\x0b", "\x0c", "\r", "\x1b", "\x7f", "\x80",
                                  "\x85", "\x9b", "\xa0", "\u061c", "\u200b", "\u200e", "\u200f", "\u2028",
                                  "\u2029", "\u202a", "\u202d", "\u202e", "\u2066", "\u2069", "\ufeff", "\ud800",
                                  "\U000e0001"])
def test_escape_makes_every_control_and_format_character_visible(char: str) -> None:
    out = escape(f"a{char}b")
    assert out.startswith("a\\") and out.endswith("b") and out.isprintable()
    assert char not in out


def test_escape_keeps_printable_text_and_bounds_length() -> None:
    text = "read_file C:\\tmp «日本» 🙂 \"quoted\""
    assert escape(text) == text
    assert escape("x" * 1000, 50) == "x" * 49 + "…"
    assert len(escape("\x1b" * 1000, 50)) == 50  # escapes count towards the bound
    assert escape(12) == "12" and escape("") == ""


def test_the_serve_formatter_escapes_messages_and_indents_tracebacks() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(EscapingFormatter("%(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("otelloop.test_forging")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("refused session %s", SESSION)
        try:
            raise ValueError("bad value" + FORGE)
        except ValueError:
            logger.exception("processing failed for %s", AGENT)
    finally:
        logger.removeHandler(handler)
    lines = stream.getvalue().split("\n")[:-1]
    assert [line.split(":", 1)[0] for line in lines if not line.startswith("    ")] == [
        "WARNING otelloop.test_forging", "ERROR otelloop.test_forging"]
    assert all(line.isprintable() for line in lines)
    assert "    2026-01-01 00:00:00,000 ERROR otelloop: FORGED line\\r" in lines  # kept inside the traceback


def test_analyze_prints_recorded_span_content_escaped(tmp_path: Any) -> None:
    """``otelloop analyze`` prints a table of what recordings hold: a recording cannot add lines to it."""
    path = tmp_path / "recording.pb"
    path.write_bytes(hostile_loop())
    done = subprocess.run([sys.executable, "-m", "otelloop", "analyze", str(path)], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode()
    assert b"\x1b" not in done.stdout and [c for c in UNSAFE if c in out] == []
    lines = out.split("\n")[:-1]
    assert lines[0].startswith("SESSION") and "planner\\n2026-01-01" in lines[1]  # the agent, escaped
    assert all(line.startswith("    [") for line in lines[2:-1]) and len(lines) > 3
    assert lines[-1] == "1 session: 1 stop"  # the summary line closes the table


def _direct_writers() -> set[tuple[str, str]]:
    """(module, function) of every call that writes to stdout or stderr other than through logging."""
    root = Path(otelloop.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
            for call in [n for n in ast.walk(func) if isinstance(n, ast.Call)]:
                name = ast.unparse(call.func)
                if name in ("print", "click.echo", "sys.stderr.write", "sys.stdout.write"):
                    found.add((path.relative_to(root).as_posix(), func.name))
    return found


def test_span_values_reach_the_terminal_only_through_escaping_writers() -> None:
    """Everything else goes through logging, whose ``serve`` formatter escapes every message. A new
    direct writer must escape what it writes and be added here."""
    allowed = {("service.py", "print_finding"),  # escapes every value (the detect-only test above)
               ("cli.py", "_load"), ("cli.py", "analyze"), ("cli.py", "check_config"),  # render_table escapes
               ("demo.py", "_print_finding"), ("demo.py", "run_demo"),  # the demo's own agent, not outside spans
               ("cli.py", "_run_analysis"),  # escapes the input error it prints
               ("cli.py", "_print_reports"),  # render_table escapes; --json is JSON (control characters escaped)
               ("service.py", "startup_failed")}  # the operating system's reason a listener could not open
    assert _direct_writers() <= allowed
