"""What ``otelloop serve`` says when it starts: which build, which file, where it listens, where the
console is, and whether the upstream answers.

An operator reading the first lines of a pod's log should not have to guess which build runs, which
configuration it read or where its console is; and an upstream that cannot be reached is said at start,
when the cause is still obvious, instead of surfacing as export failures minutes later.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from otelloop.config import Config, parse_upstream, split_host_port
from otelloop.version import full_version

#: Seconds the start-up probe waits for the upstream's TCP handshake.
PROBE_TIMEOUT = 3.0
_WILDCARDS = ("", "0.0.0.0", "::")


@dataclass(frozen=True)
class ProbeResult:
    """The outcome of one connection attempt to the upstream."""

    target: str
    answered: bool
    detail: str


def upstream_address(endpoint: str, protocol: str) -> tuple[str, int]:
    """The host and port the exporter connects to, from ``exporter.endpoint``."""
    proto, target, tls = parse_upstream(endpoint, protocol)
    if proto == "grpc":
        return split_host_port(target)
    url = urlsplit(target)
    return url.hostname or "", url.port or (443 if tls else 80)


async def probe_upstream(endpoint: str, protocol: str, timeout: float = PROBE_TIMEOUT) -> ProbeResult:
    """Open (and close) one TCP connection to the upstream: enough to tell a wrong host or port, a
    firewall or a backend that is down from one that listens. Never raises."""
    try:
        host, port = upstream_address(endpoint, protocol)
    except ValueError as e:
        return ProbeResult(endpoint, False, str(e))
    target = f"{host}:{port}"
    started = time.perf_counter()
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except TimeoutError:
        return ProbeResult(target, False, f"no answer within {timeout:.0f}s")
    except OSError as e:
        return ProbeResult(target, False, os.strerror(e.errno) if e.errno else str(e))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return ProbeResult(target, True, f"connected in {(time.perf_counter() - started) * 1000:.0f} ms")


def console_url(config: Config, admin_address: str) -> str | None:
    """Where an operator opens the console (a wildcard listen address is shown as ``localhost``)."""
    if not config.console.enabled:
        return None
    host, port = split_host_port(admin_address)
    host = "localhost" if host in _WILDCARDS else host
    host = f"[{host}]" if ":" in host else host
    scheme = "https" if config.receiver.tls.enabled else "http"
    return f"{scheme}://{host}:{port}/"


def startup_lines(config: Config, config_path: str | None, addresses: dict[str, str],
                  probe: ProbeResult | None) -> list[tuple[bool, str]]:
    """The start-up summary as ``(is_warning, text)`` lines, in the order they are logged."""
    source = f"configuration {config_path}" if config_path else "no configuration file (defaults and flags)"
    lines = [(False, f"otelloop {full_version()} starting with {source}"),
             (False, f"otelloop ready: OTLP/gRPC on {addresses['grpc']}, OTLP/HTTP on {addresses['http']}, "
                     f"admin on {addresses['admin']}")]
    url = console_url(config, addresses["admin"])
    lines.append((False, f"console: {url}" if url else "console: disabled (console.enabled: false)"))
    endpoint = config.exporter.endpoint
    if not endpoint:
        lines.append((False, "no upstream configured: detect-only mode, findings are printed to stderr"))
    elif probe is not None and probe.answered:
        lines.append((False, f"forwarding to {endpoint}: upstream {probe.target} answered ({probe.detail})"))
    elif probe is not None:
        lines.append((True, f"forwarding to {endpoint}: upstream {probe.target} did not answer "
                            f"({probe.detail}); spans are queued and retried until it does "
                            "(check --upstream / exporter.endpoint)"))
    return lines
