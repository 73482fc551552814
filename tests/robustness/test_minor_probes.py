"""Probes of the smaller hazards: clients that vanish or stall, hostile configuration files, odd gzip.

* A client that drops mid-body costs one counted, rate-limited log line (never a traceback).
* Half-sent headers and bodies are closed after ``receiver.http.read_header_timeout`` and
  ``read_body_timeout``.
* Configuration problems (deep nesting, duplicate keys, non-finite numbers, zero timeouts, missing TLS
  files, an unusable queue directory) are reported with their key path and exit code 2 by both ``serve``
  and ``check-config``, before any port opens, without a traceback.
* A body of several gzip members is accepted, still bounded by the size limit.
"""

from __future__ import annotations

import gzip
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from probes import span_ids
from served import free_port, http_call, wait_for
from sinks import GrpcSink
from spans import request, tool_span

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def host_port(address: str) -> tuple[str, int]:
    host, port = address.rsplit(":", 1)
    return host, int(port)


# -- clients that vanish or stall ------------------------------------------------------------------


def test_clients_dropping_mid_body_are_counted_with_one_line_each_few_seconds(serve: Any) -> None:
    o = serve()
    addr = host_port(o.http)
    for _ in range(50):
        with socket.create_connection(addr) as s:
            s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                      b"Content-Length: 100000\r\n\r\n" + b"\x0a" * 1000)
            time.sleep(0.01)
    aborted = {"transport": "http", "reason": "client_gone"}
    wait_for(lambda: o.metric("otelloop_requests_aborted_total", aborted) == 50,
             what="50 aborted requests counted")
    log = o.stderr
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if "went away before its request was complete" in line]
    assert 1 <= len(lines) <= 3, lines
    assert o.get("/healthz")[0] == 200


def test_half_sent_headers_and_bodies_are_closed_after_their_timeouts(serve: Any) -> None:
    o = serve({"receiver": {"http": {"read_header_timeout": "1s", "read_body_timeout": "1s"}}})
    addr = host_port(o.http)
    headers = [socket.create_connection(addr) for _ in range(20)]
    for s in headers:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
    bodies = [socket.create_connection(addr) for _ in range(5)]
    for s in bodies:
        s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                  b"Content-Length: 100000\r\n\r\nabc")
    for s in headers + bodies:
        s.settimeout(30)  # far beyond the configured timeouts: a server that never closes fails here
    try:
        for s in headers:
            assert _read_until_closed(s) == b""
        for s in bodies:
            answer = _read_until_closed(s)
            assert answer.startswith(b"HTTP/1.1 408"), answer[:60]
    finally:
        for s in headers + bodies:
            s.close()
    assert o.metric("otelloop_requests_aborted_total", {"transport": "http", "reason": "timeout"}) == 5
    assert "Traceback" not in o.stderr


def _read_until_closed(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(4096):
        out += chunk
    return out


# -- configuration ---------------------------------------------------------------------------------

TLS_MISSING = "receiver:\n  tls: {cert_file: /nonexistent/cert.pem, key_file: /nonexistent/key.pem}\n"
BAD_CONFIGS = {
    "deep-nesting": ("mapping:\n  rules: " + "[" * 5000 + "]" * 5000 + "\n", "mapping.rules[0][0]",
                     "nested deeper than"),
    "duplicate-key": ("state:\n  max_sessions: 5\n  max_sessions: 6\n", "state.max_sessions",
                      "duplicate key"),
    "duplicate-section": ("state: {max_sessions: 5}\nexporter: {}\nstate: {}\n", "state", "duplicate key"),
    "memory-1e400": ("limits:\n  memory_mib: 1e400\n", "limits.memory_mib", "must be a finite number"),
    "memory-nan": ("limits:\n  memory_mib: .nan\n", "limits.memory_mib", "must be"),
    "queue-inf": ("exporter:\n  queue_spans: .inf\n", "exporter.queue_spans", "must be"),
    "price-inf": ("pricing:\n  m: {input_per_mtok: .inf}\n", "pricing.m.input_per_mtok",
                  "must be a finite number"),
    "idle-0s": ("state:\n  idle_timeout: 0s\n", "state.idle_timeout", "> 0"),
    "timeout-0": ("exporter:\n  timeout: 0\n", "exporter.timeout", "> 0"),
    "body-timeout-negative": ("receiver:\n  http: {read_body_timeout: -5}\n",
                              "receiver.http.read_body_timeout", "> 0"),
    "request-limit-0": ("exporter:\n  max_request_mib: 0\n", "exporter.max_request_mib", "> 0"),
    "tls-missing": (TLS_MISSING, "receiver.tls.cert_file", "no such file"),
    "exporter-ca-missing": ("exporter:\n  tls: {ca_file: /nonexistent/ca.pem}\n", "exporter.tls.ca_file",
                            "no such file"),
    "token-file-missing": ("admin:\n  token_file: /nonexistent/token\n", "admin.token_file", "no such file"),
}


def _run(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otelloop", *args], capture_output=True, text=True,
                          timeout=timeout)


def _expect_config_error(tmp_path: Path, text: str, key: str, reason: str) -> None:
    cfg = tmp_path / "otelloop.yaml"
    cfg.write_text(text)
    port = free_port()
    for args in (["check-config", str(cfg)],
                 ["serve", "--config", str(cfg), "--grpc-endpoint", f"127.0.0.1:{port}",
                  "--http-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0"]):
        proc = _run(args)
        assert proc.returncode == 2, (args[0], proc.returncode, proc.stderr[-2000:])
        assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) <= 3, proc.stderr[-2000:]
        line = proc.stderr.strip().splitlines()[0]
        assert line.startswith(f"otelloop: configuration error: {key}") and reason in line, line
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # serve never took its port


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
def test_configuration_problems_name_their_key_and_exit_2(tmp_path: Path, case: str) -> None:
    _expect_config_error(tmp_path, *BAD_CONFIGS[case])


def test_unusable_persistent_dir_and_unloadable_certificates(tmp_path: Path) -> None:
    a_file = tmp_path / "not-a-dir"
    a_file.write_text("x")
    _expect_config_error(tmp_path, f"exporter:\n  persistent_dir: {a_file}\n", "exporter.persistent_dir",
                         "not a directory")
    _expect_config_error(tmp_path, f"exporter:\n  persistent_dir: {a_file}/queue\n",
                         "exporter.persistent_dir", "cannot be created")
    garbage = tmp_path / "cert.pem"
    garbage.write_text("not a certificate\n")
    _expect_config_error(tmp_path, f"receiver:\n  tls: {{cert_file: {garbage}, key_file: {garbage}}}\n",
                         "receiver.tls.cert_file", "cannot load")


def test_a_creatable_persistent_dir_and_infinite_detector_thresholds_are_fine(tmp_path: Path) -> None:
    cfg = tmp_path / "otelloop.yaml"
    cfg.write_text(f"exporter:\n  persistent_dir: {tmp_path}/new/queue\n"
                   "detectors:\n  rate: {cost_usd_per_second: .inf}\n")
    proc = _run(["check-config", str(cfg)])
    assert proc.returncode == 0, proc.stderr


# -- gzip ------------------------------------------------------------------------------------------


def test_concatenated_gzip_members_are_one_body_still_bounded(serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"},
               "receiver": {"http": {"max_request_mib": 1}}})
    url = f"http://{o.http}/v1/traces"
    first, second = request(tool_span(trace=1)), request(tool_span(trace=2))
    body = gzip.compress(first) + gzip.compress(second)  # what `cat a.gz b.gz` makes
    code, answer = http_call("POST", url, body, {**PROTOBUF, "Content-Encoding": "gzip"})
    assert code == 200, answer
    wait_for(lambda: len(grpc_sink.delivered) >= 1, what="delivered")
    assert sorted(i for d in grpc_sink.delivered for i in span_ids(d)) == sorted(span_ids(first + second))
    # members that together exceed the limit are cut off, as is a bomb hidden in a later member
    part = gzip.compress(b"\x0a\x00" * (150 << 10))  # 300 KiB of empty ResourceSpans
    assert http_call("POST", url, part * 3, {**PROTOBUF, "Content-Encoding": "gzip"})[0] == 200
    assert http_call("POST", url, part * 4, {**PROTOBUF, "Content-Encoding": "gzip"})[0] == 413
    bomb = gzip.compress(first) + gzip.compress(b"\x00" * (256 << 20), compresslevel=9)
    assert http_call("POST", url, bomb, {**PROTOBUF, "Content-Encoding": "gzip"})[0] == 413
    assert http_call("POST", url, gzip.compress(first) + b"trailing junk",
                     {**PROTOBUF, "Content-Encoding": "gzip"})[0] == 400
    assert o.get("/healthz")[0] == 200
