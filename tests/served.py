"""A real ``otelloop serve`` process on 127.0.0.1 and real sinks on a background event loop, for e2e tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import yaml

T = TypeVar("T")


class BackgroundLoop:
    """An asyncio loop on a thread, so async sinks keep serving while a test blocks on a client."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Served:
    """``otelloop serve`` started as a subprocess with free ports and a ready file; stopped by its pid."""

    def __init__(self, tmp: Path, config: dict[str, Any] | None = None, args: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.tmp = tmp
        self.config_path = tmp / "otelloop.yaml"
        self.write_config(config or {})
        self.ready_file = tmp / "ready.json"
        self.stderr_path = tmp / "otelloop.stderr"
        cmd = [sys.executable, "-m", "otelloop", "serve", "--config", str(self.config_path),
               "--grpc-endpoint", "127.0.0.1:0", "--http-endpoint", "127.0.0.1:0",
               "--admin-endpoint", "127.0.0.1:0", "--ready-file", str(self.ready_file), *(args or [])]
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115  (the process writes it until stop() closes it)
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        full_env.update(env or {})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=self._stderr, env=full_env)
        self.addresses = self._wait_ready()

    def write_config(self, config: dict[str, Any]) -> None:
        self.config_path.write_text(yaml.safe_dump(config))

    def _wait_ready(self, timeout: float = 30) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.ready_file.exists():
                return json.loads(self.ready_file.read_text())
            if self.proc.poll() is not None:
                raise AssertionError(f"otelloop exited with {self.proc.returncode}:\n{self.stderr}")
            time.sleep(0.05)
        raise AssertionError(f"otelloop not ready in {timeout}s:\n{self.stderr}")

    @property
    def grpc(self) -> str:
        return self.addresses["grpc"]

    @property
    def http(self) -> str:
        return self.addresses["http"]

    @property
    def admin(self) -> str:
        return self.addresses["admin"]

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()
        return self.proc.returncode

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        return http_call("GET", f"http://{self.admin}{path}", headers=headers)

    def settle(self, timeout: float = 30) -> None:
        """Wait until the requests answered on receipt are processed (``/metrics`` is not made to wait for
        them, as the sessions API is)."""
        deadline = time.monotonic() + timeout
        while self._sample("otelloop_receive_backlog_requests", None) > 0:
            assert time.monotonic() < deadline, "otelloop's backlog did not drain"
            time.sleep(0.01)

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """One sample from ``/metrics`` (0 when absent), once the requests answered on receipt before
        are processed."""
        self.settle()
        return self._sample(name, labels)

    def _sample(self, name: str, labels: dict[str, str] | None) -> float:
        from prometheus_client.parser import text_string_to_metric_families

        _, body = self.get("/metrics")
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                    return s.value
        return 0.0

    def rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0


def free_port() -> int:
    """A loopback port nothing listens on yet (an upstream that is started later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_call(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
              timeout: float = 10) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_response(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                  timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_for(predicate: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout}s")
        time.sleep(0.05)
