"""Security of ``otelloop serve`` (a real subprocess on 127.0.0.1): bearer tokens on the receivers and the
admin write API, TLS and mTLS on every listener, TLS to an upstream with a private CA, the loopback-only
read API, and what ``/metrics`` and the logs must never carry."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from served import BackgroundLoop, Served, http_call, wait_for
from sinks import GrpcSink, HttpSink, Pki, make_pki
from spans import request, span, tool_span

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
TOKEN = "tok-3f9a1c77e2b54d0e"
OTHER_TOKEN = "tok-second-88d1"
ADMIN_TOKEN = "adm-51c0ffee7d2a4b19"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(Path(tmp_path_factory.mktemp("pki")))


def grpc_export(target: str, data: bytes, metadata: tuple[tuple[str, str], ...] = (),
                credentials: grpc.ChannelCredentials | None = None) -> grpc.StatusCode:
    """The status of one Export call (OK on success)."""
    channel = grpc.secure_channel(target, credentials) if credentials else grpc.insecure_channel(target)
    with channel:
        try:
            channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)(
                data, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def https_call(method: str, url: str, context: ssl.SSLContext, body: bytes | None = None,
               headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def client_context(pki: Pki, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    if with_cert:
        context.load_cert_chain(pki.client_cert, pki.client_key)
    return context


def grpc_credentials(pki: Pki, with_cert: bool) -> grpc.ChannelCredentials:
    if with_cert:
        return grpc.ssl_channel_credentials(pki.ca.read_bytes(), pki.client_key.read_bytes(),
                                            pki.client_cert.read_bytes())
    return grpc.ssl_channel_credentials(pki.ca.read_bytes())


# ---------------------------------------------------------------------------------------------------
# Bearer tokens on the OTLP receivers


def test_receivers_require_a_bearer_token_from_the_tokens_file(serve: Any, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n\n{OTHER_TOKEN}\n")
    o = serve({"receiver": {"auth": {"bearer_tokens_file": str(tokens)}}})
    data = request(tool_span())
    assert grpc_export(o.grpc, data) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(o.grpc, data, (("authorization", "Bearer wrong-token"),)) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(o.grpc, data, (("authorization", TOKEN),)) == grpc.StatusCode.UNAUTHENTICATED  # no scheme
    assert grpc_export(o.grpc, data, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    assert grpc_export(o.grpc, data, (("authorization", f"bearer {OTHER_TOKEN}"),)) == grpc.StatusCode.OK
    url = f"http://{o.http}/v1/traces"
    assert http_call("POST", url, data, PROTOBUF)[0] == 401
    assert http_call("POST", url, data, {**PROTOBUF, "Authorization": "Bearer nope"})[0] == 401
    assert http_call("POST", url, data, {**PROTOBUF, "Authorization": f"Bearer {TOKEN}"})[0] == 200
    status, headers, _ = _http_response_headers(url, data)
    assert status == 401 and headers.get("WWW-Authenticate") == "Bearer"
    assert o.metric("otelloop_spans_refused_total", {"transport": "grpc", "reason": "unauthenticated"}) == 3
    assert o.metric("otelloop_spans_refused_total", {"transport": "http", "reason": "unauthenticated"}) == 3
    assert o.metric("otelloop_spans_received_total", {"transport": "grpc"}) == 2
    _assert_secret_free(o, TOKEN, OTHER_TOKEN, "wrong-token")


def test_inline_tokens_work_too(serve: Any) -> None:
    o = serve({"receiver": {"auth": {"bearer_tokens": [TOKEN]}}})
    data = request(tool_span())
    assert grpc_export(o.grpc, data) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(o.grpc, data, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
    _assert_secret_free(o, TOKEN)


def test_tokens_from_environment_variables(serve: Any) -> None:
    o = serve({"receiver": {"auth": {"bearer_tokens_env": "OTLP_TOKENS"}}, "admin": {"token_env": "ADMIN_TOKEN"}},
              env={"OTLP_TOKENS": f"{TOKEN}, {OTHER_TOKEN}", "ADMIN_TOKEN": ADMIN_TOKEN})
    data = request(tool_span(trace=0xE1))
    assert grpc_export(o.grpc, data) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(o.grpc, data, (("authorization", f"Bearer {OTHER_TOKEN}"),)) == grpc.StatusCode.OK
    pause = f"http://{o.admin}/v1/sessions/{format(0xE1, '032x')}/pause"
    assert http_call("POST", pause, headers={"Authorization": "Bearer x"})[0] == 403
    assert http_call("POST", pause, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})[0] == 200
    _assert_secret_free(o, TOKEN, OTHER_TOKEN, ADMIN_TOKEN)


def _http_response_headers(url: str, data: bytes) -> tuple[int, dict[str, str], bytes]:
    from served import http_response

    return http_response("POST", url, data, PROTOBUF)


def _assert_secret_free(o: Served, *secrets: str) -> None:
    metrics = o.get("/metrics")[1].decode()
    logs = o.stderr
    for secret in secrets:
        assert secret not in metrics
        assert secret not in logs


# ---------------------------------------------------------------------------------------------------
# The admin API's write endpoints


def test_admin_write_endpoints_need_the_admin_token(serve: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "admin-token"
    token_file.write_text(ADMIN_TOKEN + "\n")
    o = serve({"admin": {"token_file": str(token_file)}})
    assert grpc_export(o.grpc, request(tool_span(trace=0xABC))) == grpc.StatusCode.OK
    session = format(0xABC, "032x")
    auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    wait_for(lambda: o.get(f"/v1/sessions/{session}", auth)[0] == 200, what="session known")
    pause = f"http://{o.admin}/v1/sessions/{session}/pause"
    assert http_call("POST", pause)[0] == 401
    assert http_call("POST", pause, headers={"Authorization": "Bearer not-the-token"})[0] == 403
    assert http_call("POST", pause, headers={"Authorization": ADMIN_TOKEN})[0] == 403  # no scheme
    assert o.get(f"/v1/sessions/{session}/verdict")[1].count(b"paused") == 0
    status, body = http_call("POST", pause, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert status == 200 and b"paused" in body
    resume = f"http://{o.admin}/v1/sessions/{session}/resume"
    assert http_call("POST", resume)[0] == 401
    assert http_call("POST", resume, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})[0] == 200
    assert o.get(f"/v1/sessions/{session}")[0] == 401  # reads of session data need the token too
    assert o.get(f"/v1/sessions/{session}", auth)[0] == 200
    _assert_secret_free(o, ADMIN_TOKEN, "not-the-token")


# ---------------------------------------------------------------------------------------------------
# TLS and mTLS on the listeners


def _tls(pki: Pki, mtls: bool) -> dict[str, Any]:
    tls = {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)}
    if mtls:
        tls["client_ca_file"] = str(pki.ca)
    return {"receiver": {"tls": tls}}


def test_tls_on_all_three_listeners(serve: Any, pki: Pki) -> None:
    o = serve(_tls(pki, mtls=False))
    data = request(tool_span())
    assert grpc_export(o.grpc, data, credentials=grpc_credentials(pki, with_cert=False)) == grpc.StatusCode.OK
    context = client_context(pki, with_cert=False)
    assert https_call("POST", f"https://{o.http}/v1/traces", context, data, PROTOBUF)[0] == 200
    status, body = https_call("GET", f"https://{o.admin}/metrics", context)
    assert status == 200 and b"otelloop_spans_received_total" in body
    # plaintext is not served on any of them
    assert grpc_export(o.grpc, data) == grpc.StatusCode.UNAVAILABLE
    for address in (o.http, o.admin):
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://{address}/healthz", timeout=5).read()
    # a client that does not trust the private CA refuses the server
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(f"https://{o.admin}/healthz", timeout=5, context=ssl.create_default_context())


@pytest.mark.parametrize("admin_mtls", [False, True], ids=["admin-plain-tls", "admin-mtls"])
def test_mtls_refuses_clients_without_a_certificate(serve: Any, pki: Pki, admin_mtls: bool) -> None:
    config = _tls(pki, mtls=True)
    config["admin"] = {"require_client_cert": admin_mtls}
    o = serve(config)
    data = request(tool_span())
    assert grpc_export(o.grpc, data, credentials=grpc_credentials(pki, with_cert=False)) == \
        grpc.StatusCode.UNAVAILABLE
    assert grpc_export(o.grpc, data, credentials=grpc_credentials(pki, with_cert=True)) == grpc.StatusCode.OK
    without, with_cert = client_context(pki, with_cert=False), client_context(pki, with_cert=True)
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        https_call("POST", f"https://{o.http}/v1/traces", without, data, PROTOBUF)
    assert https_call("POST", f"https://{o.http}/v1/traces", with_cert, data, PROTOBUF)[0] == 200
    assert https_call("GET", f"https://{o.admin}/healthz", with_cert)[0] == 200
    if admin_mtls:
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            https_call("GET", f"https://{o.admin}/metrics", without)
    else:  # probes and Prometheus reach the admin port over plain TLS
        assert https_call("GET", f"https://{o.admin}/healthz", without)[0] == 200
    assert o.stop() == 0


def test_tls_and_bearer_token_together(serve: Any, pki: Pki) -> None:
    config = _tls(pki, mtls=False)
    config["receiver"]["auth"] = {"bearer_tokens": [TOKEN]}
    o = serve(config)
    data = request(tool_span())
    creds = grpc_credentials(pki, with_cert=False)
    assert grpc_export(o.grpc, data, credentials=creds) == grpc.StatusCode.UNAUTHENTICATED
    assert grpc_export(o.grpc, data, (("authorization", f"Bearer {TOKEN}"),), creds) == grpc.StatusCode.OK


# ---------------------------------------------------------------------------------------------------
# TLS to the upstream


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_upstream_over_tls_with_a_private_ca(serve: Any, loop: BackgroundLoop, pki: Pki, protocol: str) -> None:
    sink: GrpcSink | HttpSink
    if protocol == "grpc":
        sink = loop.run(GrpcSink(credentials=pki.grpc_server_credentials(require_client=True)).start())
        url = f"grpcs://127.0.0.1:{sink.port}"
    else:
        sink = loop.run(HttpSink(ssl_context=pki.server_ssl_context(require_client=True)).start())
        url = sink.url
    try:
        o = serve({"exporter": {"endpoint": url, "tls": {"ca_file": str(pki.ca), "cert_file": str(pki.client_cert),
                                                         "key_file": str(pki.client_key)}}})
        for _ in range(3):
            assert grpc_export(o.grpc, request(tool_span())) == grpc.StatusCode.OK
        wait_for(lambda: o.metric("otelloop_spans_exported_total") == 3, what="delivery over TLS")
        assert len(sink.delivered) >= 1
    finally:
        loop.run(sink.stop())


def test_upstream_with_an_untrusted_certificate_is_not_sent_to(serve: Any, loop: BackgroundLoop, pki: Pki) -> None:
    sink = loop.run(GrpcSink(credentials=pki.grpc_server_credentials()).start())
    try:
        # system roots: the private CA is unknown
        o = serve({"exporter": {"endpoint": f"grpcs://127.0.0.1:{sink.port}", "retry_initial_interval": "50ms",
                                "retry_max_interval": "100ms", "shutdown_grace": "1s"}})
        assert grpc_export(o.grpc, request(tool_span())) == grpc.StatusCode.OK
        wait_for(lambda: o.metric("otelloop_export_duration_seconds_count", {"outcome": "retryable"}) >= 2,
                 what="handshake failures")
        assert sink.delivered == [] and o.metric("otelloop_export_queue_spans") == 1
    finally:
        loop.run(sink.stop())


# ---------------------------------------------------------------------------------------------------
# The sessions read API on loopback only


def _non_loopback_address() -> str | None:
    """An address of this machine that is not loopback, or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent; this only picks a source address
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_read_api_can_be_limited_to_loopback(serve: Any) -> None:
    address = _non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from")
    o = serve({"admin": {"read_localhost_only": True}}, args=["--admin-endpoint", "0.0.0.0:0"])
    port = o.admin.rsplit(":", 1)[1]
    assert grpc_export(o.grpc, request(tool_span(trace=0xDEF))) == grpc.StatusCode.OK
    session = format(0xDEF, "032x")
    local, remote = f"http://127.0.0.1:{port}", f"http://{address}:{port}"
    for path in ("/v1/sessions", f"/v1/sessions/{session}", f"/v1/sessions/{session}/verdict"):
        assert http_call("GET", local + path)[0] == 200
        assert http_call("GET", remote + path)[0] == 403
    assert http_call("GET", remote + "/healthz")[0] == 200  # probes and scrapes stay reachable
    assert http_call("GET", remote + "/metrics")[0] == 200


# ---------------------------------------------------------------------------------------------------
# /metrics never carries span content


def test_metrics_carry_no_span_content_ids_or_tokens(serve: Any, loop: BackgroundLoop) -> None:
    sink = loop.run(GrpcSink().start())
    try:
        o = serve({"exporter": {"endpoint": f"grpc://127.0.0.1:{sink.port}",
                                "headers": {"authorization": "Bearer upstream-secret-77"}},
                   "receiver": {"auth": {"bearer_tokens": [TOKEN]}}, "state": {"group_by": "session"}})
        secrets = {"args": "ARGS-canary-5e1f", "result": "RESULT-canary-0b7d", "session": "SESSION-canary-91aa",
                   "tool": "TOOL-canary-c3d2", "error": "ERROR-canary-7f00", "prompt": "PROMPT-canary-44aa"}
        spans = [tool_span(secrets["tool"], args=f'{{"q": "{secrets["args"]}"}}', result=secrets["result"],
                           trace=0xFEEDFACE, i=k, error=secrets["error"],
                           attrs={"session.id": secrets["session"], "gen_ai.prompt": secrets["prompt"]})
                 for k in range(5)]
        spans.append(span("chat", {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                                   "gen_ai.usage.input_tokens": 10, "session.id": secrets["session"],
                                   "gen_ai.completion.0.content": secrets["result"]}, trace=0xFEEDFACE, i=6))
        data = request(*spans)
        assert grpc_export(o.grpc, data, (("authorization", f"Bearer {TOKEN}"),)) == grpc.StatusCode.OK
        wait_for(lambda: o.metric("otelloop_spans_exported_total") == 6, what="delivery")
        assert o.metric("otelloop_findings_total") >= 0
        metrics = o.get("/metrics")[1].decode()
        assert "otelloop_findings_total{" in metrics  # the loop was detected and counted
        ids = [format(0xFEEDFACE, "032x"), format(0xFEEDFACE, "x")] + [s.span_id.hex() for s in spans]
        for value in [*secrets.values(), *ids, TOKEN, "upstream-secret-77"]:
            assert value not in metrics, value
            assert value.lower() not in metrics.lower(), value
        assert "upstream-secret-77" not in o.stderr and TOKEN not in o.stderr
    finally:
        loop.run(sink.stop())
