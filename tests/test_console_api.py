"""Who may read session data on the admin listener, what the verdict endpoint tells agents, what the console
and the sessions API send, and that no secret from a span reaches any of them.

Non-loopback clients are real: the admin listener is bound to 0.0.0.0 and called on this machine's
non-loopback address (the test is skipped when the machine has none); the peer check itself is also
unit-tested with mocked peers.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
from pathlib import Path
from typing import Any

import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from console_agents import SECRET, healthy_agent, looping_agent
from served import http_call, http_response, wait_for
from spans import request, span, tool_span

from otelloop.admin import GENERIC_MESSAGES, AdminAPI
from otelloop.config import build_config
from otelloop.pipeline import Pipeline
from otelloop.state import NAME_CHARS

TOKEN = "admin-console-token-9e2b"
AGENT_TOKEN = "agent-verdict-token-51c0"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
DATA_PATHS = ("/v1/sessions", "/v1/sessions/{sid}", "/v1/alerts", "/v1/events")
OPEN_PATHS = ("/healthz", "/readyz", "/metrics")


def non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # picks a source address; nothing is sent
            address = s.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def status(url: str, headers: dict[str, str] | None = None, method: str = "GET") -> int:
    """The status of a request; for the event stream only the head is read, then the connection closed."""
    host, _, path = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=10)
    try:
        conn.request(method, "/" + path, body=b"" if method == "POST" else None, headers=headers or {})
        return conn.getresponse().status
    finally:
        conn.close()


def grpc_export(target: str, data: bytes) -> grpc.StatusCode:
    with grpc.insecure_channel(target) as ch:
        try:
            ch.unary_unary(EXPORT)(data, timeout=10)
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def body_of(served: Any, path: str, headers: dict[str, str] | None = AUTH) -> Any:
    code, body = served.get(path, headers)
    assert code == 200, (path, code, body)
    return json.loads(body)


# ---------------------------------------------------------------------------------------------------
# With an admin token


def test_session_data_needs_the_admin_token(serve: Any) -> None:
    o = serve({"admin": {"token": TOKEN}})
    sid = looping_agent(o.grpc)
    base = f"http://{o.admin}"
    for path in DATA_PATHS:
        url = base + path.format(sid=sid)
        assert status(url) == 401, path
        assert status(url, {"Authorization": "Bearer wrong"}) == 403, path
        assert status(url, {"Authorization": TOKEN}) == 403, path  # no scheme
        assert status(url, AUTH) == 200, path
    for action in ("pause", "resume", "acknowledge"):
        assert status(f"{base}/v1/sessions/{sid}/{action}", method="POST") == 401
    for path in OPEN_PATHS:  # probes and scrapes stay open
        assert status(base + path) == 200, path
    # the page holds no data and is served; it learns that it must ask for the token
    assert status(base + "/") == 200 and status(base + "/console/console.js") == 200
    assert body_of(o, "/console/config.json", None)["auth"] == "token"
    assert TOKEN not in o.stderr


def test_the_verdict_carries_no_agent_content_without_authorisation(serve: Any) -> None:
    o = serve({"admin": {"token": TOKEN}})
    sid = looping_agent(o.grpc)
    anonymous = body_of(o, f"/v1/sessions/{sid}/verdict", None)
    assert anonymous == {"verdict": "stop", "reason": "loop_halted: stalled", "message": GENERIC_MESSAGES["stop"]}
    operator = body_of(o, f"/v1/sessions/{sid}/verdict")
    assert operator["verdict"] == "stop" and "planner" in operator["message"]  # the specific instruction


def test_an_agent_token_guards_the_verdict_and_opens_nothing_else(serve: Any) -> None:
    o = serve({"admin": {"token": TOKEN, "agent_token": AGENT_TOKEN}})
    sid = looping_agent(o.grpc)
    url = f"http://{o.admin}/v1/sessions/{sid}/verdict"
    assert status(url) == 401 and status(url, {"Authorization": "Bearer wrong"}) == 403
    agent = body_of(o, f"/v1/sessions/{sid}/verdict", {"Authorization": f"Bearer {AGENT_TOKEN}"})
    assert "planner" in agent["message"] and SECRET not in json.dumps(agent)
    assert body_of(o, f"/v1/sessions/{sid}/verdict")["verdict"] == "stop"  # the admin token works too
    assert status(f"http://{o.admin}/v1/sessions", {"Authorization": f"Bearer {AGENT_TOKEN}"}) == 403


def test_the_client_helper_reads_its_verdict_with_the_agent_token(serve: Any) -> None:
    from otelloop.client import check_verdict

    o = serve({"admin": {"agent_token": AGENT_TOKEN}})
    sid = looping_agent(o.grpc)
    assert check_verdict(f"http://{o.admin}", session_id=sid, token=AGENT_TOKEN, timeout=5).verdict == "stop"
    failed = check_verdict(f"http://{o.admin}", session_id=sid, timeout=5)  # refused: the guard says continue
    assert failed.verdict == "continue" and "401" in failed.reason


# ---------------------------------------------------------------------------------------------------
# Without a token: loopback only, unless opened


def test_without_a_token_session_data_answers_loopback_clients_only(serve: Any) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from (the peer check is unit-tested)")
    o = serve(args=["--admin-endpoint", "0.0.0.0:0"])
    sid = looping_agent(o.grpc)
    port = o.admin.rsplit(":", 1)[1]
    local, remote = f"http://127.0.0.1:{port}", f"http://{address}:{port}"
    for path in (*DATA_PATHS, "/", "/console/config.json"):
        assert status(local + path.format(sid=sid)) == 200, path
        assert status(remote + path.format(sid=sid)) == 403, path
    assert status(f"{remote}/v1/sessions/{sid}/pause", method="POST") == 403
    for path in OPEN_PATHS:
        assert status(remote + path) == 200, path
    # an agent elsewhere on the network still learns its verdict, without agent content
    code, body = http_call("GET", f"{remote}/v1/sessions/{sid}/verdict")
    assert code == 200 and json.loads(body)["message"] == GENERIC_MESSAGES["stop"]
    code, body = http_call("GET", f"{local}/v1/sessions/{sid}/verdict")
    assert code == 200 and "planner" in json.loads(body)["message"]


def test_allow_remote_without_token_opens_session_data(serve: Any) -> None:
    address = non_loopback_address()
    if address is None:
        pytest.skip("this machine has no non-loopback address to connect from (the peer check is unit-tested)")
    o = serve({"admin": {"allow_remote_without_token": True}}, args=["--admin-endpoint", "0.0.0.0:0"])
    sid = looping_agent(o.grpc)
    remote = f"http://{address}:{o.admin.rsplit(':', 1)[1]}"
    for path in DATA_PATHS:
        assert status(remote + path.format(sid=sid)) == 200, path
    _code, body = http_call("GET", f"{remote}/v1/sessions/{sid}/verdict")
    assert "planner" in json.loads(body)["message"]


def test_a_rebound_dns_name_cannot_read_loopback_data(serve: Any) -> None:
    o = serve()
    sid = looping_agent(o.grpc)
    port = o.admin.rsplit(":", 1)[1]
    assert status(f"http://127.0.0.1:{port}/v1/sessions", {"Host": f"attacker.example:{port}"}) == 403
    assert status(f"http://127.0.0.1:{port}/", {"Host": f"attacker.example:{port}"}) == 403
    assert status(f"http://127.0.0.1:{port}/v1/sessions", {"Host": f"localhost:{port}"}) == 200
    assert status(f"http://127.0.0.1:{port}/v1/sessions/{sid}", {"Host": f"[::1]:{port}"}) == 200


def test_cross_site_writes_are_refused(serve: Any) -> None:
    o = serve({"admin": {"token": TOKEN}})
    sid = looping_agent(o.grpc)
    url = f"http://{o.admin}/v1/sessions/{sid}/pause"
    assert status(url, {**AUTH, "Origin": "http://attacker.example"}, "POST") == 403
    assert status(url, {**AUTH, "Sec-Fetch-Site": "cross-site"}, "POST") == 403
    assert status(url, {**AUTH, "Origin": f"http://{o.admin}", "Sec-Fetch-Site": "same-origin"}, "POST") == 200
    ack = f"http://{o.admin}/v1/sessions/{sid}/acknowledge"
    assert status(ack, {**AUTH, "Origin": "http://attacker.example"}, "POST") == 403
    assert status(ack, {**AUTH, "Sec-Fetch-Site": "cross-site"}, "POST") == 403
    assert sid in [a["session_id"] for a in body_of(o, "/v1/alerts")["alerts"]]
    assert status(ack, {**AUTH, "Origin": f"http://{o.admin}", "Sec-Fetch-Site": "same-origin"}, "POST") == 200
    assert sid not in [a["session_id"] for a in body_of(o, "/v1/alerts")["alerts"]]
    assert body_of(o, f"/v1/sessions/{sid}")["acknowledged_unix_ms"] > 0


def _mocked(remote: str, host: str = "127.0.0.1:9464", headers: dict[str, str] | None = None) -> web.Request:
    class Transport:
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return (remote, 50000) if name == "peername" else default

    return make_mocked_request("GET", "/v1/sessions", headers={"Host": host, **(headers or {})},
                               transport=Transport())


@pytest.mark.parametrize(("peer", "allowed"), [("127.0.0.1", True), ("127.8.9.10", True), ("::1", True),
                                               ("10.0.0.5", False), ("192.0.2.2", False), ("fd00::2", False),
                                               ("::ffff:10.0.0.5", False)])
def test_peer_check(peer: str, allowed: bool) -> None:
    api = AdminAPI(Pipeline(), lambda: (True, ""))
    assert api.may_read(_mocked(peer)) is allowed
    opened = AdminAPI(Pipeline(), lambda: (True, ""), allow_remote_without_token=True)
    assert opened.may_read(_mocked(peer)) is True
    tokened = AdminAPI(Pipeline(), lambda: (True, ""), token=TOKEN)
    assert tokened.may_read(_mocked(peer)) is False
    assert tokened.may_read(_mocked(peer, headers=AUTH)) is True
    strict = AdminAPI(Pipeline(), lambda: (True, ""), token=TOKEN, read_localhost_only=True)
    assert strict.may_read(_mocked(peer, headers=AUTH)) is allowed


def test_config_refuses_contradictory_access_settings() -> None:
    from otelloop.config import ConfigError

    with pytest.raises(ConfigError, match=r"admin\.allow_remote_without_token"):
        build_config({"admin": {"allow_remote_without_token": True, "read_localhost_only": True}}, env={})
    with pytest.raises(ConfigError, match=r"console\.trace_url: must be an http"):
        build_config({"console": {"trace_url": "javascript:alert(1)//{trace_id}"}}, env={})


# ---------------------------------------------------------------------------------------------------
# Headers and the page


def test_strict_headers_and_no_inline_script_or_style(serve: Any) -> None:
    o = serve()
    for path, kind in (("/", "text/html"), ("/console/console.js", "text/javascript"),
                       ("/console/console.css", "text/css"), ("/v1/sessions", "application/json"),
                       ("/healthz", "application/json")):
        code, headers, _body = http_response("GET", f"http://{o.admin}{path}")
        assert code == 200 and headers["Content-Type"].startswith(kind), (path, headers)
        csp = headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe" not in csp
        assert "frame-ancestors 'none'" in csp and headers["X-Frame-Options"] == "DENY"
        assert headers["X-Content-Type-Options"] == "nosniff"
    html = http_call("GET", f"http://{o.admin}/")[1].decode()
    assert "<style" not in html and not re.search(r"\sstyle\s*=", html) and not re.search(r"\son\w+\s*=", html)
    assert html.count("<script") == html.count('<script src="/console/') == 1
    assert http_call("GET", f"http://{o.admin}/console/../otelloop.yaml")[0] == 404
    assert http_call("GET", f"http://{o.admin}/console/admin.py")[0] == 404


def test_package_data_ships_the_console() -> None:
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"console/*.html", "console/*.js", "console/*.css"' in text


# ---------------------------------------------------------------------------------------------------
# The sessions API for the console


def test_sessions_page_counts_search_and_alerts(serve: Any) -> None:
    # Every detector's evidence: also what the agent got stuck on after its first stop (the hold off;
    # with the defaults see test_a_stopped_session_that_keeps_sending_is_held).
    o = serve({"state": {"hold_stopped_sessions": False}})
    looping = looping_agent(o.grpc, service="research-agent")
    healthy = healthy_agent(o.grpc, service="billing-agent")
    listing = body_of(o, "/v1/sessions", None)
    assert [s["session_id"] for s in listing["sessions"]] == [looping, healthy]
    assert listing["counts"] == {"continue": 1, "nudge": 0, "stop": 1, "paused": 0} and listing["total"] == 2
    first = listing["sessions"][0]
    assert first["loop"] == {"cycle_id": "coder,planner", "iteration": 3, "budget": 8}
    assert first["intervention"] == "stop" and first["entropy_severity"] == "loop" and first["trace_id"] == looping
    assert body_of(o, "/v1/sessions?q=BILLING", None)["sessions"][0]["session_id"] == healthy
    assert body_of(o, f"/v1/sessions?q={looping[:10]}", None)["total"] == 1
    page = body_of(o, "/v1/sessions?limit=1&offset=1", None)
    assert [s["session_id"] for s in page["sessions"]] == [healthy] and page["total"] == 2
    assert http_call("GET", f"http://{o.admin}/v1/sessions?limit=x")[0] == 400
    alerts = body_of(o, "/v1/alerts", None)["alerts"]
    assert [a["session_id"] for a in alerts] == [looping] and alerts[0]["alerts"] > 1
    assert alerts[0]["finding"]["severity"] in ("warn", "loop", "stop")
    detail = body_of(o, f"/v1/sessions/{looping}", None)
    steps = detail["recent_steps"]
    assert len(steps) >= 18 and [s["name"] for s in steps[-6:]] == ["search_web"] * 6
    assert steps[-1]["args"] == '{"query":"weather in Paris"}' and steps[-1]["result"] == "no results"
    bash = next(s for s in steps if s["name"] == "bash")
    assert bash["outcome"] == "error" and "curl" in bash["args"] and SECRET not in bash["args"]
    repeated = next(f for f in detail["findings"] if f.get("call", {}).get("name") == "search_web")
    assert repeated["call"] == {"name": "search_web", "args": steps[-1]["args"], "result": "no results"}
    assert detail["verdict_history"][-1]["verdict"] == "stop"
    halted = next(f for f in detail["findings"] if f["event"] == "otelloop.loop_halted")
    assert halted["evidence"]["halt_reason"] == "stalled" and "spawn_reviewer" in halted["suggested_actions"]


def test_a_stopped_session_that_keeps_sending_is_held(serve: Any) -> None:
    """Defaults: the graph's stall stops the session; the failing command and the searches it goes on to
    repeat are held — counted, in the scores, never judged, so they raise no finding."""
    o = serve()
    looping = looping_agent(o.grpc)
    detail = body_of(o, f"/v1/sessions/{looping}", None)
    [stop] = detail["verdict_history"]
    assert (detail["verdict"], stop["reason"]) == ("stop", "loop_halted: stalled")
    steps = [(x["kind"], x["name"]) for x in detail["recent_steps"]]
    assert steps[:7] == [("system", "invoke_agent planner"), ("system", "invoke_agent coder")] * 3 + [
        ("system", "invoke_agent planner")]  # the 4th planner turn with the same plan stops it
    after = steps[7:]
    assert after == [("system", "invoke_agent coder")] + [("tool", "bash")] * 4 + [("tool", "search_web")] * 6
    # held: all but the first search, whose result was new (the failing command never brought anything)
    assert detail["held_steps"] == len(after) - 1 == 10
    assert [f["event"] for f in detail["findings"]] == ["otelloop.loop_halted"]
    # the entropy window takes in held steps (five identical searches); trajectory judged none of them
    assert (detail["entropy_score"], detail["entropy_severity"], detail["intervention"]) == (0.2, "loop", "observe")
    listed = body_of(o, "/v1/sessions", None)["sessions"][0]
    assert listed["session_id"] == looping and listed["held_steps"] == 10


def test_sessions_carry_the_environment_their_resource_names(serve: Any) -> None:
    """``deployment.environment.name``, else the older ``deployment.environment``; bounded like a service name."""
    o = serve()
    current = healthy_agent(o.grpc, service="a", resource={"deployment.environment.name": "production",
                                                            "deployment.environment": "old-name"})
    older = healthy_agent(o.grpc, service="b", resource={"deployment.environment": "staging"})
    long = healthy_agent(o.grpc, service="c", resource={"deployment.environment.name": "eu west " * 600})
    none = healthy_agent(o.grpc, service="d")
    listing = {s["session_id"]: s for s in body_of(o, "/v1/sessions", None)["sessions"]}
    assert listing[current]["environment"] == "production" and listing[older]["environment"] == "staging"
    assert listing[none]["environment"] == ""
    cut = listing[long]["environment"]
    assert cut.startswith("eu west eu") and len(cut) <= NAME_CHARS + 1
    assert body_of(o, f"/v1/sessions/{current}", None)["environment"] == "production"


def test_ranking_is_bounded_and_matches_a_full_sort() -> None:
    """The store's ranking equals sorting every session, for every verdict filter, page and query."""
    config = build_config({"state": {"max_sessions": 5000}}, env={})
    pipeline = Pipeline(config, clock=iter(range(10_000_000)).__next__)
    store = pipeline.store
    verdicts = ["continue", "nudge", "stop", "paused"]
    for n in range(2000):
        session = store.touch(f"s{n:05d}")
        session.agent = f"agent-{n % 7}"
        before = session.verdict
        v = verdicts[n % 13 % 4] if n % 3 == 0 else "continue"
        if v == "paused":
            session.pause()
        elif v != "continue":
            session.apply_votes({"trajectory": (v, "r", "m")})
        store.verdict_changed(session, before)
    rank = {"continue": 0, "nudge": 1, "stop": 2, "paused": 3}
    every = sorted(store, key=lambda s: (-rank[s.verdict], -s.last_seen))
    for verdict in (None, *verdicts):
        for query in ("", "agent-3", "s0019"):
            wanted = [s for s in every if (verdict is None or s.verdict == verdict)
                      and (not query or query in s.id or query in s.agent)]
            for offset, limit in ((0, 10), (0, 2000), (95, 30), (1990, 50)):
                page, total = store.ranked(verdict, query, offset, limit)
                assert [s.id for s in page] == [s.id for s in wanted[offset:offset + limit]]
                assert total == len(wanted)
    assert store.verdict_counts() == {v: sum(1 for s in every if s.verdict == v) for v in verdicts}


# ---------------------------------------------------------------------------------------------------
# No secret reaches the API, the stream, the console or the log, whichever detector quotes it


SECRETS = ("hunter2-Qm7x", "Zk4pL9sQ2wE8rT1yU6iO3aS5", "tok-88aa77bb66cc55dd44ee")


def test_no_secret_from_spans_reaches_any_reader(serve: Any) -> None:
    bearer, api_key, node_token = SECRETS
    o = serve({"state": {"hold_stopped_sessions": False}})  # every detector quotes, also after a stop
    events = []
    conn = http.client.HTTPConnection(o.admin, timeout=10)
    conn.request("GET", "/v1/events")
    stream = conn.getresponse()
    assert stream.status == 200
    spans = []
    i = 0
    # drift quotes the failing command
    for _ in range(4):
        spans.append(tool_span("bash", args=json.dumps({"command": f"curl -H 'Authorization: Bearer {bearer}' x"}),
                               error="connection refused", trace=1, i=(i := i + 1)))
    # divergence, entropy and trajectory quote the tool name
    for _ in range(6):
        spans.append(tool_span(f"fetch?api_key={api_key}", trace=2, i=(i := i + 1)))
    # stall quotes node names
    for _ in range(4):
        for node in (f"planner token={node_token}", "coder"):
            spans.append(span(f"invoke_agent {node}", {"gen_ai.operation.name": "invoke_agent",
                                                       "gen_ai.agent.name": node,
                                                       "gen_ai.output.messages": "same"}, trace=3, i=(i := i + 1)))
    assert grpc_export(o.grpc, request(*spans)) == grpc.StatusCode.OK
    wait_for(lambda: body_of(o, "/v1/sessions", None)["counts"]["stop"] >= 2, what="findings")
    texts = [o.stderr]
    for path in ("/v1/sessions", "/v1/alerts", *(f"/v1/sessions/{t:032x}" for t in (1, 2, 3)),
                 *(f"/v1/sessions/{t:032x}/verdict" for t in (1, 2, 3))):
        texts.append(http_call("GET", f"http://{o.admin}{path}")[1].decode())
    stream.fp.raw._sock.settimeout(5)  # type: ignore[union-attr]
    while sum(t.count("event: finding") for t in events) < 5:
        events.append(stream.readline().decode())
    conn.close()
    texts += events
    joined = "\n".join(texts)
    detectors = {d for d in ("drift", "divergence", "entropy", "trajectory", "stall")
                 if f'"detector": "{d}"' in joined or f'"detector":"{d}"' in joined}
    assert detectors == {"drift", "divergence", "entropy", "trajectory", "stall"}
    for secret in SECRETS:
        assert secret not in joined, secret
    assert "***" in joined


async def test_a_page_of_sessions_out_of_100k() -> None:
    """With 100,000 live sessions the listing answers one bounded page, the flagged sessions first."""
    from aiohttp.test_utils import TestClient, TestServer

    pipeline = Pipeline(build_config({"state": {"max_sessions": 200_000}}, env={}))
    store = pipeline.store
    for n in range(100_000):
        store.touch(f"s{n:06d}")
    for n in (17, 50_000, 99_998):
        session = store.get(f"s{n:06d}")
        assert session is not None
        session.apply_votes({"trajectory": ("nudge" if n != 50_000 else "stop", "r", "m")})
        store.verdict_changed(session, "continue")
    api = AdminAPI(pipeline, lambda: (True, ""))
    async with TestClient(TestServer(api.app)) as client:
        r = await client.get("/v1/sessions?limit=100")
        body = await r.json()
    assert r.status == 200 and len(body["sessions"]) == 100 and body["total"] == 100_000
    assert [s["session_id"] for s in body["sessions"][:4]] == ["s050000", "s099998", "s000017", "s099999"]
    assert body["counts"] == {"continue": 99_997, "nudge": 2, "stop": 1, "paused": 0}


def test_open_pages_share_one_computation_of_the_lists(serve: Any) -> None:
    """``max_age`` answers repeat a list until the stream delivers something or a session is paused."""
    o = serve()
    first = looping_agent(o.grpc)
    shared = "/v1/sessions?limit=100&findings=false&max_age=5"
    before = body_of(o, shared, None)
    assert "findings" not in before["sessions"][0]
    second = healthy_agent(o.grpc)
    assert body_of(o, shared, None) == before  # no stream client: nothing delivered, the answer is shared
    assert second in {s["session_id"] for s in body_of(o, "/v1/sessions", None)["sessions"]}  # no max_age: fresh
    assert http_call("POST", f"http://{o.admin}/v1/sessions/{first}/pause", b"")[0] == 200
    after = body_of(o, shared, None)
    assert after != before and after["counts"]["paused"] == 1 and after["total"] == 2
    assert http_call("GET", f"http://{o.admin}/v1/sessions?max_age=x")[0] == 400


def test_the_alerts_index_keeps_the_latest_sessions_only() -> None:
    from otelloop.model import Finding
    from otelloop.state import ALERTS_KEPT

    pipeline = Pipeline()
    store = pipeline.store
    warn = [Finding("divergence", "otelloop.divergence_suspected", "warn")]
    info = [Finding("rate", "otelloop.cost_rate_exceeded", "info")]
    for n in range(ALERTS_KEPT + 50):
        session = store.touch(f"s{n}")
        store.findings_seen(session, "ab" * 16, warn)
    store.findings_seen(store.touch("quiet"), "cd" * 16, info)
    assert len(store.alerts) == ALERTS_KEPT and "quiet" not in store.alerts
    assert [s.id for s, _ in store.latest_alerts(3)] == [f"s{ALERTS_KEPT + 49}", f"s{ALERTS_KEPT + 48}",
                                                         f"s{ALERTS_KEPT + 47}"]
    assert store.latest_alerts(1)[0][1] == "ab" * 16
