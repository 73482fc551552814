"""``otelloop demo``: a newcomer's first minute, with nothing else installed and nothing off the machine.

The demo runs under ``strace`` so the test sees every socket the process (and its gRPC threads, which
bypass Python's socket module) binds or connects to; all must be loopback.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import extras
import pytest

#: Socket calls that carry an address; sendto/sendmsg would show a datagram's destination (e.g. DNS).
SYSCALLS = "connect,bind,sendto,sendmsg"
ADDRESS = re.compile(r'inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)"')


def addresses(trace: str, syscall: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The IP addresses of every ``syscall`` in an strace log."""
    found = []
    for line in trace.splitlines():
        if re.match(rf"^\d+\s+{syscall}\(", line):
            found += [ipaddress.ip_address(v4 or v6) for v4, v6 in ADDRESS.findall(line)]
    return found


def is_loopback(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def test_demo_catches_the_loop_on_loopback_only(tmp_path: Path) -> None:
    strace = shutil.which("strace")
    if strace is None:  # installed by .ci/run, where its absence fails (see extras.py)
        reason = "this test needs strace to see the demo's sockets: apt-get install -y strace"
        if extras.required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    log = tmp_path / "demo.strace"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    proc = subprocess.run([strace, "-f", "-qq", "-e", f"trace={SYSCALLS}", "-o", str(log),
                           sys.executable, "-m", "otelloop", "demo"],
                          check=False, capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    finding = re.compile(r"^\s+⚑ otelloop \[(warn|loop|stop)\] otelloop\.\w+: ", re.MULTILINE)
    verdict = re.compile(r"^Final verdict for session [0-9a-f]{32}: (nudge|stop)\b", re.MULTILINE)
    assert finding.search(out) and verdict.search(out), out
    trace = log.read_text()
    binds, connects = addresses(trace, "bind"), addresses(trace, "connect")
    assert binds and connects, "strace saw no socket activity: the check would prove nothing"
    outside = [str(a) for a in binds + connects + addresses(trace, "sendto") + addresses(trace, "sendmsg")
               if not is_loopback(a)]
    assert outside == []
