"""What ``otelloop serve`` says at start: a busy port in one line, the build, the file, the listeners,
the console and whether the upstream answered. Real processes on 127.0.0.1."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from served import free_port
from sinks import GrpcSink

from otelloop import __version__

REPO = Path(__file__).resolve().parents[1]
FLAGS = {"grpc": "--grpc-endpoint", "http": "--http-endpoint", "admin": "--admin-endpoint"}
NAMES = {"grpc": "OTLP/gRPC", "http": "OTLP/HTTP", "admin": "the admin API"}


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("listener", ["grpc", "http", "admin"])
def test_a_busy_port_is_one_line_and_exit_2(busy_port: int, listener: str) -> None:
    endpoints = {name: "127.0.0.1:0" for name in FLAGS}
    endpoints[listener] = f"127.0.0.1:{busy_port}"
    args = [arg for name, flag in FLAGS.items() for arg in (flag, endpoints[name])]
    proc = subprocess.run([sys.executable, "-m", "otelloop", "serve", *args], capture_output=True, text=True,
                          timeout=60, cwd=REPO, check=False)
    assert proc.returncode == 2, proc.stderr
    expected = (f"otelloop: cannot start: cannot listen for {NAMES[listener]} on 127.0.0.1:{busy_port}: "
                "Address already in use")
    assert proc.stderr.splitlines() == [expected]


def _head() -> str:
    return subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_startup_log_names_build_file_listeners_console_and_an_answering_upstream(
        serve: Any, grpc_sink: GrpcSink) -> None:
    o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{grpc_sink.port}"}})
    log = o.stderr
    assert f"otelloop {__version__}+g{_head()} starting with configuration {o.config_path}" in log
    assert f"OTLP/gRPC on {o.grpc}, OTLP/HTTP on {o.http}, admin on {o.admin}" in log
    assert f"console: http://{o.admin}/" in log
    assert re.search(rf"INFO otelloop: forwarding to grpc://127.0.0.1:{grpc_sink.port}: upstream "
                     rf"127.0.0.1:{grpc_sink.port} answered", log), log


def test_an_unreachable_upstream_is_warned_about_at_start(serve: Any) -> None:
    port = free_port()
    o = serve({"exporter": {"endpoint": f"http://127.0.0.1:{port}"}})
    assert re.search(rf"WARNING otelloop: forwarding to http://127.0.0.1:{port}: upstream 127.0.0.1:{port} did "
                     r"not answer \(Connection refused\)", o.stderr), o.stderr


def test_detect_only_mode_says_so_and_a_disabled_console_is_named(serve: Any) -> None:
    o = serve({"console": {"enabled": False}})
    assert "no upstream configured: detect-only mode" in o.stderr
    assert "console: disabled" in o.stderr
