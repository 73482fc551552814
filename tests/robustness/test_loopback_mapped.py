"""Probe: a local IPv4 client of a dual-stack IPv6 admin listener is a loopback client.

On a socket bound to ``[::]`` that also takes IPv4 (``IPV6_V6ONLY`` off, as socket activation and most
container runtimes hand them over), a connection from 127.0.0.1 arrives as ``::ffff:127.0.0.1``. Figure
held: 0 of 30 local requests refused (before: 15 of 30, every IPv4 one got 403, its address not counted
as loopback), while non-loopback addresses still are not loopback.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from aiohttp import web
from served import BackgroundLoop, http_call

from otelloop.admin import AdminAPI, is_loopback_address
from otelloop.pipeline import Pipeline


def _dual_stack_socket() -> socket.socket | None:
    """A listening ``[::]`` socket that also accepts IPv4, or None where the machine has no IPv6."""
    if not socket.has_ipv6:
        return None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0))
    except OSError:
        return None
    sock.listen(16)
    return sock


@pytest.fixture
def dual_stack_admin() -> Iterator[int]:
    """The port of an admin API on a dual-stack ``[::]`` socket, serving session data to loopback only."""
    sock = _dual_stack_socket()
    if sock is None:
        pytest.skip("no dual-stack IPv6 socket on this machine")
    bg = BackgroundLoop()
    api = AdminAPI(Pipeline(), lambda: (True, ""), read_localhost_only=True)

    async def start() -> web.AppRunner:
        runner = web.AppRunner(api.app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        return runner

    runner = bg.run(start())
    try:
        yield sock.getsockname()[1]
    finally:
        bg.run(runner.cleanup())
        bg.close()
        sock.close()


def test_local_ipv4_clients_of_a_dual_stack_listener_are_loopback(dual_stack_admin: int) -> None:
    port = dual_stack_admin
    refused = 0
    for host in ("127.0.0.1", "[::1]") * 5:
        for path in ("/v1/sessions", "/v1/alerts", "/"):
            code, body = http_call("GET", f"http://{host}:{port}{path}")
            refused += code == 403
            assert code == 200, (host, path, code, body[:200])
    assert refused == 0


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
    ("::ffff:127.0.0.1", True), ("::ffff:7f00:1", True), ("::ffff:127.255.0.1", True),
    ("::ffff:10.0.0.1", False), ("::ffff:192.168.1.1", False), ("10.0.0.1", False), ("::", False),
    ("::127.0.0.1", False),  # IPv4-compatible (deprecated), not a mapped address: not loopback
    ("64:ff9b::7f00:1", False),  # NAT64: the translator may be anywhere
    ("fe80::1%eth0", False), ("", False), ("localhost", False),
])
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback_address(address) is loopback
